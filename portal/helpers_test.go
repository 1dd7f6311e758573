package portal_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
)

// browser is a client with a cookie jar, like a browser tab.
type browser struct {
	t    testing.TB
	base string
	c    *http.Client
	// addr, when set, is sent as X-Forwarded-For.
	addr string
}

func newBrowser(t testing.TB, base string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, c: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// do sends method path with body (JSON content type when body is not "") and
// returns the status, headers and body decoded into a map (nil when not an object).
func (b *browser) do(method, path, body string) (int, http.Header, map[string]any) {
	b.t.Helper()
	code, h, raw := b.raw(method, path, "application/json", body)
	var m map[string]any
	_ = json.Unmarshal([]byte(raw), &m)
	return code, h, m
}

func (b *browser) raw(method, path, contentType, body string) (int, http.Header, string) {
	b.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, b.base+path, rd)
	if err != nil {
		b.t.Fatal(err)
	}
	if body != "" && contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if b.addr != "" {
		req.Header.Set("X-Forwarded-For", b.addr)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(data)
}

// must is do that fails the test unless the status is want.
func (b *browser) must(want int, method, path, body string) map[string]any {
	b.t.Helper()
	code, _, m := b.do(method, path, body)
	if code != want {
		b.t.Fatalf("%s %s: %d %v, want %d", method, path, code, m, want)
	}
	return m
}

func registerBody(email, tenant string) string {
	return `{"email":"` + email + `","password":"correct horse battery","tenant":"` + tenant + `"}`
}
