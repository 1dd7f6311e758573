package logserver_test

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"svc.dev/svc/internal/logservice"

	"golang.org/x/mod/sumdb/note"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// TestCheckpointNoteRoute: with the in-process key, checkpoints are also published as
// C2SP signed notes; /checkpoint serves the latest, verifiable with the published
// verifier key, its origin the tenant's log id.
func TestCheckpointNoteRoute(t *testing.T) {
	dir := t.TempDir()
	key, _ := signer.GenerateKey()
	svc, err := logservice.Start(context.Background(), logservice.Config{
		DataDir: dir, Signer: receipt.KeySigner{Key: key}, NoteKey: key,
		Keys:    func(context.Context) (*signer.KeyDocument, error) { return nil, nil },
		Tenants: []logservice.TenantSpec{{ID: "acme", LogID: "log.example.com/acme"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	ts := httptest.NewServer(svc.Handler())
	defer ts.Close()
	if code, _, _ := do(t, "GET", ts.URL+"/t/acme/checkpoint", "", ""); code != 404 {
		t.Fatalf("before any checkpoint: %d", code)
	}
	for _, leaf := range []string{"one", "two", "three"} {
		if code, _, body := do(t, "POST", ts.URL+"/t/acme/append", "", `{"leaf":"`+leaf+`"}`); code != 200 {
			t.Fatalf("append: %d %s", code, body)
		}
	}
	if err := svc.Checkpointer("acme").Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	code, _, body := do(t, "GET", ts.URL+"/t/acme/checkpoint", "", "")
	if code != 200 || !strings.HasPrefix(body, "log.example.com/acme\n3\n") {
		t.Fatalf("/checkpoint: %d %q", code, body)
	}
	vkey, err := os.ReadFile(filepath.Join(dir, "checkpoints", "acme", "checkpoint.vkey"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(strings.TrimSpace(string(vkey)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := note.Open([]byte(body), note.VerifierList(v)); err != nil {
		t.Fatalf("the note does not verify with the published key: %v", err)
	}
}
