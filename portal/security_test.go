package portal_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"svc.dev/svc/httplimits"
	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/internal/tenancy"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/portal"
	"svc.dev/svc/portal/portaltest"
)

func sessionCookie(t *testing.T, h http.Header) *http.Cookie {
	t.Helper()
	for _, line := range h.Values("Set-Cookie") {
		c, err := http.ParseSetCookie(line)
		if err == nil && c.Name == portal.CookieName && c.Value != "" {
			return c
		}
	}
	t.Fatalf("no session cookie in %v", h.Values("Set-Cookie"))
	return nil
}

// TestCrossSiteFormPostRefused: a form or text body (what a cross-site form or a
// "simple" fetch can send) is refused with 415 before anything happens, whether
// or not the browser carries a session cookie.
func TestCrossSiteFormPostRefused(t *testing.T) {
	e := portaltest.Start(t, portaltest.Options{})
	b := newBrowser(t, e.URL)
	for _, ct := range []string{"application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "text/plain", ""} {
		code, _, body := b.raw("POST", "/api/register", ct, registerBody("eve@example.com", "eve"))
		if code != http.StatusUnsupportedMediaType || !strings.Contains(body, `"error"`) {
			t.Fatalf("register with %q: %d %s", ct, code, body)
		}
	}
	b.must(http.StatusUnauthorized, "GET", "/api/me", "") // no account, no session came of it
	b.must(http.StatusOK, "POST", "/api/register", registerBody("ada@example.com", "acme"))
	for _, path := range []string{"/api/keys", "/api/logout", "/api/checkout"} {
		if code, _, body := b.raw("POST", path, "text/plain", `{"label":"x"}`); code != http.StatusUnsupportedMediaType {
			t.Fatalf("%s as text/plain with a session: %d %s", path, code, body)
		}
	}
	if keys := b.must(http.StatusOK, "GET", "/api/keys", "")["keys"].([]any); len(keys) != 1 {
		t.Fatalf("a refused post added a key: %v", keys)
	}
	b.must(http.StatusOK, "GET", "/api/me", "") // and did not log out
}

// TestCookieFlags: HttpOnly, SameSite=Strict, Path=/, not Secure on http; Secure
// when the public URL is https.
func TestCookieFlags(t *testing.T) {
	e := portaltest.Start(t, portaltest.Options{})
	_, h, _ := newBrowser(t, e.URL).do("POST", "/api/register", registerBody("ada@example.com", "acme"))
	c := sessionCookie(t, h)
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure || c.MaxAge <= 0 {
		t.Fatalf("cookie %+v", c)
	}
	es := portaltest.Start(t, portaltest.Options{Configure: func(c *portal.Config) { c.PublicURL = "https://log.example.com" }})
	_, h, _ = newBrowser(t, es.URL).do("POST", "/api/register", registerBody("ada@example.com", "acme"))
	if c := sessionCookie(t, h); !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Fatalf("cookie with an https public URL %+v", c)
	}
	_, h, _ = newBrowser(t, es.URL).do("POST", "/api/login", `{"email":"ada@example.com","password":"correct horse battery"}`)
	if c := sessionCookie(t, h); !c.Secure {
		t.Fatalf("login cookie %+v", c)
	}
}

// TestRegistrationThrottle: five registrations from one address, then 429 with
// Retry-After; X-Forwarded-For counts only with TrustProxy.
func TestRegistrationThrottle(t *testing.T) {
	for _, trust := range []bool{false, true} {
		e := portaltest.Start(t, portaltest.Options{Configure: func(c *portal.Config) { c.TrustProxy = httplimits.Proxy{First: trust} }})
		b := newBrowser(t, e.URL)
		b.addr = "203.0.113.7"
		for i := range 5 {
			b.must(http.StatusOK, "POST", "/api/register", registerBody("u"+itoa(i)+"@example.com", "team-"+itoa(i)))
		}
		code, h, m := b.do("POST", "/api/register", registerBody("u9@example.com", "team-9"))
		if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" || m["error"] == nil {
			t.Fatalf("sixth registration: %d %v %v", code, h, m)
		}
		b.addr = "203.0.113.8" // another address behind the proxy
		code, _, m = b.do("POST", "/api/register", registerBody("u9@example.com", "team-9"))
		if trust && code != http.StatusOK || !trust && code != http.StatusTooManyRequests {
			t.Fatalf("trust-proxy %v, another forwarded address: %d %v", trust, code, m)
		}
	}
}

func itoa(i int) string { return string(rune('0' + i)) }

// TestLoginThrottle: wrong passwords from one address get 401 until the burst is
// used, then 429 even for the right password; another address is unaffected.
func TestLoginThrottle(t *testing.T) {
	e := portaltest.Start(t, portaltest.Options{Configure: func(c *portal.Config) { c.TrustProxy = httplimits.Proxy{First: true}; c.LoginBurst = 4 }})
	newBrowser(t, e.URL).must(http.StatusOK, "POST", "/api/register", registerBody("ada@example.com", "acme"))
	b := newBrowser(t, e.URL)
	b.addr = "198.51.100.1"
	for range 4 {
		b.must(http.StatusUnauthorized, "POST", "/api/login", `{"email":"ada@example.com","password":"guess guess guess"}`)
	}
	code, h, _ := b.do("POST", "/api/login", `{"email":"ada@example.com","password":"correct horse battery"}`)
	if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" {
		t.Fatalf("login past the throttle: %d", code)
	}
	b.addr = "198.51.100.2"
	b.must(http.StatusOK, "POST", "/api/login", `{"email":"ada@example.com","password":"correct horse battery"}`)
}

// TestOtherTenantInvisible: an account sees only its own tenant's keys, usage and
// audit, and cannot revoke another tenant's key.
func TestOtherTenantInvisible(t *testing.T) {
	e := portaltest.Start(t, portaltest.Options{})
	a, b := newBrowser(t, e.URL), newBrowser(t, e.URL)
	ra := a.must(http.StatusOK, "POST", "/api/register", registerBody("a@example.com", "alpha"))
	b.must(http.StatusOK, "POST", "/api/register", registerBody("b@example.com", "bravo"))
	for i := range 3 {
		logtest.AppendAt(t, e.LogURL, "alpha", ra["token"].(string), strings.Repeat(string("xyz"[i]), 64))
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if ov := a.must(http.StatusOK, "GET", "/api/overview", ""); len(ov["audit"].([]any)) < 2 {
			return errorf("alpha's audit not yet projected")
		}
		return nil
	})
	ov := b.must(http.StatusOK, "GET", "/api/overview", "")
	if ov["tenant"] != "bravo" || ov["used"] != 0.0 || ov["treeSize"] != 0.0 || len(ov["keys"].([]any)) != 1 {
		t.Fatalf("bravo's overview %v", ov)
	}
	for _, m := range ov["months"].([]any) {
		if m.(map[string]any)["appends"] != 0.0 {
			t.Fatalf("bravo's months show alpha's appends: %v", ov["months"])
		}
	}
	for _, en := range ov["audit"].([]any) {
		if en.(map[string]any)["tenantId"] != "bravo" || strings.Contains(en.(map[string]any)["actor"].(string), "a@example.com") {
			t.Fatalf("bravo sees %v", en)
		}
	}
	if k := b.must(http.StatusOK, "GET", "/api/keys", "")["keys"].([]any); len(k) != 1 || k[0].(map[string]any)["hash"] == ra["tokenHash"] {
		t.Fatalf("bravo's keys %v", k)
	}
	b.must(http.StatusNotFound, "POST", "/api/keys/"+ra["tokenHash"].(string)+"/revoke", `{}`)
	logtest.AppendAt(t, e.LogURL, "alpha", ra["token"].(string), strings.Repeat("0", 64)) // still live
	// A tenant name in the body or query changes nothing.
	b.must(http.StatusBadRequest, "POST", "/api/keys", `{"label":"x","tenant":"alpha"}`)
	if ov := b.must(http.StatusOK, "GET", "/api/overview?tenant=alpha", ""); ov["tenant"] != "bravo" {
		t.Fatalf("overview?tenant=alpha gave %v", ov["tenant"])
	}
}

// TestForgedAndReplayedCookies: a cookie with a changed id or MAC, one signed with
// another secret, and a cookie kept after logout all get 401.
func TestForgedAndReplayedCookies(t *testing.T) {
	e := portaltest.Start(t, portaltest.Options{})
	b := newBrowser(t, e.URL)
	_, h, _ := b.do("POST", "/api/register", registerBody("ada@example.com", "acme"))
	c := sessionCookie(t, h)
	with := func(value string) int {
		req, _ := http.NewRequest("GET", e.URL+"/api/me", nil)
		req.AddCookie(&http.Cookie{Name: portal.CookieName, Value: value})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := with(c.Value); code != http.StatusOK {
		t.Fatalf("the real cookie: %d", code)
	}
	id, mac, _ := strings.Cut(c.Value, ".")
	flip := func(s string) string {
		r := []byte(s)
		if r[3] == 'A' {
			r[3] = 'B'
		} else {
			r[3] = 'A'
		}
		return string(r)
	}
	other := portaltest.Start(t, portaltest.Options{Configure: func(c *portal.Config) {
		c.Secret = []byte("another-secret-of-at-least-32-bytes!!")
	}})
	_, oh, _ := newBrowser(t, other.URL).do("POST", "/api/register", registerBody("ada@example.com", "acme"))
	_, otherMAC, _ := strings.Cut(sessionCookie(t, oh).Value, ".")
	for name, v := range map[string]string{
		"changed id": flip(id) + "." + mac, "changed mac": id + "." + flip(mac), "no mac": id,
		"empty": "", "another secret's mac": id + "." + otherMAC, "garbage": "x.y",
	} {
		if code := with(v); code != http.StatusUnauthorized {
			t.Errorf("%s: %d", name, code)
		}
	}
	b.must(http.StatusOK, "POST", "/api/logout", `{}`)
	if code := with(c.Value); code != http.StatusUnauthorized {
		t.Fatalf("cookie replayed after logout: %d", code)
	}
	b.must(http.StatusUnauthorized, "POST", "/api/logout", `{}`)

	// A session past its lifetime ends, cookie or not.
	short := portaltest.Start(t, portaltest.Options{Configure: func(c *portal.Config) { c.SessionTTL = time.Second }})
	sb := newBrowser(t, short.URL)
	_, sh, _ := sb.do("POST", "/api/register", registerBody("ada@example.com", "acme"))
	kept := sessionCookie(t, sh).Value
	sb.must(http.StatusOK, "GET", "/api/me", "")
	time.Sleep(1100 * time.Millisecond)
	req, _ := http.NewRequest("GET", short.URL+"/api/me", nil)
	req.AddCookie(&http.Cookie{Name: portal.CookieName, Value: kept})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an expired session: %d", resp.StatusCode)
	}
}

// TestCredentialsBeforeBody: a write without a session is refused 401 before its
// (oversized) body is read; with a session the cap answers 413; bad fields 400.
func TestCredentialsBeforeBody(t *testing.T) {
	e := portaltest.Start(t, portaltest.Options{})
	big := `{"label":"` + strings.Repeat("x", portal.MaxBody) + `"}`
	b := newBrowser(t, e.URL)
	b.must(http.StatusUnauthorized, "POST", "/api/keys", big)
	b.must(http.StatusRequestEntityTooLarge, "POST", "/api/register", `{"email":"`+strings.Repeat("x", portal.MaxBody)+`"}`)
	for _, body := range []string{
		`{"email":"ada","password":"correct horse battery","tenant":"acme"}`,
		`{"email":"ada@example.com","password":"short","tenant":"acme"}`,
		`{"email":"ada@example.com","password":"correct horse battery","tenant":"AC"}`,
		`{"email":"ada@example.com","password":"correct horse battery","tenant":"Acme!"}`,
		`{"email":"ada@example.com","password":"correct horse battery","tenant":"` + strings.Repeat("a", 41) + `"}`,
		`{"email":"ada@example.com","password":"correct horse battery","tenant":"acme","plan":"team"}`,
		`not json`,
	} {
		code, _, m := b.do("POST", "/api/register", body)
		if code != http.StatusBadRequest || m["error"] == "" {
			t.Fatalf("register %s: %d %v", body, code, m)
		}
	}
	b.must(http.StatusOK, "POST", "/api/register", registerBody("ada@example.com", "acme"))
	b.must(http.StatusRequestEntityTooLarge, "POST", "/api/keys", big)
	b.must(http.StatusBadRequest, "POST", "/api/keys", `{"label":""}`)
	// Taken email and taken tenant: 409, and nothing half made.
	c := newBrowser(t, e.URL)
	c.must(http.StatusConflict, "POST", "/api/register", registerBody("ada@example.com", "other"))
	c.must(http.StatusConflict, "POST", "/api/register", registerBody("bo@example.com", "acme"))
	c.must(http.StatusUnauthorized, "POST", "/api/login", `{"email":"bo@example.com","password":"correct horse battery"}`)
	c.must(http.StatusOK, "POST", "/api/register", registerBody("bo@example.com", "other")) // "other" was not taken by the refused attempt
}

// TestTenantIDRule (issue 29, point 11): the self-registration rule is the
// operator's (tenancy.CheckTenantID) with SPEC's 3-to-40 on top, checked before
// anything is created: "---" and "-ab" (not a tenant id at all) and "a_b" (an
// operator's id, not a self-registered one) are 400 naming the rule and take no
// registration from the address's allowance.
func TestTenantIDRule(t *testing.T) {
	e := portaltest.Start(t, portaltest.Options{Configure: func(c *portal.Config) { c.RegisterBurst = 1 }})
	b := newBrowser(t, e.URL)
	for _, bad := range []string{"---", "-ab", "a_b", "ab", strings.Repeat("a", 41), "Abc"} {
		code, _, m := b.do("POST", "/api/register", registerBody("ada@example.com", bad))
		if msg, _ := m["error"].(string); code != http.StatusBadRequest || !strings.Contains(msg, "3 to 40") || !strings.Contains(msg, "starting with a letter or digit") {
			t.Fatalf("tenant %q: %d %v", bad, code, m)
		}
	}
	b.must(http.StatusOK, "POST", "/api/register", registerBody("ada@example.com", "a-1"))
}

// TestPasswordHashingIsBounded: wrong logins from many loopback addresses at once
// (each inside its own per-address throttle) run at most MaxHashing scrypt
// computations at a time; the rest wait HashWait and are answered 503 with
// Retry-After, never an unbounded pile of 32 MiB hashes. The right password still
// works once the flood is over.
func TestPasswordHashingIsBounded(t *testing.T) {
	e := portaltest.Start(t, portaltest.Options{Configure: func(c *portal.Config) {
		c.Scrypt, c.MaxHashing, c.HashWait = portal.DefaultScrypt, 1, 20*time.Millisecond
	}})
	newBrowser(t, e.URL).must(http.StatusOK, "POST", "/api/register", registerBody("ada@example.com", "acme"))
	const n = 24
	codes := make([]int, n)
	retry := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			// A connection from its own loopback address, 127.0.0.<10+i>.
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(10+i))}}
			c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
			resp, err := c.Post(e.URL+"/api/login", "application/json", strings.NewReader(`{"email":"ada@example.com","password":"guess guess guess"}`))
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[i], retry[i] = resp.StatusCode, resp.Header.Get("Retry-After")
		})
	}
	wg.Wait()
	busy := 0
	for i, c := range codes {
		switch {
		case c == http.StatusServiceUnavailable && retry[i] != "":
			busy++
		case c != http.StatusUnauthorized:
			t.Errorf("login %d: %d (Retry-After %q), want 401, or 503 with Retry-After", i, c, retry[i])
		}
	}
	if busy == 0 {
		t.Fatalf("%d concurrent wrong logins with one hashing slot: none was refused 503 (%v): hashing is not bounded", n, codes)
	}
	newBrowser(t, e.URL).must(http.StatusOK, "POST", "/api/login", `{"email":"ada@example.com","password":"correct horse battery"}`)
	t.Logf("%d of %d concurrent wrong logins answered 503 with Retry-After", busy, n)
}

// TestKeysCappedAndThrottled: a tenant holds at most tenancy.MaxLiveTokens live API
// keys, even when it asks for many at once (each creation counts against the
// tenant's last event in the broker, so concurrent ones cannot overshoot); beyond,
// 409 says to revoke one, and after a revocation a key can be made again. Key
// creation is also throttled per tenant: KeyBurst, then 429 with Retry-After.
func TestKeysCappedAndThrottled(t *testing.T) {
	e := portaltest.Start(t, portaltest.Options{Configure: func(c *portal.Config) { c.KeyBurst = 1000 }})
	b := newBrowser(t, e.URL)
	b.must(http.StatusOK, "POST", "/api/register", registerBody("ada@example.com", "acme")) // its first key
	const n = 40
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { codes[i], _, _ = b.do("POST", "/api/keys", `{"label":"agent"}`) })
	}
	wg.Wait()
	made := 0
	for _, c := range codes {
		switch c {
		case http.StatusOK:
			made++
		case http.StatusConflict:
		default:
			t.Errorf("concurrent key creation answered %d", c)
		}
	}
	if made != tenancy.MaxLiveTokens-1 {
		t.Fatalf("%d concurrent creations made %d keys (%v); want %d, the cap less the first key", n, made, codes, tenancy.MaxLiveTokens-1)
	}
	code, _, m := b.do("POST", "/api/keys", `{"label":"one more"}`)
	if msg, _ := m["error"].(string); code != http.StatusConflict || !strings.Contains(msg, "revoke") {
		t.Fatalf("a key past the cap: %d %v", code, m)
	}
	keys := b.must(http.StatusOK, "GET", "/api/keys", "")["keys"].([]any)
	prefix := keys[len(keys)-1].(map[string]any)["hash"].(string)
	b.must(http.StatusOK, "POST", "/api/keys/"+prefix+"/revoke", `{}`)
	b.must(http.StatusOK, "POST", "/api/keys", `{"label":"after a revocation"}`)

	e2 := portaltest.Start(t, portaltest.Options{Configure: func(c *portal.Config) { c.KeyBurst = 3 }})
	b2 := newBrowser(t, e2.URL)
	b2.must(http.StatusOK, "POST", "/api/register", registerBody("bo@example.com", "bravo"))
	for range 3 {
		b2.must(http.StatusOK, "POST", "/api/keys", `{"label":"ci"}`)
	}
	code, h, m := b2.do("POST", "/api/keys", `{"label":"ci"}`)
	if code != http.StatusTooManyRequests || h.Get("Retry-After") == "" || m["error"] == nil {
		t.Fatalf("a fourth key at once: %d %v %v", code, h, m)
	}
}
