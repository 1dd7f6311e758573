package admin

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// TestOperatorPage drives the page as a browser without JavaScript would: the Basic
// prompt's credentials, forms posted with the page's csrf field.
func TestOperatorPage(t *testing.T) {
	f := start(t, false)
	alice := basicAuth("alice", adminToken)
	status, hdr, body := f.do(t, call{method: "GET", path: "/admin", auth: alice})
	if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/html") || !strings.Contains(string(body), "Signed in as alice (127.0.0.1)") {
		t.Fatalf("page: %d %s\n%s", status, hdr.Get("Content-Type"), body)
	}
	if strings.Contains(string(body), "<script") || strings.Contains(string(body), adminToken) {
		t.Fatal("the page carries a script or the admin token")
	}
	csrf := regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`).FindStringSubmatch(string(body))
	if csrf == nil {
		t.Fatal("no csrf field in the page's forms")
	}
	post := func(form url.Values) (int, string) {
		t.Helper()
		status, _, body := f.do(t, call{method: "POST", path: "/admin/page", body: form.Encode(), auth: alice,
			header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}})
		return status, string(body)
	}
	if s, _ := post(url.Values{"action": {"add"}, "id": {"acme"}}); s != http.StatusForbidden {
		t.Fatalf("a form without the csrf field: %d, want 403", s)
	}
	if len(f.view.Tenants()) != 0 {
		t.Fatal("a form without csrf created a tenant")
	}
	s, page := post(url.Values{"csrf": {csrf[1]}, "action": {"add"}, "id": {"acme"}, "logId": {"log.example/acme"}})
	if s != 200 || !strings.Contains(page, "tenant acme added") || !strings.Contains(page, "log.example/acme") {
		t.Fatalf("add tenant: %d\n%s", s, page)
	}
	if s, page := post(url.Values{"csrf": {csrf[1]}, "action": {"add"}, "id": {"acme"}}); s != http.StatusConflict || !strings.Contains(page, "tenant exists") {
		t.Fatalf("add twice: %d", s)
	}
	s, page = post(url.Values{"csrf": {csrf[1]}, "action": {"token"}, "tenant": {"acme"}, "label": {"laptop"}})
	m := regexp.MustCompile(`<code id="new-token">([0-9a-f]{64})</code>`).FindStringSubmatch(page)
	if s != 200 || m == nil {
		t.Fatalf("add token: %d\n%s", s, page)
	}
	token := m[1]
	if !f.view.Authorized("acme", token) {
		t.Fatal("the token shown is not live")
	}
	_, _, again := f.do(t, call{method: "GET", path: "/admin", auth: alice})
	if strings.Contains(string(again), token) {
		t.Fatal("the token is shown a second time")
	}
	tn, _ := f.view.Tenant("acme")
	if !strings.Contains(string(again), tn.Tokens[0].TokenHash) || !strings.Contains(string(again), "laptop") {
		t.Fatal("the page does not list the live token")
	}
	if s, page := post(url.Values{"csrf": {csrf[1]}, "action": {"plan"}, "tenant": {"acme"}, "plan": {"team"}}); s != 200 || !strings.Contains(page, "is on plan team") || !strings.Contains(page, "0 / 1000000") {
		t.Fatalf("set plan: %d\n%s", s, page)
	}
	if s, _ := post(url.Values{"csrf": {csrf[1]}, "action": {"revoke"}, "tenant": {"acme"}, "prefix": {tn.Tokens[0].TokenHash}}); s != 200 || f.view.Authorized("acme", token) {
		t.Fatalf("revoke: %d, still live %v", s, f.view.Authorized("acme", token))
	}
	if s, page := post(url.Values{"csrf": {csrf[1]}, "action": {"disable"}, "tenant": {"acme"}}); s != 200 || !strings.Contains(page, "(disabled)") {
		t.Fatalf("disable: %d", s)
	}
	got, _ := f.view.Tenant("acme")
	if !got.Disabled || got.Plan != "team" {
		t.Fatalf("after the page's actions: %+v", got)
	}
	if s, _, _ := f.do(t, call{method: "GET", path: "/admin", auth: basicAuth("alice", "wrong")}); s != 401 {
		t.Fatalf("page with a wrong password: %d", s)
	}
}
