package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"svc.dev/svc/internal/pgtest"
)

// TestMain lets a test run this binary as svc itself (SVC_TEST_AS_SVC=1), a separate
// process whose every output (stdout, stderr, the default slog handler) is captured.
func TestMain(m *testing.M) {
	if os.Getenv("SVC_TEST_AS_SVC") == "1" {
		main()
	}
	os.Exit(m.Run())
}

// TestNoPasswordInOutput: every command that connects to NATS, started with the
// password (or a token) in --nats-url while the broker is down, fails naming the
// broker with the password redacted, and no byte of anything it prints holds the
// password.
func TestNoPasswordInOutput(t *testing.T) {
	const pw = "Pa55-not-for-your-eyes"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close() // nothing listens there now: the broker is down
	cluster := "nats://svc:" + pw + "@" + down + ",nats://" + down
	dir := t.TempDir()
	_, keyPath, _ := testKey(t, dir, "log")
	cfg := filepath.Join(dir, "gateway.json")
	if err := os.WriteFile(cfg, []byte(`{"log":{"nats":"nats://`+pw+`@`+down+`","tenant":"acme"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"SVC_TEST_AS_SVC=1", "TEST_DATABASE_URL=" + pgtest.New(t), "TEST_PORTAL_SECRET=" + strings.Repeat("s", 40)}
	for name, args := range map[string][]string{
		"log":       {"log", "--file", filepath.Join(dir, "log.jsonl"), "--key", keyPath, "--data", filepath.Join(dir, "data"), "--nats-url", cluster, "--port", "0"},
		"portal":    {"portal", "--db-env", "TEST_DATABASE_URL", "--nats-url", cluster, "--secret-env", "TEST_PORTAL_SECRET", "--public-url", "http://127.0.0.1:1", "--port", "0"},
		"log-admin": {"log-admin", "--db-env", "TEST_DATABASE_URL", "--nats-url", cluster, "tenant", "add", "acme"},
		"replay":    {"replay", "metering", "--nats-url", cluster, "--data", filepath.Join(dir, "replay")},
		"exports":   {"exports", "status", "--config", cfg},
		"bench":     {"bench", "append", "--nats-url", cluster, "--url", "http://127.0.0.1:1", "--count", "1"},
	} {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("svc %s started with the broker down; output:\n%s", name, out)
		}
		if strings.Contains(string(out), pw) {
			t.Errorf("svc %s printed the password:\n%s", name, out)
		}
		if !strings.Contains(string(out), "xxxxx@"+down) {
			t.Errorf("svc %s does not name the broker (redacted); output:\n%s", name, out)
		}
	}
}
