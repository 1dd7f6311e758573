package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/httplimits"
	"svc.dev/svc/internal/pgtest"
	"svc.dev/svc/internal/store"
	"svc.dev/svc/internal/tenancy"
	"svc.dev/svc/internal/testkit"
)

const adminToken = "admin-secret-0123456789abcdefghijklmn"

type fixture struct {
	url   string
	h     *Handler
	view  *tenancy.View
	store *store.Store
}

func start(t *testing.T, trustProxy bool) *fixture {
	t.Helper()
	return startWith(t, func(c *Config) { c.TrustProxy = httplimits.Proxy{First: trustProxy} })
}

// startWith serves the admin routes over a real listener, with configure applied to
// the fixture's Config.
func startWith(t *testing.T, configure func(*Config)) *fixture {
	t.Helper()
	_, js := testkit.Broker(t)()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := store.Open(ctx, pgtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	go st.Run(ctx, js)
	v := tenancy.NewView(js, nil, nil)
	if err := v.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Token: adminToken, Admin: &tenancy.Admin{JS: js, View: v}, View: v, Store: st, PublicURL: "https://log.example", Logger: slog.New(slog.DiscardHandler)}
	configure(&cfg)
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return &fixture{url: hs.URL, h: h, view: v, store: st}
}

type call struct {
	method, path, body string
	auth               func(*http.Request)
	header             map[string]string
}

func bearerAuth(tok string) func(*http.Request) {
	return func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+tok) }
}

func basicAuth(user, pass string) func(*http.Request) {
	return func(r *http.Request) { r.SetBasicAuth(user, pass) }
}

func (f *fixture) do(t *testing.T, c call) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(c.method, f.url+c.path, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	if c.auth != nil {
		c.auth(req)
	}
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range c.header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body
}

func (f *fixture) ok(t *testing.T, c call, want int, v any) {
	t.Helper()
	if c.auth == nil {
		c.auth = bearerAuth(adminToken)
	}
	status, _, body := f.do(t, c)
	if status != want {
		t.Fatalf("%s %s: status %d, want %d: %s", c.method, c.path, status, want, body)
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("%s %s: %v: %s", c.method, c.path, err, body)
		}
	}
}

var routes = []call{
	{method: "GET", path: "/admin"},
	{method: "GET", path: "/admin/tenants"},
	{method: "POST", path: "/admin/tenants", body: `{"id":"x1"}`},
	{method: "POST", path: "/admin/tenants/acme/disable"},
	{method: "POST", path: "/admin/tenants/acme/plan", body: `{"plan":"team"}`},
	{method: "POST", path: "/admin/tenants/acme/public", body: `{"public":true}`},
	{method: "GET", path: "/admin/tenants/acme/tokens"},
	{method: "POST", path: "/admin/tenants/acme/tokens", body: `{"label":"x"}`},
	{method: "POST", path: "/admin/tenants/acme/tokens/abcdefabcdef/revoke"},
	{method: "GET", path: "/admin/usage?month=2026-11"},
	{method: "GET", path: "/admin/usage.csv"},
	{method: "GET", path: "/admin/audit?tenant=acme&limit=5"},
	{method: "GET", path: "/admin/info"},
}

// TestEveryRouteNeedsTheAdminToken: no credentials and wrong credentials (bearer, or
// Basic with the wrong password) get 401 on every route, and nothing changes.
func TestEveryRouteNeedsTheAdminToken(t *testing.T) {
	f := start(t, true)
	for i, r := range routes {
		for j, auth := range []func(*http.Request){nil, bearerAuth("wrong"), basicAuth("admin", "wrong"), bearerAuth(adminToken + "x")} {
			c := r
			c.auth = auth
			// A distinct forwarded address per attempt keeps the throttle out of this test.
			c.header = map[string]string{"X-Forwarded-For": fmt.Sprintf("10.0.%d.%d", i, j)}
			status, hdr, body := f.do(t, c)
			if status != http.StatusUnauthorized || !strings.Contains(string(body), `"unauthorized"`) {
				t.Fatalf("%s %s with credentials #%d: %d %s, want 401 unauthorized", r.method, r.path, j, status, body)
			}
			if !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Basic") {
				t.Fatalf("%s %s: no Basic challenge for the browser prompt", r.method, r.path)
			}
		}
	}
	if n := len(f.view.Tenants()); n != 0 {
		t.Fatalf("unauthorized requests created %d tenants", n)
	}
}

// TestThrottle: after five wrong attempts an address is refused with 429 for a
// minute, even with the right token; another address is not. With TrustProxy the
// address is the first X-Forwarded-For entry.
func TestThrottle(t *testing.T) {
	f := start(t, true)
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	f.h.cfg.Now = func() time.Time { return now }
	from := func(addr string, tok string) int {
		status, _, _ := f.do(t, call{method: "GET", path: "/admin/info", auth: bearerAuth(tok), header: map[string]string{"X-Forwarded-For": addr + ", 10.9.9.9"}})
		return status
	}
	for i := range MaxFailures {
		if s := from("203.0.113.7", "wrong"); s != http.StatusUnauthorized {
			t.Fatalf("wrong attempt %d: %d", i+1, s)
		}
	}
	status, hdr, _ := f.do(t, call{method: "GET", path: "/admin/info", auth: bearerAuth(adminToken), header: map[string]string{"X-Forwarded-For": "203.0.113.7"}})
	if status != http.StatusTooManyRequests || hdr.Get("Retry-After") != "60" {
		t.Fatalf("right token from a throttled address: %d Retry-After %q, want 429 and 60", status, hdr.Get("Retry-After"))
	}
	if s := from("203.0.113.8", adminToken); s != http.StatusOK {
		t.Fatalf("another address: %d", s)
	}
	now = now.Add(ThrottleFor + time.Second)
	if s := from("203.0.113.7", adminToken); s != http.StatusOK {
		t.Fatalf("after a minute: %d", s)
	}

	// Without TrustProxy the forwarded header is ignored: the peer is throttled.
	g := start(t, false)
	for range MaxFailures {
		g.do(t, call{method: "GET", path: "/admin/info", auth: bearerAuth("wrong"), header: map[string]string{"X-Forwarded-For": "198.51.100.1"}})
	}
	if s, _, _ := g.do(t, call{method: "GET", path: "/admin/info", auth: bearerAuth(adminToken), header: map[string]string{"X-Forwarded-For": "198.51.100.2"}}); s != http.StatusTooManyRequests {
		t.Fatalf("a forged X-Forwarded-For escaped the throttle without --trust-proxy: %d", s)
	}
}

type tenantResp struct {
	Tenant tenantJSON `json:"tenant"`
}

// TestAdminRoutes walks every route with the right token and its errors.
func TestAdminRoutes(t *testing.T) {
	f := start(t, false)
	var tr tenantResp
	f.ok(t, call{method: "POST", path: "/admin/tenants", body: `{"id":"acme","logId":"log.example/acme"}`}, 201, &tr)
	if tr.Tenant.ID != "acme" || tr.Tenant.Plan != "free" || tr.Tenant.Quota == nil || *tr.Tenant.Quota != 10000 || tr.Tenant.LogID != "log.example/acme" {
		t.Fatalf("created %+v", tr.Tenant)
	}
	f.ok(t, call{method: "POST", path: "/admin/tenants", body: `{"id":"globex"}`, auth: basicAuth("alice", adminToken)}, 201, nil)
	f.ok(t, call{method: "POST", path: "/admin/tenants", body: `{"id":"acme"}`}, 409, nil)
	f.ok(t, call{method: "POST", path: "/admin/tenants", body: `{"id":"Not Valid"}`}, 400, nil)
	f.ok(t, call{method: "POST", path: "/admin/tenants", body: `{"id":"x","extra":1}`}, 400, nil)
	f.ok(t, call{method: "POST", path: "/admin/tenants", body: `{"id":"` + strings.Repeat("a", MaxBody) + `"}`}, 413, nil)
	var list struct{ Tenants []tenantJSON }
	f.ok(t, call{method: "GET", path: "/admin/tenants"}, 200, &list)
	if len(list.Tenants) != 2 || list.Tenants[0].ID != "acme" || list.Tenants[1].ID != "globex" {
		t.Fatalf("tenants %+v", list.Tenants)
	}

	f.ok(t, call{method: "POST", path: "/admin/tenants/acme/plan", body: `{"plan":"team"}`}, 200, &tr)
	if tr.Tenant.Plan != "team" || *tr.Tenant.Quota != 1000000 {
		t.Fatalf("after plan: %+v", tr.Tenant)
	}
	f.ok(t, call{method: "POST", path: "/admin/tenants/acme/plan", body: `{"plan":"gold"}`}, 400, nil)
	f.ok(t, call{method: "POST", path: "/admin/tenants/nobody/plan", body: `{"plan":"team"}`}, 404, nil)
	var pub struct{ Public bool }
	f.ok(t, call{method: "POST", path: "/admin/tenants/acme/public", body: `{"public":true}`}, 200, &pub)
	if !pub.Public {
		t.Fatal("the log was not made public")
	}
	f.ok(t, call{method: "POST", path: "/admin/tenants/acme/public", body: `{"public":false}`}, 200, &pub)
	if pub.Public {
		t.Fatal("the log was not made private again")
	}
	f.ok(t, call{method: "POST", path: "/admin/tenants/acme/public", body: `{}`}, 400, nil)
	f.ok(t, call{method: "POST", path: "/admin/tenants/nobody/public", body: `{"public":true}`}, 404, nil)

	var tok struct{ Token, TokenHash, Welcome string }
	f.ok(t, call{method: "POST", path: "/admin/tenants/acme/tokens", body: `{"label":"ci"}`}, 201, &tok)
	if len(tok.Token) != 64 || len(tok.TokenHash) != 12 || !strings.Contains(tok.Welcome, "https://log.example/t/acme/append") {
		t.Fatalf("token answer %+v", tok)
	}
	f.ok(t, call{method: "POST", path: "/admin/tenants/nobody/tokens", body: `{"label":"ci"}`}, 404, nil)
	_, _, raw := f.do(t, call{method: "GET", path: "/admin/tenants/acme/tokens", auth: bearerAuth(adminToken)})
	if strings.Contains(string(raw), tok.Token) || strings.Count(string(raw), tok.TokenHash) != 1 {
		t.Fatalf("token list shows the token, or not its prefix: %s", raw)
	}
	var toks struct{ Tokens []map[string]any }
	f.ok(t, call{method: "GET", path: "/admin/tenants/acme/tokens"}, 200, &toks)
	if len(toks.Tokens) != 1 || toks.Tokens[0]["label"] != "ci" || toks.Tokens[0]["revokedAt"] != nil {
		t.Fatalf("tokens %+v", toks.Tokens)
	}
	f.ok(t, call{method: "GET", path: "/admin/tenants/nobody/tokens"}, 404, nil)
	if !f.view.Authorized("acme", tok.Token) {
		t.Fatal("the new token is not live in the view")
	}
	f.ok(t, call{method: "POST", path: "/admin/tenants/globex/tokens/" + tok.TokenHash + "/revoke"}, 404, nil)
	var rv struct{ Revoked int }
	f.ok(t, call{method: "POST", path: "/admin/tenants/acme/tokens/" + tok.TokenHash + "/revoke"}, 200, &rv)
	if rv.Revoked != 1 || f.view.Authorized("acme", tok.Token) {
		t.Fatalf("revoke: %+v; still live: %v", rv, f.view.Authorized("acme", tok.Token))
	}
	f.ok(t, call{method: "POST", path: "/admin/tenants/acme/tokens/" + tok.TokenHash + "/revoke"}, 404, nil)
	f.ok(t, call{method: "POST", path: "/admin/tenants/acme/tokens/zz/revoke"}, 400, nil)

	f.ok(t, call{method: "POST", path: "/admin/tenants/globex/disable"}, 200, &tr)
	if !tr.Tenant.Disabled {
		t.Fatal("not disabled")
	}
	f.ok(t, call{method: "POST", path: "/admin/tenants/nobody/disable"}, 404, nil)

	var usage struct {
		Month   string
		Tenants []usageLine
	}
	f.ok(t, call{method: "GET", path: "/admin/usage?month=2026-11"}, 200, &usage)
	if usage.Month != "2026-11" || len(usage.Tenants) != 2 || usage.Tenants[1].Disabled != true || usage.Tenants[0].LiveTokens != 0 {
		t.Fatalf("usage %+v", usage)
	}
	f.ok(t, call{method: "GET", path: "/admin/usage?month=11-2026"}, 400, nil)
	status, hdr, csvBody := f.do(t, call{method: "GET", path: "/admin/usage.csv?month=2026-11", auth: bearerAuth(adminToken)})
	lines := strings.Split(strings.TrimSpace(string(csvBody)), "\n")
	if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/csv") || lines[0] != strings.Join(CSVHeader, ",") || len(lines) != 3 ||
		lines[1] != "2026-11,acme,log.example/acme,team,0,1000000,0,0,false" || lines[2] != "2026-11,globex,,free,0,10000,0,0,true" {
		t.Fatalf("usage.csv %d:\n%s", status, csvBody)
	}

	// The audit trail (PostgreSQL, a projection) catches up: actors as SPEC.md says.
	testkit.Eventually(t, 5*time.Second, func() error {
		var a struct{ Entries []client.AuditEntry }
		f.ok(t, call{method: "GET", path: "/admin/audit?limit=100"}, 200, &a)
		if len(a.Entries) != 8 { // with the two log.public events
			return fmt.Errorf("%d audit entries, want 8", len(a.Entries))
		}
		if a.Entries[0].Action != "tenant.disable" || a.Entries[0].TenantID != "globex" || a.Entries[0].Actor != "bearer" {
			return fmt.Errorf("newest entry %+v", a.Entries[0])
		}
		if last := a.Entries[7]; last.Action != "tenant.add" || last.TenantID != "acme" {
			return fmt.Errorf("oldest entry %+v", last)
		}
		if e := a.Entries[6]; e.Actor != "alice (127.0.0.1)" {
			return fmt.Errorf("Basic actor %q, want \"alice (127.0.0.1)\"", e.Actor)
		}
		for _, e := range a.Entries {
			if strings.Contains(e.Detail, tok.Token) {
				return fmt.Errorf("audit entry holds the token: %+v", e)
			}
		}
		return nil
	})
	var one struct{ Entries []client.AuditEntry }
	f.ok(t, call{method: "GET", path: "/admin/audit?tenant=globex&limit=1"}, 200, &one)
	if len(one.Entries) != 1 || one.Entries[0].TenantID != "globex" {
		t.Fatalf("filtered audit %+v", one.Entries)
	}
	f.ok(t, call{method: "GET", path: "/admin/audit?limit=x"}, 400, nil)
	var info map[string]any
	f.ok(t, call{method: "GET", path: "/admin/info"}, 200, &info)
	if info["database"] != true || info["tenants"] != float64(2) || info["publicUrl"] != "https://log.example" {
		t.Fatalf("info %+v", info)
	}
	f.ok(t, call{method: "GET", path: "/admin/nothing"}, 404, nil)
}
