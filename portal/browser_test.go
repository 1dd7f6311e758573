package portal_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"svc.dev/svc/client"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/logexport"
	"svc.dev/svc/portal/portaltest"
)

// TestPortalInBrowser drives the portal's pages in Debian's headless Chromium
// (/usr/bin/chromium, new empty profile) against the real stack: `svc portal`'s handler
// over the database-backed hosted log, billing against stripe-mock. It registers and
// sees the first API key once (gone after a reload); appends with it; copies the
// export command with the page's copy button (read back from the clipboard) and runs
// it with the svc binary, whose export must add up to exactly the leaves appended; is
// shown the server's own error for a taken tenant; logs out and in; creates a key,
// appends with it, revokes it in the page and sees the log refuse it while the first
// key still works; starts checkout, after which the page navigates to the checkout
// address /api/checkout returned; after a signed checkout.session.completed webhook
// shows the team plan and opens the billing portal the same way (the provider's
// pages are answered by the test, so nothing leaves the machine). Every page runs
// under Content-Security-Policy default-src 'self' (added by the test); any
// exception, script error or policy violation the page reports fails the test.
//
// Screenshots (register, dashboard with the first key, refused registration, log in,
// keys with a new key shown, the revoke dialog, the narrow viewport, checkout, team
// plan, billing portal) are written as PNG files to
// $SVC_TEST_ARTIFACTS/TestPortalInBrowser when that variable is set, else to a
// directory under the test's temporary directory (removed after the test; the log
// names it). Without Chromium the test skips, except in CI (CI set), where it fails.
func TestPortalInBrowser(t *testing.T) {
	st := portaltest.Start(t, portaltest.Options{Billing: true})
	b := startChromium(t, st.URL)
	ic := intercept(t, b, st.URL)

	const (
		email    = "ada@example.com"
		password = "correct horse battery"
		tenant   = "acme-research"
		appended = 7
	)

	// Register: the page shows the first key, once.
	b.do("open the portal", chromedp.Navigate(st.URL+"/"), visibleCSS("#register-form"))
	b.screenshot("register")
	// Everything the page loaded came from the portal itself.
	if foreign := eval[[]string](b, "resources", `performance.getEntriesByType('resource').map(r => r.name).filter(n => !n.startsWith(location.origin + '/'))`); len(foreign) > 0 {
		t.Errorf("the page loaded resources from elsewhere: %q", foreign)
	}
	t.Logf("first page: %s", eval[string](b, "timing", `(() => { const n = performance.getEntriesByType('navigation')[0]; const r = performance.getEntriesByType('resource'); return r.length + ' requests after the document, ' + Math.round(r.reduce((a, e) => a + e.transferSize, n.transferSize) / 1024) + ' KiB transferred, DOMContentLoaded at ' + Math.round(n.domContentLoadedEventEnd) + ' ms'; })()`))
	b.do("register",
		fill("#register-email", email), fill("#register-password", password), fill("#register-tenant", tenant),
		click("#register-form button[type=submit]"), visibleCSS("#new-token"))
	token := b.value("#new-token-value")
	if !hex64.MatchString(token) {
		t.Fatalf("the page shows the new key %q; want 64 hex", token)
	}
	if got := b.textOf("#d-tenant"); got != tenant {
		t.Errorf("dashboard names tenant %q, want %q", got, tenant)
	}
	if got := b.textOf("#d-plan"); got != "free" {
		t.Errorf("dashboard shows plan %q, want free", got)
	}
	b.screenshot("dashboard-first-key")

	// The key appends to the hosted log at once.
	for i := range appended {
		if code, body := appendLeaf(t, st.LogURL, tenant, token, i); code != http.StatusOK {
			t.Fatalf("append %d with the registered key: %d %s", i, code, body)
		}
	}

	checkpoint(t, st, tenant)

	// Shown once: after a reload the page does not have the key anywhere.
	b.do("reload", chromedp.Reload(), visibleCSS("#view-dashboard"), chromedp.WaitVisible(chromedp.CSS("#keys-table tbody tr")))
	if b.visible("#new-token") {
		t.Error("the new-key panel is still shown after a reload")
	}
	if eval[bool](b, "search the page for the key", fmt.Sprintf(`document.documentElement.outerHTML.includes(%q) || [...document.querySelectorAll('input, textarea')].some(e => e.value.includes(%q))`, token, token)) {
		t.Error("the key is still in the page after a reload")
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		b.do("refresh", click("#refresh"))
		if got := b.textOf("#d-tree-size"); got != fmt.Sprintf("%d leaves", appended) {
			return fmt.Errorf("tree size shows %q, want %d leaves", got, appended)
		}
		if got := b.textOf("#d-used"); got != fmt.Sprint(appended) {
			return fmt.Errorf("usage shows %q appends, want %d", got, appended)
		}
		if got := b.textOf("#d-checkpoint"); !strings.HasPrefix(got, fmt.Sprintf("%d leaves, signed ", appended)) {
			return fmt.Errorf("latest checkpoint shows %q, want %d leaves", got, appended)
		}
		if got := b.textOf("#d-root"); !hex64.MatchString(got) {
			return fmt.Errorf("root shows %q", got)
		}
		return nil
	})

	// Copy the export command with the page's button and run it.
	command := b.value("#d-export")
	b.do("copy the export command", click("button[data-copy=d-export]"))
	if got := eval[string](b, "read the clipboard", `navigator.clipboard.readText()`); got != command {
		t.Fatalf("the clipboard holds %q; the page shows %q", got, command)
	}
	runExport(t, command, token, appended)

	// A taken tenant: the page shows the server's own error text.
	b.do("log out", click("#logout"), visibleCSS("#login-form"))
	if b.visible("#account") {
		t.Error("the account menu is still shown after logging out")
	}
	b.do("register the same tenant again",
		chromedp.Navigate(st.URL+"/#/register"), visibleCSS("#register-form"),
		fill("#register-email", "other@example.com"), fill("#register-password", password), fill("#register-tenant", tenant),
		click("#register-form button[type=submit]"), visibleCSS("#error"))
	// The same request from outside the page: its error text is what the page shows.
	code, _, refusal := newBrowser(t, st.URL).do(http.MethodPost, "/api/register", fmt.Sprintf(`{"email":"third@example.com","password":%q,"tenant":%q}`, password, tenant))
	said, _ := refusal["error"].(string)
	if code != http.StatusConflict || said == "" {
		t.Errorf("registering a taken tenant: %d %v; want 409 with an error", code, refusal)
	}
	if shown := b.textOf("#error"); !strings.EqualFold(shown, said) {
		t.Errorf("after a refused registration the page shows %q; the server said %q", shown, said)
	}
	b.screenshot("register-refused")
	b.do("the log-in page", chromedp.Navigate(st.URL+"/#/login"), visibleCSS("#login-form"))
	b.screenshot("login")
	if b.visible("#error") {
		t.Errorf("the log-in page still shows the registration's error %q", b.textOf("#error"))
	}

	// Log in again.
	// Log in again with the keyboard only: the first Tab reaches the skip link, the
	// form takes Tab between its fields and Enter submits it.
	b.do("open log in", chromedp.Navigate(st.URL+"/#/login"), chromedp.Reload(), visibleCSS("#login-form"), chromedp.KeyEvent(kb.Tab))
	if got := eval[string](b, "focus", `document.activeElement && document.activeElement.className`); got != "skip" {
		t.Errorf("the first Tab focuses %q, want the skip link", got)
	}
	b.do("log in",
		chromedp.Focus(chromedp.CSS("#login-email")), chromedp.KeyEvent(email), chromedp.KeyEvent(kb.Tab),
		chromedp.KeyEvent(password), chromedp.KeyEvent(kb.Enter),
		visibleCSS("#view-dashboard"), chromedp.WaitVisible(chromedp.CSS("#keys-table tbody tr")))
	if got := b.textOf("#account-email"); got != email {
		t.Errorf("signed in as %q, want %q", got, email)
	}

	// Create a key: shown once, focus on it, it appends.
	b.do("create a key", fill("#key-label", "ci runner"), click("#key-form button[type=submit]"), visibleCSS("#new-token"))
	second := b.value("#new-token-value")
	if !hex64.MatchString(second) || second == token {
		t.Fatalf("the second key is %q", second)
	}
	if got := eval[string](b, "focus", `document.activeElement && document.activeElement.id`); got != "new-token-title" {
		t.Errorf("focus is on %q after creating a key, want the new key's heading", got)
	}
	hash := hashPrefix(second)
	b.do("the key is listed", chromedp.WaitVisible(chromedp.CSS(`#keys-table tr[data-hash="`+hash+`"]`)))
	b.screenshot("keys-new-key")
	if code, body := appendLeaf(t, st.LogURL, tenant, second, appended); code != http.StatusOK {
		t.Fatalf("append with the new key: %d %s", code, body)
	}

	// Revoke it in the page: the log refuses it, the first key still works.
	b.do("open the revoke dialog", click(`#keys-table tr[data-hash="`+hash+`"] button.revoke`), visibleCSS("#revoke-dialog"))
	if got := eval[string](b, "focus", `document.activeElement && document.activeElement.id`); got != "revoke-cancel" {
		t.Errorf("focus is on %q in the revoke dialog, want Cancel", got)
	}
	b.screenshot("revoke-dialog")
	b.do("revoke", click("#revoke-confirm"), chromedp.WaitVisible(chromedp.CSS(`#keys-table tr.revoked[data-hash="`+hash+`"]`)))
	testkit.Eventually(t, 5*time.Second, func() error {
		if code, body := appendLeaf(t, st.LogURL, tenant, second, appended+1); code != http.StatusUnauthorized {
			return fmt.Errorf("append with the revoked key: %d %s; want 401", code, body)
		}
		return nil
	})
	if code, body := appendLeaf(t, st.LogURL, tenant, token, appended+2); code != http.StatusOK {
		t.Errorf("append with the first key after revoking the second: %d %s", code, body)
	}

	// Narrow viewport.
	b.do("narrow", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Sleep(300*time.Millisecond))
	if w := eval[int](b, "page width", `document.documentElement.scrollWidth`); w > 390 {
		t.Errorf("at 390 px wide the page is %d px wide (scrolls sideways)", w)
	}
	b.screenshot("dashboard-narrow")
	b.do("wide", chromedp.EmulateViewport(1280, 900))

	// Billing: checkout goes to the provider; once its signed webhook says the
	// checkout completed, the page shows the team plan and manages billing instead.
	leaveFor(t, b, ic, "#upgrade", "checkout")
	if code, body := deliver(t, st, event("evt_browser_test", tenant, "cus_browser_test"), st.WebhookSecret, time.Now()); code != http.StatusOK {
		t.Fatalf("checkout.session.completed webhook: %d %s", code, body)
	}
	b.do("back to the portal", chromedp.Navigate(st.URL+"/"), visibleCSS("#view-dashboard"))
	testkit.Eventually(t, 10*time.Second, func() error {
		b.do("refresh", click("#refresh"))
		if got := b.textOf("#d-plan"); got != "team" {
			return fmt.Errorf("plan shows %q after the checkout webhook, want team", got)
		}
		if b.visible("#upgrade") || !b.visible("#manage") {
			return fmt.Errorf("on team: upgrade shown %v, manage shown %v", b.visible("#upgrade"), b.visible("#manage"))
		}
		return nil
	})
	b.screenshot("dashboard-team")
	leaveFor(t, b, ic, "#manage", "billing portal")
	b.noProblems()
}

// strictCSP is added to every page the portal serves during the test, whatever the
// server sends, so a page that needs more than its own origin fails the test.
const strictCSP = "default-src 'self'; base-uri 'none'; form-action 'self'"

// interceptor is the test's hand on the page's requests: it adds strictCSP to the
// portal's documents, records the address /api/checkout answers with, and answers
// any https request (the provider's checkout page) itself, so nothing leaves the
// machine.
type interceptor struct {
	mu       sync.Mutex
	answered string // url in the last answer of /api/checkout or /api/billing-portal
	visited  string // the first https document the page then requested
}

func intercept(t *testing.T, b *tab, origin string) *interceptor {
	t.Helper()
	paused := chromedp.Events(b.ctx, fetch.RequestPaused)
	_, err := chromedp.Call(b.ctx, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{
		{URLPattern: origin + "/*", ResourceType: network.ResourceTypeDocument, RequestStage: fetch.RequestStageResponse},
		{URLPattern: "*/api/checkout", RequestStage: fetch.RequestStageResponse},
		{URLPattern: "*/api/billing-portal", RequestStage: fetch.RequestStageResponse},
		{URLPattern: "https://*", RequestStage: fetch.RequestStageRequest},
	}})
	if err != nil {
		t.Fatalf("intercept requests: %v", err)
	}
	ic := &interceptor{}
	go func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			ic.handle(b.ctx, ev)
		}
	}()
	return ic
}

func (ic *interceptor) handle(ctx context.Context, ev fetch.EventRequestPaused) {
	switch {
	case ev.ResponseStatusCode != 0 && ev.ResourceType == network.ResourceTypeDocument:
		// The page is answered again, as the server sent it plus the policy.
		res, err := chromedp.Call(ctx, fetch.GetResponseBody, fetch.GetResponseBodyParams{RequestID: ev.RequestID})
		if err != nil {
			_, _ = chromedp.Call(ctx, fetch.FailRequest, fetch.FailRequestParams{RequestID: ev.RequestID, ErrorReason: network.ErrorReasonFailed})
			return
		}
		headers := append(ev.ResponseHeaders, &fetch.HeaderEntry{Name: "Content-Security-Policy", Value: strictCSP})
		_, _ = chromedp.Call(ctx, fetch.FulfillRequest, fetch.FulfillRequestParams{RequestID: ev.RequestID, ResponseCode: ev.ResponseStatusCode, ResponseHeaders: headers, Body: res.Body})
	case ev.ResponseStatusCode != 0: // the answer of /api/checkout or /api/billing-portal
		res, err := chromedp.Call(ctx, fetch.GetResponseBody, fetch.GetResponseBodyParams{RequestID: ev.RequestID})
		var v struct {
			URL string `json:"url"`
		}
		if err == nil {
			_ = json.Unmarshal(res.Body, &v)
		}
		ic.mu.Lock()
		ic.answered = v.URL
		ic.mu.Unlock()
		_, _ = chromedp.Call(ctx, fetch.ContinueResponse, fetch.ContinueResponseParams{RequestID: ev.RequestID})
	default:
		ic.mu.Lock()
		if ic.visited == "" && ev.ResourceType == network.ResourceTypeDocument {
			ic.visited = ev.Request.URL
		}
		ic.mu.Unlock()
		_, _ = chromedp.Call(ctx, fetch.FulfillRequest, fetch.FulfillRequestParams{
			RequestID: ev.RequestID, ResponseCode: 200,
			ResponseHeaders: []*fetch.HeaderEntry{{Name: "Content-Type", Value: "text/html"}},
			Body:            fmt.Appendf(nil, "<!doctype html><title>checkout</title><p>The provider's checkout page, answered by the test, at <code>%s</code>", html.EscapeString(ev.Request.URL)),
		})
	}
}

// leaveFor clicks the billing button sel and checks that the page goes to the https
// address its route (/api/checkout or /api/billing-portal) answered with.
func leaveFor(t *testing.T, b *tab, ic *interceptor, sel, what string) {
	t.Helper()
	if !b.visible(sel) {
		t.Fatalf("no %s button (billing note: %q)", what, b.textOf("#billing-off"))
	}
	ic.mu.Lock()
	ic.answered, ic.visited = "", ""
	ic.mu.Unlock()
	b.do(what, click(sel))
	testkit.Eventually(t, 15*time.Second, func() error {
		loc, err := chromedp.Run(b.ctx, chromedp.Location())
		if err != nil {
			return err
		}
		ic.mu.Lock()
		defer ic.mu.Unlock()
		if ic.answered == "" || !sameURL(loc, ic.answered) || !sameURL(ic.visited, ic.answered) {
			return fmt.Errorf("%s: page at %q, requested %q; the portal answered %q", what, loc, ic.visited, ic.answered)
		}
		return nil
	})
	ic.mu.Lock()
	answered := ic.answered
	ic.mu.Unlock()
	if u, _ := url.Parse(answered); u == nil || u.Scheme != "https" {
		t.Errorf("%s address %q is not https", what, answered)
	}
	b.do("the provider's page", visibleCSS("p"))
	b.screenshot(strings.ReplaceAll(what, " ", "-"))
}

// sameURL compares two addresses as the browser sees them (it escapes what the
// server may leave raw, such as braces).
func sameURL(a, b string) bool {
	ua, errA := url.Parse(a)
	ub, errB := url.Parse(b)
	return errA == nil && errB == nil && ua.String() == ub.String()
}

// checkpoint has the log sign tenant's head now (it does so hourly otherwise).
func checkpoint(t *testing.T, st *portaltest.Env, tenant string) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() error {
		cp := st.Log.Checkpointer(tenant)
		if cp == nil {
			return fmt.Errorf("no checkpointer for %s yet", tenant)
		}
		return cp.Tick(context.Background())
	})
}

// appendLeaf appends hash-only leaf i to tenant with token and returns the status.
func appendLeaf(t *testing.T, logURL, tenant, token string, i int) (int, string) {
	t.Helper()
	h := sha256.Sum256(fmt.Appendf(nil, "browser test leaf %d", i))
	code, _, body := testkit.Do(t, http.MethodPost, client.TenantBase(logURL, tenant)+"/append", token, fmt.Sprintf(`{"leafHash":%q}`, hex.EncodeToString(h[:])))
	return code, body
}

// hashPrefix is the 12-hex prefix of the token's SHA-256, as the keys list shows it.
func hashPrefix(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])[:12]
}

// runExport runs the export command line the page shows, with svc being the test's
// binary and the environment variable it names holding token, in a fresh directory;
// the export must add up to exactly want leaves.
func runExport(t *testing.T, command, token string, want int) {
	t.Helper()
	// A leading NAME=<placeholder> assignment is where the reader puts a key; the
	// test sets the variable --token-env names itself.
	line := regexp.MustCompile(`^(\s*[A-Za-z_][A-Za-z0-9_]*=\S+\s+)+`).ReplaceAllString(command, "")
	words, err := shellWords(line)
	if err != nil {
		t.Fatalf("export command %q: %v", command, err)
	}
	env := os.Environ()
	if len(words) < 2 || words[0] != "svc" || words[1] != "log-export" {
		t.Fatalf("export command %q does not run svc log-export", command)
	}
	tokenEnv, out := "", ""
	for i := 2; i+1 < len(words); i++ {
		switch words[i] {
		case "--token-env":
			tokenEnv = words[i+1]
		case "--out":
			out = words[i+1]
		}
	}
	if tokenEnv == "" || out == "" {
		t.Fatalf("export command %q lacks --token-env or --out", command)
	}
	dir := t.TempDir()
	cmd := exec.Command(svcPath, words[1:]...)
	cmd.Dir = dir
	cmd.Env = append(env, tokenEnv+"="+token)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", command, err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "EXPORT ADDS UP") {
		t.Fatalf("%s did not add up:\n%s", command, stdout.String())
	}
	if !filepath.IsAbs(out) {
		out = filepath.Join(dir, out)
	}
	data, err := os.ReadFile(filepath.Join(out, "export.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sum logexport.Summary
	if err := json.Unmarshal(data, &sum); err != nil {
		t.Fatalf("export.json: %v", err)
	}
	if sum.TreeSize != uint64(want) || sum.Counts.Leaves != uint64(want) {
		t.Errorf("the export holds %d leaves at tree size %d; %d were appended", sum.Counts.Leaves, sum.TreeSize, want)
	}
	t.Logf("ran %q: %d leaves, root %s", command, sum.Counts.Leaves, sum.RootHash)
}

// shellWords splits a command line as a POSIX shell would for words, single and
// double quotes and backslashes; it refuses anything else a shell would interpret.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord, quote := false, rune(0)
	for i, r := range s {
		switch {
		case quote == '\'':
			if r == '\'' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case quote == '"':
			if r == '"' {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '\\' && i+1 < len(s) && s[i+1] == '\n':
			// a line continuation
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case strings.ContainsRune("|&;<>()$`*?", r):
			return nil, fmt.Errorf("%q at offset %d needs a shell", r, i)
		case r == '\\':
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated quote")
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
