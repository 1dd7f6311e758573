package logservice

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/testkit"
)

// TestCredentialsBeforeTheTenantStarts: on every route that needs a tenant's token
// (append, /add, leaves, usage, audit, tiles), a request with no token, a wrong token
// or another tenant's token is 401 and does not start the tenant (no sequencer, no
// lease), nor keep an active tenant from going quiet; the tenant's own token starts it.
func TestCredentialsBeforeTheTenantStarts(t *testing.T) {
	srv, dbURL, key := hostedParts(t)
	a, url := frontEndWith(t, t.TempDir(), natsembed.URL(srv, "pw-of-tests"), dbURL, key, slog.New(slog.DiscardHandler),
		Hosted{LeaseTTL: 2 * time.Second, QuietPeriod: 500 * time.Millisecond}, 1)
	tokAcme := addTenant(t, a, "acme")
	tokGlobex := addTenant(t, a, "globex")
	routes := []struct{ method, path, contentType, body string }{
		{"POST", "/t/acme/append", "application/json", `{"leaf":"x"}`},
		{"POST", "/t/acme/add", "application/octet-stream", "an entry"},
		{"GET", "/t/acme/leaves?since=0", "", ""},
		{"GET", "/t/acme/usage", "", ""},
		{"GET", "/t/acme/audit", "", ""},
		{"GET", "/t/acme/tile/0/000", "", ""},
	}
	send := func(method, path, contentType, body, token string) int {
		req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, _ := testkit.Send(t, req)
		return resp.StatusCode
	}
	inactive := func() error {
		if a.Sequencer("acme") != nil {
			return fmt.Errorf("acme's sequencer runs")
		}
		if n := leases(t, a.Conn()); n != 0 {
			return fmt.Errorf("%d leases held", n)
		}
		return nil
	}
	bad := map[string]string{"no token": "", "a wrong token": strings.Repeat("0", 64), "globex's token": tokGlobex}
	for _, r := range routes {
		for what, tok := range bad {
			if s := send(r.method, r.path, r.contentType, r.body, tok); s != http.StatusUnauthorized {
				t.Fatalf("%s %s with %s: %d, want 401", r.method, r.path, what, s)
			}
			if err := inactive(); err != nil {
				t.Fatalf("%s %s with %s started the tenant: %v", r.method, r.path, what, err)
			}
		}
	}
	// Its own token starts it (so the checks above can see a start).
	if s := send("POST", "/t/acme/append", "application/json", `{"leaf":"first"}`, tokAcme); s != 200 {
		t.Fatalf("append with acme's token: %d", s)
	}
	if inactive() == nil {
		t.Fatal("acme's own token did not start it: the checks above see nothing")
	}
	// Refused requests do not keep it active: it goes quiet while they go on.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			r := routes[i%len(routes)]
			send(r.method, r.path, r.contentType, r.body, []string{"", tokGlobex}[i%2])
		}
	}()
	testkit.Eventually(t, 10*time.Second, inactive)
	close(stop)
	<-done
}
