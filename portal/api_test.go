package portal_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/portal"
	"svc.dev/svc/portal/portaltest"
)

var (
	hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)
	hex12 = regexp.MustCompile(`^[0-9a-f]{12}$`)
)

// TestRegisterAppendKeysLogout walks the API as the front does: register (the token
// appends to the hosted log at once), me, overview, keys created, listed and
// revoked (the revoked key's appends refused), logout, login.
func TestRegisterAppendKeysLogout(t *testing.T) {
	e := portaltest.Start(t, portaltest.Options{})
	b := newBrowser(t, e.URL)
	reg := b.must(http.StatusOK, "POST", "/api/register", registerBody("Ada@Example.com", "acme"))
	token, _ := reg["token"].(string)
	if !hex64.MatchString(token) || !hex12.MatchString(reg["tokenHash"].(string)) || reg["plan"] != "free" || reg["tenant"] != "acme" || reg["logId"] == "" {
		t.Fatalf("register answered %v", reg)
	}
	if !strings.Contains(reg["exportCommand"].(string), "svc log-export --log-url "+e.LogURL+" --tenant acme --token-env SVC_LOG_TOKEN") || !strings.Contains(reg["welcome"].(string), "/t/acme/append") {
		t.Fatalf("register answered %v", reg)
	}
	// The token appends at once, to the hosted log.
	logtest.AppendAt(t, e.LogURL, "acme", token, strings.Repeat("ab", 32))
	logtest.AppendAt(t, e.LogURL, "acme", token, strings.Repeat("cd", 32))

	me := b.must(http.StatusOK, "GET", "/api/me", "")
	if me["email"] != "ada@example.com" || me["tenant"] != "acme" || me["plan"] != "free" || me["used"] != 2.0 || me["quota"] != 10000.0 || me["disabled"] != false || me["billing"] != false {
		t.Fatalf("me answered %v", me)
	}
	ov := b.must(http.StatusOK, "GET", "/api/overview", "")
	if ov["treeSize"] != 2.0 || !hex64.MatchString(ov["rootHash"].(string)) || ov["stripe"] != false || ov["billing"] != nil || ov["used"] != 2.0 {
		t.Fatalf("overview answered %v", ov)
	}
	months := ov["months"].([]any)
	if len(months) != 6 || months[5].(map[string]any)["appends"] != 2.0 || !regexp.MustCompile(`^\d{4}-\d{2}$`).MatchString(months[0].(map[string]any)["month"].(string)) {
		t.Fatalf("months %v", months)
	}
	urls := ov["urls"].(map[string]any)
	if urls["log"] != e.LogURL+"/t/acme/head" || urls["keys"] != client.KeyDocumentURL(e.LogURL, "acme") || urls["checkpoints"] != e.CheckpointsURL+"/acme/" {
		t.Fatalf("urls %v", urls)
	}
	if ov["latestCheckpoint"] != nil {
		t.Fatalf("a checkpoint before any was signed: %v", ov["latestCheckpoint"])
	}
	// The audit trail (a projection behind the broker) shows the same administrative
	// events as the admin API makes, by the portal actor.
	testkit.Eventually(t, 10*time.Second, func() error {
		ov = b.must(http.StatusOK, "GET", "/api/overview", "")
		a := ov["audit"].([]any)
		if len(a) != 2 {
			return errorf("audit %v", a)
		}
		for i, action := range []string{"token.add", "tenant.add"} {
			if en := a[i].(map[string]any); en["action"] != action || en["actor"] != "portal:ada@example.com" || en["tenantId"] != "acme" {
				return errorf("audit entry %d: %v", i, en)
			}
		}
		return nil
	})
	// A checkpoint signed by the log shows as the latest.
	if err := e.Log.Checkpointer("acme").Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		cp, _ := b.must(http.StatusOK, "GET", "/api/overview", "")["latestCheckpoint"].(map[string]any)
		if cp == nil || cp["treeSize"] != 2.0 || cp["signedAt"] == "" {
			return errorf("latestCheckpoint %v", cp)
		}
		return nil
	})

	// A second key: shown once, listed by hash, revoked; its appends then refused.
	k := b.must(http.StatusOK, "POST", "/api/keys", `{"label":"ci"}`)
	tok2 := k["token"].(string)
	if !hex64.MatchString(tok2) || k["label"] != "ci" || !hex12.MatchString(k["tokenHash"].(string)) {
		t.Fatalf("new key %v", k)
	}
	logtest.AppendAt(t, e.LogURL, "acme", tok2, strings.Repeat("ef", 32))
	keys := b.must(http.StatusOK, "GET", "/api/keys", "")["keys"].([]any)
	if len(keys) != 2 || keys[1].(map[string]any)["hash"] != k["tokenHash"] || keys[1].(map[string]any)["revokedAt"] != nil {
		t.Fatalf("keys %v", keys)
	}
	if r := b.must(http.StatusOK, "POST", "/api/keys/"+k["tokenHash"].(string)+"/revoke", `{}`); r["revoked"] != 1.0 {
		t.Fatalf("revoke %v", r)
	}
	code, _, _ := testkit.Do(t, "POST", e.LogURL+"/t/acme/append", tok2, `{"leaf":"`+strings.Repeat("01", 32)+`"}`)
	if code != http.StatusUnauthorized {
		t.Fatalf("append with a revoked key: %d", code)
	}
	keys = b.must(http.StatusOK, "GET", "/api/keys", "")["keys"].([]any)
	if keys[1].(map[string]any)["revokedAt"] == nil {
		t.Fatalf("keys after revoke %v", keys)
	}

	// Log out: the session is gone; log in again.
	b.must(http.StatusOK, "POST", "/api/logout", `{}`)
	b.must(http.StatusUnauthorized, "GET", "/api/me", "")
	b.must(http.StatusUnauthorized, "POST", "/api/login", `{"email":"ada@example.com","password":"wrong password!"}`)
	if l := b.must(http.StatusOK, "POST", "/api/login", `{"email":"ADA@example.com","password":"correct horse battery"}`); l["email"] != "ada@example.com" {
		t.Fatalf("login %v", l)
	}
	b.must(http.StatusOK, "GET", "/api/me", "")
	if h := newBrowser(t, e.URL).must(http.StatusOK, "GET", "/health", ""); h["ok"] != true || h["stripe"] != false {
		t.Fatalf("health %v", h)
	}
	// The front: served at the root, loading only its own files, never framed.
	code, h, page := b.raw("GET", "/", "", "")
	if code != http.StatusOK || !strings.Contains(strings.ToLower(page), "<html") ||
		h.Get("Content-Security-Policy") != "default-src 'self'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'" {
		t.Fatalf("GET /: %d %v", code, h)
	}
	if code, _, _ := b.raw("POST", "/", "application/json", "{}"); code != http.StatusMethodNotAllowed {
		t.Fatalf("POST /: %d", code)
	}
}

// TestExportCommandWorks: what the dashboard prints runs and opens as printed. The
// registration's welcome curl line appends with the token it shows; the overview's
// URLs (log, key document, checkpoints) answer 200; the export command, run by sh in a
// directory where bin/svc is (as after the README's build) with the token in
// SVC_LOG_TOKEN, exports a log that adds up.
func TestExportCommandWorks(t *testing.T) {
	e := portaltest.Start(t, portaltest.Options{Configure: func(c *portal.Config) { c.SvcCommand = "bin/svc" }})
	b := newBrowser(t, e.URL)
	reg := b.must(http.StatusOK, "POST", "/api/register", registerBody("bo@example.com", "bo-team"))
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(svcBinary(t), filepath.Join(dir, "bin", "svc")); err != nil {
		t.Fatal(err)
	}
	welcome := reg["welcome"].(string)
	curl, _, ok := strings.Cut(welcome[strings.Index(welcome, "curl "):], " ; ")
	if !ok || strings.Contains(curl, "<") {
		t.Fatalf("welcome has no ready curl line: %s", welcome)
	}
	if out, err := exec.Command("sh", "-c", curl+" -s").CombinedOutput(); err != nil || !strings.Contains(string(out), `"inclusion"`) {
		t.Fatalf("the welcome's curl line as printed: %v\n%s\n%s", err, curl, out)
	}
	for i := range 2 {
		logtest.AppendAt(t, e.LogURL, "bo-team", reg["token"].(string), strings.Repeat(string("abc"[i]), 64))
	}
	ov := b.must(http.StatusOK, "GET", "/api/overview", "")
	for name, u := range ov["urls"].(map[string]any) {
		resp, err := http.Get(u.(string))
		if err != nil {
			t.Fatalf("urls.%s %s: %v", name, u, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("urls.%s %s: %d %s", name, u, resp.StatusCode, body)
		}
	}
	command := ov["exportCommand"].(string)
	if !strings.HasPrefix(command, "bin/svc log-export ") {
		t.Fatalf("export command %q", command)
	}
	cmd := exec.Command("sh", "-c", command)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SVC_LOG_TOKEN="+reg["token"].(string))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", command, err, out)
	}
	if strings.Contains(string(out), "DOES NOT ADD UP") {
		t.Fatalf("export: %s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "bo-team-export", "log.jsonl")); err != nil {
		t.Fatalf("export wrote no log.jsonl: %v\n%s", err, out)
	}
}

// TestOverviewWithoutTheLog: when the portal cannot read the log's head, the
// overview shows the latest checkpoint's size and root (a pair the log signed).
func TestOverviewWithoutTheLog(t *testing.T) {
	e := portaltest.Start(t, portaltest.Options{Configure: func(c *portal.Config) { c.LogURL = "http://127.0.0.1:1" }})
	b := newBrowser(t, e.URL)
	reg := b.must(http.StatusOK, "POST", "/api/register", registerBody("ada@example.com", "acme"))
	logtest.AppendAt(t, e.LogURL, "acme", reg["token"].(string), strings.Repeat("ab", 32))
	if ov := b.must(http.StatusOK, "GET", "/api/overview", ""); ov["treeSize"] != 0.0 || ov["rootHash"] != "" {
		t.Fatalf("no head, no checkpoint: %v %v", ov["treeSize"], ov["rootHash"])
	}
	if err := e.Log.Checkpointer("acme").Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		ov := b.must(http.StatusOK, "GET", "/api/overview", "")
		cp, _ := ov["latestCheckpoint"].(map[string]any)
		if cp == nil || ov["treeSize"] != 1.0 || !hex64.MatchString(ov["rootHash"].(string)) {
			return errorf("overview %v %v %v", ov["treeSize"], ov["rootHash"], cp)
		}
		return nil
	})
}
