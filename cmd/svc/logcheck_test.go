package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/monitor"
)

// startMonitoredLog runs a real log service with tenants default and acme (token
// "tok", each with a log file), its checkpoints served read-only.
func startMonitoredLog(t *testing.T) *logtest.Log {
	return logtest.Start(t, logtest.Options{Tenants: []logtest.Tenant{
		{ID: "default", File: "default.log", Token: "tok"},
		{ID: "acme", LogID: "acme-prod", File: "acme.log", Token: "tok"},
	}})
}

// grow appends n leaves to tenant through the HTTP front and publishes a checkpoint.
func grow(t *testing.T, l *logtest.Log, tenant string, n int) {
	t.Helper()
	l.Grow(t, tenant, "cli", n)
	l.Checkpoint(t, tenant)
}

// helpCovers checks that `svc <name> --help` exits 0 and shows the usage line, a
// description, an example and every flag.
func helpCovers(t *testing.T, name string, flags ...string) {
	t.Helper()
	for _, h := range []string{"--help", "-h"} {
		code, out, errOut := runSvc(t, name, h)
		if code != 0 {
			t.Fatalf("svc %s %s: exit %d\n%s", name, h, code, errOut)
		}
		text := out + errOut
		for _, want := range []string{"Usage: svc " + name + " ", "Example:\n  ", "svc " + name + " --", "\nFlags:\n"} {
			if !strings.Contains(text, want) {
				t.Errorf("svc %s %s: lacks %q:\n%s", name, h, want, text)
			}
		}
		for _, f := range flags {
			if !strings.Contains(text, "\n  -"+f+" ") && !strings.Contains(text, "\n  -"+f+"\n") {
				t.Errorf("svc %s %s: flag -%s not listed:\n%s", name, h, f, text)
			}
			if !strings.Contains(strings.SplitN(text, "\nFlags:\n", 2)[0], "--"+f) {
				t.Errorf("svc %s %s: flag --%s not in the usage line or description", name, h, f)
			}
		}
	}
	if _, _, top := runSvc(t, "--help"); !strings.Contains(top, "  "+name+" ") {
		t.Errorf("svc --help does not list %s:\n%s", name, top)
	}
}

func TestLogCheckHelp(t *testing.T) {
	helpCovers(t, "log-check", "log-url", "checkpoints-url", "witness-url", "tenant", "max-lag", "json")
}

func TestLogCheckUsageErrors(t *testing.T) {
	checkCLIErrors(t, []cliError{
		{[]string{"log-check"}, 2, "--log-url is required"},
		{[]string{"log-check", "--log-url", "ftp://x"}, 2, "want http(s)"},
		{[]string{"log-check", "--log-url", "http://127.0.0.1:1", "--max-lag", "0"}, 2, "--max-lag must be a positive"},
		{[]string{"log-check", "--log-url", "http://127.0.0.1:1", "--tenant", "../etc"}, 2, "tenant"},
		{[]string{"log-check", "--log-url", "http://127.0.0.1:1", "extra"}, 2, "unexpected argument"},
	})
}

func TestLogCheckCommand(t *testing.T) {
	l := startMonitoredLog(t)
	grow(t, l, "default", 3)
	grow(t, l, "acme", 2)
	code, out, errOut := runSvc(t, "log-check", "--log-url", l.URL, "--checkpoints-url", l.CheckpointsURL, "--tenant", "default", "--tenant", "acme")
	if code != 0 || strings.Count(out, "\nPASS ")+1 != 12 || !strings.HasSuffix(out, "RESULT: OK (12 checks passed)\n") {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	// JSON: exactly { ok, checks: [{ tenant, name, ok, detail? }] }.
	code, out, _ = runSvc(t, "log-check", "--log-url", l.URL, "--tenant", "acme", "--json")
	var generic map[string]any
	if err := json.Unmarshal([]byte(out), &generic); err != nil || code != 0 || len(generic) != 2 || generic["ok"] != true {
		t.Fatalf("--json: exit %d %v\n%s", code, err, out)
	}
	for _, c := range generic["checks"].([]any) {
		for k := range c.(map[string]any) {
			if k != "tenant" && k != "name" && k != "ok" && k != "detail" {
				t.Fatalf("unexpected key %q in %v", k, c)
			}
		}
	}
	// The log grows and no checkpoint follows: --max-lag 1 fails once a second passed.
	l.Grow(t, "default", "lag", 2)
	testkit.Eventually(t, 15*time.Second, func() error {
		code, out, _ = runSvc(t, "log-check", "--log-url", l.URL, "--checkpoints-url", l.CheckpointsURL, "--max-lag", "1", "--json")
		var res monitor.Result
		json.Unmarshal([]byte(out), &res)
		if code == 1 && len(res.Failed()) == 1 && res.Failed()[0].Name == monitor.CheckCheckpointFreshness {
			return nil
		}
		return fmt.Errorf("log-check --max-lag 1 did not fail on freshness alone: exit %d\n%s", code, out)
	})
	// A dead log: every check fails, exit 1.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	if code, out, _ := runSvc(t, "log-check", "--log-url", dead.URL); code != 1 || !strings.Contains(out, "FAIL default health") || !strings.Contains(out, "RESULT: FAILED (6 of 6 checks failed)") {
		t.Fatalf("dead log: exit %d\n%s", code, out)
	}
}
