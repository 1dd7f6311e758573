package logserver_test

import (
	"context"
	"path/filepath"
	"testing"

	"svc.dev/svc/client"
	"svc.dev/svc/internal/logservice"

	"svc.dev/svc/internal/logserver"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// TestAuditTrailAcrossRestarts: the trail is a projection of administrative events on
// SVC_ADMIN; a token changed between two starts is recorded as revoked and added.
func TestAuditTrailAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	key, _ := signer.GenerateKey()
	start := func(token string) *logservice.Service {
		svc, err := logservice.Start(context.Background(), logservice.Config{
			DataDir: dir, Signer: receipt.KeySigner{Key: key}, Actor: "ops@host-1",
			Keys:    func(context.Context) (*signer.KeyDocument, error) { return nil, nil },
			Tenants: []logservice.TenantSpec{{ID: "acme", File: filepath.Join(dir, "acme.log"), TokenHashes: [][32]byte{logserver.HashToken(token)}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	start("first-token").Close()
	svc := start("second-token")
	defer svc.Close()
	entries := auditEntries(t, svc, "acme")
	var actions []string
	for _, e := range entries {
		actions = append(actions, e.Action)
		if e.Actor != "ops@host-1" || e.ID == "" || e.At == "" {
			t.Fatalf("entry %+v", e)
		}
	}
	want := []string{"token.add", "token.revoke", "token.add", "tenant.add"} // newest first
	if len(actions) != len(want) {
		t.Fatalf("actions %v, want %v", actions, want)
	}
	for i := range want {
		if actions[i] != want[i] {
			t.Fatalf("actions %v, want %v", actions, want)
		}
	}
	// A third start with nothing changed records nothing.
	svc.Close()
	svc = start("second-token")
	defer svc.Close()
	if n := len(auditEntries(t, svc, "acme")); n != 4 {
		t.Fatalf("an unchanged restart recorded events: %d entries", n)
	}
}

func auditEntries(t *testing.T, svc *logservice.Service, tenant string) []client.AuditEntry {
	t.Helper()
	e, err := svc.AuditEntries(tenant, 100)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
