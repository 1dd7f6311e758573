package main

import (
	"context"
	"encoding/json"
	"fmt"
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
	args := []string{"--db-env", "TEST_DATABASE_URL", "--nats-url", e.NATSURL, "--secret-env", "TEST_PORTAL_SECRET",
		"--public-url", e.LogURL, "--checkpoints-url", e.CheckpointsURL, "--port", "0"}
	base := startPortalCommand(t, args)
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

// startPortalCommand runs svc portal with args until the test ends and returns its
// base URL.
func startPortalCommand(t *testing.T, args []string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
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
	return base
}

// TestPortalNoThrottle (issue 29, point 10): with --no-throttle a local tester
// registers more than SPEC's five accounts from 127.0.0.1, failed attempts
// included; the flag is refused with a public URL, portal URL or listen address
// that is not loopback.
func TestPortalNoThrottle(t *testing.T) {
	e := portaltest.Start(t, portaltest.Options{})
	t.Setenv("TEST_DATABASE_URL", e.DBURL)
	t.Setenv("TEST_PORTAL_SECRET", strings.Repeat("s", 32))
	args := []string{"--db-env", "TEST_DATABASE_URL", "--nats-url", e.NATSURL, "--secret-env", "TEST_PORTAL_SECRET",
		"--public-url", e.LogURL, "--port", "0", "--no-throttle"}
	base := startPortalCommand(t, args)
	for i := range 8 {
		tenant := fmt.Sprintf("local-%d", i/2) // every second one is taken: a failed registration
		body := fmt.Sprintf(`{"email":"t%d@example.com","password":"correct horse battery","tenant":%q}`, i, tenant)
		req, _ := http.NewRequest("POST", base+"/api/register", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, text := testkit.Send(t, req)
		if want := []int{http.StatusOK, http.StatusConflict}[i%2]; resp.StatusCode != want {
			t.Fatalf("registration %d from 127.0.0.1 with --no-throttle: %d %s, want %d", i+1, resp.StatusCode, text, want)
		}
	}
	for flag, value := range map[string]string{"--public-url": "https://log.example.com", "--portal-url": "http://10.0.0.1:8070", "--host": "0.0.0.0"} {
		bad := append(args[:len(args):len(args)], flag, value)
		err := servePortal(context.Background(), bad, &testkit.LockedBuffer{}, nil)
		if err == nil || !strings.Contains(err.Error(), "loopback") || !strings.Contains(err.Error(), value) {
			t.Fatalf("--no-throttle with %s %s: %v", flag, value, err)
		}
	}
}
