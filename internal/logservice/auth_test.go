package logservice

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
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
		{"GET", "/t/acme/tile/entries/000", "", ""}, // hash tiles are public (issue 33)
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

// postFrom posts an append to url from the loopback address from (its own
// connection), returning the status.
func postFrom(t *testing.T, from, url, token, body string) int {
	t.Helper()
	tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}).DialContext, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestWrongTokenFloodSharesRoundTrips: wrong tokens from 100 addresses at once, each
// within its address's recheck budget, cost the broker few round trips (the rechecks
// of one tenant share them; counted from outside, by a subscriber to the JetStream
// API), while a token minted a moment ago on another process appends at once.
func TestWrongTokenFloodSharesRoundTrips(t *testing.T) {
	srv, dbURL, key := hostedParts(t)
	a, _ := frontEnd(t, natsembed.URL(srv, "pw-of-tests"), dbURL, key)
	_, urlB := frontEnd(t, natsembed.URL(srv, "pw-of-tests"), dbURL, key)
	tok := addTenant(t, a, "acme")
	if s, body := appendTo(t, urlB, "acme", tok, "first"); s != 200 {
		t.Fatalf("append: %d %s", s, body)
	}
	nc, err := nats.Connect(natsembed.URL(srv, "pw-of-tests"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var asked atomic.Int64
	sub, err := nc.Subscribe("$JS.API.>", func(m *nats.Msg) {
		if strings.Contains(m.Subject, pipeline.AdminStream) && (strings.Contains(m.Subject, "DIRECT.GET") || strings.Contains(m.Subject, "MSG.GET")) {
			asked.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	nc.Flush()
	settled := func() int64 { nc.Flush(); time.Sleep(200 * time.Millisecond); return asked.Load() }
	before := settled()

	const addrs, each = 100, 4 // within the recheck burst of each address
	wrong := strings.Repeat("e", 64)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range addrs {
		for range each {
			wg.Go(func() {
				<-start
				if s := postFrom(t, fmt.Sprintf("127.0.1.%d", i+1), urlB+"/t/acme/append", wrong, `{"leaf":"x"}`); s != http.StatusUnauthorized {
					t.Errorf("a wrong token: %d, want 401", s)
				}
			})
		}
	}
	fresh := make(chan int, 1)
	wg.Go(func() {
		<-start
		tok2, _, err := a.Admin().AddToken(context.Background(), "test", "acme", "fresh")
		if err != nil {
			t.Error(err)
			return
		}
		fresh <- postFrom(t, "127.0.2.1", urlB+"/t/acme/append", tok2, `{"leaf":"fresh"}`)
	})
	close(start)
	wg.Wait()
	if s := <-fresh; s != 200 {
		t.Fatalf("a token minted a moment ago on the other process, during the flood: %d, want 200", s)
	}
	rounds := settled() - before
	t.Logf("%d wrong tokens from %d addresses: %d broker round trips", addrs*each, addrs, rounds)
	if rounds > addrs*each/2 {
		t.Fatalf("%d wrong tokens from %d addresses cost %d broker round trips; want them shared (at most %d)", addrs*each, addrs, rounds, addrs*each/2)
	}
}
