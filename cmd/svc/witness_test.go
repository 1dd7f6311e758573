package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"svc.dev/svc/client"
	"svc.dev/svc/signer"
)

func TestWitnessHelp(t *testing.T) {
	helpCovers(t, "witness", "key", "log-url", "checkpoints-url", "out", "tenant", "every", "once")
}

func TestWitnessUsageErrors(t *testing.T) {
	dir := t.TempDir()
	_, keyPath, _ := testKey(t, dir, "w")
	base := []string{"witness", "--key", keyPath, "--log-url", "http://127.0.0.1:1", "--checkpoints-url", "http://127.0.0.1:1", "--out", dir}
	checkCLIErrors(t, []cliError{
		{[]string{"witness"}, 2, "are required"},
		{[]string{"witness", "--key", keyPath, "--log-url", "http://x"}, 2, "are required"},
		{append(append([]string{}, base...), "--every", "0"), 2, "--every must be"},
		{[]string{"witness", "--key", keyPath, "--log-url", "log.example.com", "--checkpoints-url", "http://x", "--out", dir}, 2, "--log-url"},
		{append(append([]string{}, base...), "extra"), 2, "unexpected argument"},
		{append(append([]string{}, base...), "--no-such-flag"), 2, "no-such-flag"},
		{[]string{"witness", "--key", filepath.Join(dir, "missing.key"), "--log-url", "http://x", "--checkpoints-url", "http://x", "--out", dir}, 1, "missing.key"},
		{append(append([]string{}, base...), "--tenant", "a/b"), 1, "tenant"},
	})
}

// TestWitnessOnce: one cycle countersigns (exit 0); one that cannot reach the log
// exits 1 and moves nothing.
func TestWitnessOnce(t *testing.T) {
	l := startMonitoredLog(t)
	grow(t, l, "default", 4)
	grow(t, l, "acme", 2)
	dir := t.TempDir()
	wKey, keyPath, _ := testKey(t, dir, "witness")
	out := filepath.Join(dir, "out")
	args := []string{"witness", "--key", keyPath, "--log-url", l.URL, "--checkpoints-url", l.CheckpointsURL, "--out", out, "--once"}
	code, _, errOut := runSvc(t, append(args, "--tenant", "default", "--tenant", "acme")...)
	if code != 0 || !strings.Contains(errOut, "outcome=countersigned") {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	for _, f := range []string{"default/4.json", "default/latest.json", "default/state.json", "acme/2.json", ".well-known/svc-witness.json"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Fatal(err)
		}
	}
	data, _ := os.ReadFile(filepath.Join(out, "default", "latest.json"))
	cp, err := client.ParseCheckpoint(data)
	if err != nil || len(cp.File.Envelope.VerifiedBy([]signer.PublicKey{l.Key.Public(), wKey.Public()})) != 2 {
		t.Fatalf("countersigned checkpoint: %v", err)
	}
	// Without --tenant, the default tenant; nothing new: unchanged, exit 0.
	if code, _, errOut := runSvc(t, args...); code != 0 || !strings.Contains(errOut, "outcome=unchanged") {
		t.Fatalf("second cycle: exit %d\n%s", code, errOut)
	}
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	code, _, errOut = runSvc(t, "witness", "--key", keyPath, "--log-url", dead.URL, "--checkpoints-url", dead.URL, "--out", out, "--once")
	if code != 1 || !strings.Contains(errOut, "outcome=error") {
		t.Fatalf("unreachable log: exit %d\n%s", code, errOut)
	}
}
