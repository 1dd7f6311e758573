package admin

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"svc.dev/svc/httplimits"
)

// TestLogIDRefusesControlCharacters: a logId is signed into every head: one with a
// control or non-printing character (a newline would forge a signed note's lines) is
// refused, as is one in the default log ids' namespace (svc-log/<tenant>: naming
// another tenant's default would share its history at the signer), with 400 and
// nothing created.
func TestLogIDRefusesControlCharacters(t *testing.T) {
	f := start(t, false)
	for _, id := range []string{"log.example/a\nsvc.dev/forged", "a\rb", "tab\there", "nul\u0000", "ls\u2028sep", "del\u007f", "svc-log/globex", "svc-log/acme"} {
		body := fmt.Sprintf(`{"id":"acme","logId":%q}`, id)
		body = strings.ReplaceAll(body, `\x`, `\u00`) // Go's %q escapes as JSON does not
		if s, _, b := f.do(t, call{method: "POST", path: "/admin/tenants", body: body, auth: bearerAuth(adminToken)}); s != http.StatusBadRequest || !strings.Contains(string(b), "logId") {
			t.Errorf("logId %q: %d %s, want 400 naming the logId", id, s, b)
		}
	}
	if n := len(f.view.Tenants()); n != 0 {
		t.Fatalf("refused logIds created %d tenants", n)
	}
	f.ok(t, call{method: "POST", path: "/admin/tenants", body: `{"id":"acme","logId":"log.example/acme ü"}`}, http.StatusCreated, nil)
}

// TestThrottleTableFullKeepsBlocks: when the table of wrong attempts is full, new
// addresses make room by dropping ones only counting, never an active block; when
// only blocks remain, the newcomer is not counted and the blocks hold.
func TestThrottleTableFullKeepsBlocks(t *testing.T) {
	f := startWith(t, func(c *Config) { c.TrustProxy = httplimits.Proxy{First: true}; c.ThrottleTable = 4 })
	from := func(addr, token string) int {
		s, _, _ := f.do(t, call{method: "GET", path: "/admin/info", auth: bearerAuth(token), header: map[string]string{"X-Forwarded-For": addr}})
		return s
	}
	for _, blocked := range []string{"198.51.100.1", "198.51.100.2"} {
		for range MaxFailures {
			from(blocked, "wrong")
		}
	}
	for i := range 50 { // many addresses, one wrong attempt each: the table overflows
		from(fmt.Sprintf("203.0.113.%d", i), "wrong")
	}
	for _, blocked := range []string{"198.51.100.1", "198.51.100.2"} {
		if s := from(blocked, adminToken); s != http.StatusTooManyRequests {
			t.Fatalf("%s, blocked before the table filled, with the right token: %d, want 429", blocked, s)
		}
	}
	for _, b := range []string{"198.51.100.3", "198.51.100.4"} {
		for range MaxFailures {
			from(b, "wrong")
		}
	}
	if s := from("192.0.2.77", "wrong"); s != http.StatusUnauthorized {
		t.Fatalf("a newcomer while the table holds only blocks: %d", s)
	}
	for _, blocked := range []string{"198.51.100.1", "198.51.100.2", "198.51.100.3", "198.51.100.4"} {
		if s := from(blocked, adminToken); s != http.StatusTooManyRequests {
			t.Fatalf("%s with the table full of blocks: %d, want 429", blocked, s)
		}
	}
}
