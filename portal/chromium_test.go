package portal_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// chromiumPath finds Debian's Chromium (SVC_CHROMIUM overrides). Without one the browser
// tests skip on a developer's machine and fail in CI (CI set), where the setup task installs
// the chromium package.
func chromiumPath(t *testing.T) string {
	t.Helper()
	candidates := []string{os.Getenv("SVC_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"}
	for _, p := range candidates {
		if p == "" {
			continue
		}
		if _, err := exec.LookPath(p); err == nil {
			return p
		}
	}
	msg := "no Chromium at /usr/bin/chromium (or SVC_CHROMIUM): install Debian's chromium package (go tool task setup does)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg + "; CI's test task installs it, so CI must have it")
	}
	t.Skip(msg)
	return ""
}

// artifactDir is where the browser tests write their screenshots: SVC_TEST_ARTIFACTS
// when set (kept after the test), else a directory under the test's temporary
// directory (removed with it).
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("SVC_TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(t.TempDir(), "artifacts")
	}
	dir = filepath.Join(dir, t.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots go to %s", dir)
	return dir
}

// tab is one headless Chromium with one tab, started with a new empty profile.
type tab struct {
	t         *testing.T
	ctx       context.Context
	artifacts string
	shots     int

	mu       sync.Mutex
	problems []string // page errors: exceptions, CSP and script errors
}

// step bounds every browser action.
const step = 30 * time.Second

// startChromium starts Chromium headless with the flags a CI box needs and nothing
// that talks to the network on its own, and grants the clipboard to origin.
func startChromium(t *testing.T, origin string) *tab {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("use-mock-keychain", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	b := &tab{t: t, ctx: ctx, artifacts: artifactDir(t)}
	// The first Run starts the browser; its context must not have a deadline.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	b.collectProblems()
	for _, name := range []string{"clipboard-read", "clipboard-write"} {
		_, err := chromedp.CallBrowser(ctx, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
			Permission: &cdpbrowser.PermissionDescriptor{Name: name, AllowWithoutSanitization: true},
			Setting:    cdpbrowser.PermissionSettingGranted, Origin: origin,
		})
		if err != nil {
			t.Fatalf("grant %s: %v", name, err)
		}
	}
	b.do("viewport", chromedp.EmulateViewport(1280, 900))
	return b
}

// collectProblems records uncaught exceptions and error entries of the page's log
// other than failed loads (a 401 from /api/me before logging in is expected). A
// Content-Security-Policy violation is such an entry.
func (b *tab) collectProblems() {
	exceptions := chromedp.Events(b.ctx, runtime.ExceptionThrown)
	entries := chromedp.Events(b.ctx, cdplog.EntryAdded)
	if _, err := chromedp.Call(b.ctx, cdplog.Enable, cdp.Empty{}); err != nil {
		b.t.Fatalf("enable the log domain: %v", err)
	}
	go func() {
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			d := ev.ExceptionDetails
			text := d.Text
			if d.Exception != nil && d.Exception.Description != "" {
				text += " " + d.Exception.Description
			}
			b.problem(fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber+1, text))
		}
	}()
	go func() {
		for ev, err := range entries {
			if err != nil {
				return
			}
			e := ev.Entry
			if e.Level == cdplog.EntryLevelError && e.Source != cdplog.EntrySourceNetwork {
				b.problem(fmt.Sprintf("%s error: %s (%s)", e.Source, e.Text, e.URL))
			}
		}
	}()
}

func (b *tab) problem(s string) {
	b.mu.Lock()
	b.problems = append(b.problems, s)
	b.mu.Unlock()
}

// noProblems fails the test if the page logged an error or threw.
func (b *tab) noProblems() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		b.t.Errorf("the page reported: %s", p)
	}
	b.problems = nil
}

// do runs steps within one step's time; what names them in a failure.
func (b *tab) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.fail(what, err)
	}
}

func (b *tab) fail(what string, err error) {
	b.t.Helper()
	if errors.Is(err, context.DeadlineExceeded) {
		b.screenshot("failure")
	}
	b.t.Fatalf("%s: %v (page error: %q)", what, err, b.textOf("#error"))
}

// textOf is the text of the first element matching sel, or "" when there is none.
func (b *tab) textOf(sel string) string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, sel)))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(s)
}

// eval runs a JavaScript expression in the page, awaiting a promise.
func eval[T any](b *tab, what, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		b.fail(what, err)
	}
	return v
}

// value is the value of the form field matching the CSS selector sel.
func (b *tab) value(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Value(chromedp.CSS(sel)))
	if err != nil {
		b.fail("value of "+sel, err)
	}
	return v
}

// visible reports whether the element matching sel is shown (present, not hidden).
func (b *tab) visible(sel string) bool {
	b.t.Helper()
	return eval[bool](b, "is "+sel+" visible", fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.offsetParent !== null; })()`, sel))
}

// screenshot writes the whole page as NN-name.png into the artifact directory.
func (b *tab) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, step)
	defer cancel()
	var buf []byte
	var err error
	// A page that has just navigated may not be laid out yet ("0 width"): retry.
	for try := 0; try < 5; try++ {
		if buf, err = chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	b.shots++
	path := filepath.Join(b.artifacts, fmt.Sprintf("%02d-%s.png", b.shots, name))
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	b.t.Logf("screenshot %s", path)
}

// fill types text into the field matching sel after clearing it.
func fill(sel, text string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(chromedp.Clear(chromedp.CSS(sel)), chromedp.SendKeys(chromedp.CSS(sel), text))
}

// click clicks the element matching the CSS selector sel once it is visible.
func click(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible)
}

// visibleCSS waits until the element matching sel is visible.
func visibleCSS(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(sel))
}
