package portal_test

import (
	"net/http"
	"strings"
	"testing"

	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/portal/portaltest"
)

// TestHostedC2SPAsTheREADMESays (issue 29, point 8; issue 33) pins what the README
// says of C2SP on the hosted log: hash tiles and checkpoints need no token (public
// hashes), and entry bundles need the tenant's token (the tenant's log is private by
// default) and hold the leaves appended with their contents.
func TestHostedC2SPAsTheREADMESays(t *testing.T) {
	e := portaltest.Start(t, portaltest.Options{})
	reg := newBrowser(t, e.URL).must(http.StatusOK, "POST", "/api/register", registerBody("ada@example.com", "acme"))
	token, _ := reg["token"].(string)
	logtest.AppendAt(t, e.LogURL, "acme", token, strings.Repeat("ab", 32))
	base := e.LogURL + "/t/acme"
	for _, c := range []struct {
		path, token string
		code        int
		body        string
	}{
		{"/tile/0/000.p/1", "", http.StatusOK, ""},
		{"/tile/0/000.p/1", token, http.StatusOK, ""},
		{"/tile/entries/000.p/1", token, http.StatusOK, "\x00\x40" + strings.Repeat("ab", 32)},
		{"/tile/entries/000.p/1", "", http.StatusUnauthorized, "unauthorized"},
		{"/checkpoint", "", http.StatusNotFound, "no checkpoint published yet"}, // every hour here
	} {
		code, _, body := testkit.Do(t, http.MethodGet, base+c.path, c.token, "")
		if code != c.code || !strings.Contains(body, c.body) {
			t.Errorf("GET %s (token %v): %d %q, want %d %q", c.path, c.token != "", code, body, c.code, c.body)
		}
	}
}
