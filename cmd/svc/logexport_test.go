package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"svc.dev/svc/internal/testkit"
)

func TestLogExportHelp(t *testing.T) {
	helpCovers(t, "log-export", "log-url", "tenant", "token-env", "out")
}

func TestLogExportUsageErrors(t *testing.T) {
	t.Setenv("EXPORT_TOKEN_UNSET", "")
	checkCLIErrors(t, []cliError{
		{[]string{"log-export"}, 2, "are required"},
		{[]string{"log-export", "--log-url", "http://x", "--tenant", "acme", "--out", "o"}, 2, "are required"},
		{[]string{"log-export", "--log-url", "http://x", "--tenant", "acme", "--token-env", "EXPORT_TOKEN_UNSET", "--out", "o"}, 1, "EXPORT_TOKEN_UNSET"},
		{[]string{"log-export", "--log-url", "http://x", "--tenant", "acme", "--token-env", "T", "--out", "o", "extra"}, 2, "unexpected argument"},
	})
}

// TestLogExportCommand: the export of a real tenant adds up; the same export through a
// proxy that flips one byte of one leaf hash in the /leaves answer does not.
func TestLogExportCommand(t *testing.T) {
	l := startMonitoredLog(t)
	grow(t, l, "acme", 5)
	grow(t, l, "acme", 4)
	t.Setenv("EXPORT_TOKEN", "tok")
	out := filepath.Join(t.TempDir(), "acme")
	code, stdout, stderr := runSvc(t, "log-export", "--log-url", l.URL, "--tenant", "acme", "--token-env", "EXPORT_TOKEN", "--out", out)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if code != 0 || !strings.HasPrefix(lines[len(lines)-1], "EXPORT ADDS UP: tenant acme, 9 leaves") || !strings.Contains(stderr, "leaves 9/9") {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, f := range []string{"log.jsonl", "head.json", "keys.json", "checkpoints.json", "usage.json", "audit.json", "export.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Fatal(err)
		}
	}
	// The exported log file is one a verifier reads: audit two checkpoints against it.
	pub := filepath.Join(t.TempDir(), "log.pub")
	os.WriteFile(pub, []byte(l.Key.Public().PEM()), 0o644)
	cps := filepath.Join(l.Dir, "checkpoints", "acme")
	if code, o, e := runSvc(t, "audit", "--older", filepath.Join(cps, "5.json"), "--newer", filepath.Join(cps, "9.json"), "--log", filepath.Join(out, "log.jsonl"),
		"--log-key", pub); code != 0 {
		t.Fatalf("audit against the exported log.jsonl: exit %d\n%s%s", code, o, e)
	}

	tampered := testkit.FlipLeafProxy(t, l.URL)
	out2 := filepath.Join(t.TempDir(), "tampered")
	code, stdout, _ = runSvc(t, "log-export", "--log-url", tampered, "--tenant", "acme", "--token-env", "EXPORT_TOKEN", "--out", out2)
	if code != 1 || !strings.Contains(stdout, "\nEXPORT DOES NOT ADD UP\n") || !strings.Contains(stdout, "failed: leaves hash to the head's root") {
		t.Fatalf("tampered export: exit %d\n%s", code, stdout)
	}
	if _, err := os.Stat(filepath.Join(out2, "export.json")); err == nil {
		t.Fatal("a tampered export wrote export.json")
	}
}
