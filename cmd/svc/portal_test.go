package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/portal/portaltest"
)

// TestPortalCommand runs svc portal beside a database-backed log (the log of
// portaltest, whose broker and database it reaches by --nats-url and --db-env):
// a registration through it answers a token that appends to the log at once, and
// billing flags are all or none.
func TestPortalCommand(t *testing.T) {
	e := portaltest.Start(t, portaltest.Options{})
	t.Setenv("TEST_DATABASE_URL", e.DBURL)
	t.Setenv("TEST_PORTAL_SECRET", strings.Repeat("s", 32))
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	args := []string{"--db-env", "TEST_DATABASE_URL", "--nats-url", e.NATSURL, "--secret-env", "TEST_PORTAL_SECRET",
		"--public-url", e.LogURL, "--checkpoints-url", e.CheckpointsURL, "--port", "0"}
	go func() { done <- servePortal(ctx, args, &testkit.LockedBuffer{}, func(a string) { addr <- a }) }()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case err := <-done:
		t.Fatalf("svc portal stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("svc portal did not listen within 30 s")
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("svc portal: %v", err)
		}
	})
	code, _, body := testkit.Do(t, "GET", base+"/health", "", "")
	if code != http.StatusOK || !strings.Contains(body, `"stripe":false`) {
		t.Fatalf("health: %d %s", code, body)
	}
	// No session, a body announced and never sent: 401 at once, connection closed.
	refusedAtOnce(t, strings.TrimPrefix(base, "http://"), "/api/keys", "application/json", http.StatusUnauthorized)
	req, _ := http.NewRequest("POST", base+"/api/register", strings.NewReader(`{"email":"ada@example.com","password":"correct horse battery","tenant":"acme"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var reg struct{ Token, Tenant, ExportCommand string }
	if err := json.NewDecoder(resp.Body).Decode(&reg); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("register: %d %v", resp.StatusCode, err)
	}
	logtest.AppendAt(t, e.LogURL, "acme", reg.Token, strings.Repeat("ab", 32))
	if !strings.Contains(reg.ExportCommand, "--log-url "+e.LogURL+" --tenant acme") {
		t.Fatalf("export command %q", reg.ExportCommand)
	}
	page, _, html := testkit.Do(t, "GET", base+"/", "", "")
	if page != http.StatusOK || !strings.Contains(strings.ToLower(html), "<html") {
		t.Fatalf("the front: %d %.200s", page, html)
	}

	// Refused configurations.
	for _, bad := range [][]string{
		append(args[:len(args):len(args)], "--stripe-price", "price_x"),
		{"--db-env", "TEST_DATABASE_URL", "--nats-url", e.NATSURL, "--public-url", e.LogURL},
	} {
		if err := servePortal(context.Background(), bad, &testkit.LockedBuffer{}, nil); err == nil {
			t.Fatalf("svc portal %v started", bad)
		}
	}
	t.Setenv("TEST_STRIPE_KEY", "sk_test_1")
	t.Setenv("TEST_STRIPE_HOOK", "whsec_1")
	noPortalURL := append(args[:len(args):len(args)], "--stripe-secret-env", "TEST_STRIPE_KEY", "--stripe-webhook-secret-env", "TEST_STRIPE_HOOK", "--stripe-price", "price_team")
	if err := servePortal(context.Background(), noPortalURL, &testkit.LockedBuffer{}, nil); err == nil || !strings.Contains(err.Error(), "--portal-url") {
		t.Fatalf("billing without --portal-url: %v", err)
	}
	t.Setenv("TEST_SHORT_SECRET", "short")
	short := append(args[:len(args):len(args)], "--secret-env", "TEST_SHORT_SECRET")
	if err := servePortal(context.Background(), short, &testkit.LockedBuffer{}, nil); err == nil || !strings.Contains(err.Error(), "32") {
		t.Fatalf("a short secret: %v", err)
	}
}
