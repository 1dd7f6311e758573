package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/conformance"
	"svc.dev/svc/signer"
)

// startLogCmd runs `svc log` in-process and returns its base URL once it listens.
func startLogCmd(t *testing.T, args ...string) (string, context.CancelFunc) {
	t.Helper()
	base, _, cancel := startLogCmdCP(t, args...)
	return base, cancel
}

// startLogCmdCP is startLogCmd that also returns the checkpoints host's address
// ("" without --checkpoints-port).
func startLogCmdCP(t *testing.T, args ...string) (string, string, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		var out strings.Builder
		done <- run(ctx, append([]string{"log", "--port", "0"}, args...), &out, pw)
		pw.Close()
	}()
	addr := make(chan []string, 1)
	go func() {
		re := regexp.MustCompile(`msg="log server listening" addr=(\S+) checkpoints=(\S+)`)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m
			}
		}
	}()
	select {
	case m := <-addr:
		t.Cleanup(func() { cancel(); <-done })
		return "http://" + m[1], strings.Trim(m[2], `"`), cancel
	case code := <-done:
		t.Fatalf("svc log exited with %d", code)
	case <-time.After(30 * time.Second):
		t.Fatal("svc log did not start")
	}
	return "", "", nil
}

// TestLogWithRemoteSigner: the log server signs through svc signer and never holds
// the key; when the signer stops answering, heads are 503.
func TestLogWithRemoteSigner(t *testing.T) {
	dir := t.TempDir()
	key, ss := startTestSigner(t)
	base, _ := startLogCmd(t, "--file", filepath.Join(dir, "log.jsonl"), "--data", filepath.Join(dir, "data"),
		"--signer-url", ss.URL, "--signer-token-env", "TEST_SIGNER_TOKEN")
	resp, err := http.Post(base+"/append", "application/json", strings.NewReader(`{"leaf":"signed remotely"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("append: %d %s", resp.StatusCode, body)
	}
	p, err := conformance.ParseHead(body)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Verify([]signer.PublicKey{key.Public()}); err != nil {
		t.Fatalf("head not signed by the signer's key: %v", err)
	}
	keys, err := (&client.LogServer{Base: base}).Keys(context.Background())
	if err != nil || len(keys) != 1 || keys[0].KeyID != key.KeyID() {
		t.Fatalf("the log publishes the signer's key document: %v %v", keys, err)
	}
	ss.Close()
	resp, err = http.Get(base + "/head")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.HasPrefix(string(body), `{"error":"log unavailable: `) {
		t.Fatalf("head with the signer gone: %d %s", resp.StatusCode, body)
	}
}

func TestLogFlagErrors(t *testing.T) {
	checkCLIErrors(t, []cliError{
		{[]string{"log"}, 2, "exactly one of --key and --signer-url"},
		{[]string{"log", "--file", "x", "--key", "k", "--signer-url", "http://s"}, 2, "exactly one of"},
		{[]string{"log", "--file", "x", "--signer-url", "http://127.0.0.1:1"}, 2, "--signer-token-env"},
		{[]string{"log", "--file", "x", "--key", "/nonexistent.key"}, 1, "nonexistent.key"},
		{[]string{"log", "--file", "x", "--key", "/nonexistent.key", "--max-conns", "0"}, 2, "--max-conns 0: want 1 to 65536"},
	})
	k0, _ := signer.GenerateKey()
	kdir := t.TempDir()
	k0.WriteKeyFiles(kdir, "log")
	checkCLIErrors(t, []cliError{
		{[]string{"log", "--file", "x", "--key", filepath.Join(kdir, "log.key"), "--log-of-logs-every", "60"}, 2, "--log-of-logs-every takes a positive number of seconds, with --db-env"},
		{[]string{"log", "--file", "x", "--key", filepath.Join(kdir, "log.key"), "--log-of-logs-every", "-1"}, 2, "--log-of-logs-every takes a positive"},
	})
	t.Setenv("UNSET_FOR_TEST", "")
	dir := t.TempDir()
	k, _ := signer.GenerateKey()
	k.WriteKeyFiles(dir, "log")
	code, _, stderr := runSvc(t, "log", "--file", filepath.Join(dir, "l"), "--key", filepath.Join(dir, "log.key"), "--token-env", "UNSET_FOR_TEST", "--data", filepath.Join(dir, "d"))
	if code != 1 || !strings.Contains(stderr, "UNSET_FOR_TEST") {
		t.Fatalf("missing token variable: %d %s", code, stderr)
	}
}
