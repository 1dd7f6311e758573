package admin

import (
	"net/http"
	"net/url"
	"testing"
)

// TestAdminWritesRefuseCrossSite: a browser holding the operator's Basic credentials
// cannot be made to write from another site's page: a non-JSON body is 415, a
// request the browser marks cross-site (Sec-Fetch-Site) or from another Origin is
// 403, and data after the JSON value is 400. The same writes from this server's
// origin and from API clients (no such headers) pass.
func TestAdminWritesRefuseCrossSite(t *testing.T) {
	f := start(t, false)
	alice := basicAuth("alice", adminToken)
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	for _, c := range []struct {
		call
		want int
	}{
		{call{method: "POST", path: "/admin/tenants", body: `{"id":"evil1"}`, header: map[string]string{"Content-Type": "text/plain"}}, 415},
		{call{method: "POST", path: "/admin/tenants", body: `{"id":"evil2"}`, header: map[string]string{"Content-Type": ""}}, 415},
		{call{method: "POST", path: "/admin/tenants", body: `{"id":"evil3"}`, header: map[string]string{"Sec-Fetch-Site": "cross-site"}}, 403},
		{call{method: "POST", path: "/admin/tenants", body: `{"id":"evil4"}`, header: map[string]string{"Sec-Fetch-Site": "same-site"}}, 403},
		{call{method: "POST", path: "/admin/tenants", body: `{"id":"evil5"}`, header: map[string]string{"Origin": "https://evil.example"}}, 403},
		{call{method: "POST", path: "/admin/tenants", body: `{"id":"evil6"}`, header: map[string]string{"Origin": "null"}}, 403},
		{call{method: "POST", path: "/admin/tenants", body: `{"id":"evil7"} {"id":"evil8"}`}, 400},
		{call{method: "POST", path: "/admin/tenants", body: `{"id":"evil9"}x`}, 400},
		{call{method: "POST", path: "/admin/tenants/acme/disable", body: "a=b", header: form}, 415},
		{call{method: "POST", path: "/admin/tenants/acme/disable", header: map[string]string{"Sec-Fetch-Site": "cross-site"}}, 403},
		{call{method: "POST", path: "/admin/tenants/acme/tokens/abcdefabcdef/revoke", header: map[string]string{"Origin": "https://evil.example"}}, 403},
		{call{method: "POST", path: "/admin/page", body: url.Values{"action": {"add"}, "id": {"evil10"}}.Encode(), header: map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Sec-Fetch-Site": "cross-site"}}, 403},
	} {
		c.auth = alice
		if s, _, body := f.do(t, c.call); s != c.want {
			t.Errorf("%s %s %v: %d, want %d: %s", c.method, c.path, c.header, s, c.want, body)
		}
	}
	if n := len(f.view.Tenants()); n != 0 {
		t.Fatalf("refused writes created %d tenants: %v", n, f.view.Tenants())
	}
	// This server's own origin, a browser's same-origin fetch, and an API client pass.
	f.ok(t, call{method: "POST", path: "/admin/tenants", body: `{"id":"acme"}`, auth: alice, header: map[string]string{"Origin": "https://log.example", "Sec-Fetch-Site": "same-origin"}}, http.StatusCreated, nil)
	f.ok(t, call{method: "POST", path: "/admin/tenants", body: `{"id":"beta"}`, header: map[string]string{"Origin": f.url}}, http.StatusCreated, nil)
	f.ok(t, call{method: "POST", path: "/admin/tenants/beta/disable"}, http.StatusOK, nil)
}
