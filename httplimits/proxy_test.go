package httplimits_test

import (
	"net/http"
	"testing"

	"svc.dev/svc/httplimits"
)

// Each proxy form picks the entry the trusted proxies wrote; a client that prepends
// a forged entry moves only the first-entry form.
func TestClientAddrProxyForms(t *testing.T) {
	trusted, err := httplimits.ParseProxy(false, 0, "10.0.0.0/8, 192.0.2.1")
	if err != nil {
		t.Fatal(err)
	}
	hops, _ := httplimits.ParseProxy(false, 2, "")
	// The client 198.51.100.9 forged "6.6.6.6"; proxy 192.0.2.1 appended the client,
	// proxy 10.1.1.1 appended 192.0.2.1 and connected to us.
	r := &http.Request{RemoteAddr: "10.1.1.1:4000", Header: http.Header{"X-Forwarded-For": {"6.6.6.6, 198.51.100.9", "192.0.2.1"}}}
	for name, c := range map[string]struct {
		p    httplimits.Proxy
		want string
	}{
		"none": {httplimits.Proxy{}, "10.1.1.1"}, "first": {httplimits.Proxy{First: true}, "6.6.6.6"},
		"hops": {hops, "198.51.100.9"}, "trusted": {trusted, "198.51.100.9"},
	} {
		if got := httplimits.ClientAddr(r, c.p); got != c.want {
			t.Errorf("%s: %s, want %s", name, got, c.want)
		}
	}
	// A client connecting directly is its peer for the trusted form, whatever it sends.
	direct := &http.Request{RemoteAddr: "203.0.113.5:1", Header: http.Header{"X-Forwarded-For": {"10.0.0.1"}}}
	if got := httplimits.ClientAddr(direct, trusted); got != "203.0.113.5" {
		t.Errorf("direct client with a forged header: %s", got)
	}
	for _, bad := range [][2]any{{true, 1}, {false, -1}, {false, 17}} {
		if _, err := httplimits.ParseProxy(bad[0].(bool), bad[1].(int), ""); err == nil {
			t.Errorf("ParseProxy(%v, %v) accepted", bad[0], bad[1])
		}
	}
	if _, err := httplimits.ParseProxy(false, 0, "not-an-ip"); err == nil {
		t.Error("a trusted proxy that is not an address was accepted")
	}
}
