package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
	"svc.dev/svc/signer/remote"
)

// runSvc runs one command line through the dispatcher.
func runSvc(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// cliError is a command line that must fail: its exit code and what its stderr says.
type cliError struct {
	args []string
	code int
	want string
}

// checkCLIErrors runs each command line and checks its exit code and that its stderr
// contains what it must.
func checkCLIErrors(t *testing.T, cases []cliError) {
	t.Helper()
	for _, c := range cases {
		code, _, stderr := runSvc(t, c.args...)
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("svc %v: exit %d, stderr %q; want %d containing %q", c.args, code, stderr, c.code, c.want)
		}
	}
}

// mustRun runs a command line that must succeed.
func mustRun(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := runSvc(t, args...)
	if code != 0 {
		t.Fatalf("svc %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// testKey writes <dir>/<name>.key and .pub and returns the key and both paths.
func testKey(t *testing.T, dir, name string) (key *signer.Key, keyPath, pubPath string) {
	t.Helper()
	k, err := signer.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	kp, pp, err := k.WriteKeyFiles(dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return k, kp, pp
}

// readEnvelope parses an envelope file.
func readEnvelope(t *testing.T, path string) *receipt.Envelope {
	t.Helper()
	return testkit.ReadFileAs(t, path, receipt.ParseEnvelope)
}

func assertNoFile(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("%s exists (stat error %v); want no file", path, err)
	}
	// No temporary file left behind either.
	tmps, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*"))
	if len(tmps) > 0 {
		t.Fatalf("temporary files left: %v", tmps)
	}
}

func TestHelpListsEveryFlag(t *testing.T) {
	cases := map[string][]string{
		"keygen":   {"dir", "name"},
		"grant":    {"key", "principal", "agent", "scopes", "ttl-hours", "out", "agent-key"},
		"delegate": {"key", "parent", "agent", "scopes", "ttl-hours", "out", "agent-key"},
		"prune":    {"log", "before", "receipts"},
		"gateway":  {"config", "http", "host", "port", "idle-minutes", "require-proof", "allow-origin"},
		"serve":    {"config", "port", "host", "allow-remote", "export-drain"},
	}
	for name, flags := range cases {
		for _, h := range []string{"--help", "-h"} {
			code, out, errOut := runSvc(t, name, h)
			if code != 0 {
				t.Fatalf("svc %s %s: exit %d, stderr %s", name, h, code, errOut)
			}
			text := out + errOut
			for _, want := range []string{"Usage: svc " + name, "Example:", "svc " + name + " --"} {
				if !strings.Contains(text, want) {
					t.Errorf("svc %s %s: output lacks %q:\n%s", name, h, want, text)
				}
			}
			for _, f := range flags {
				if !strings.Contains(text, "\n  -"+f+" ") && !strings.Contains(text, "\n  -"+f+"\n") {
					t.Errorf("svc %s %s: flag -%s not listed:\n%s", name, h, f, text)
				}
			}
		}
		// The command is listed by the top-level usage.
		_, _, top := runSvc(t, "--help")
		if !strings.Contains(top, "  "+name+" ") {
			t.Errorf("svc --help does not list %s:\n%s", name, top)
		}
	}
}

func TestUnexpectedArgumentIsUsageError(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"keygen", "--dir", dir, "--name", "k", "extra"},
		{"grant", "extra"},
		{"delegate", "extra"},
		{"prune", "extra"},
		{"grant", "--no-such-flag"},
	} {
		if code, _, errOut := runSvc(t, args...); code != 2 {
			t.Errorf("svc %v: exit %d, want 2 (stderr %s)", args, code, errOut)
		}
	}
}

// background is a subcommand running in this process until its context is cancelled.
type background struct {
	stdout, stderr testkit.LockedBuffer
	done           chan int
	cancel         context.CancelFunc
}

// startBackground runs `svc args...` in the background and waits until its stdout
// matches ready (a regexp whose first group is returned, e.g. the address it listens
// on); it fails the test if the command exits first or within passes.
func startBackground(t *testing.T, ready string, within time.Duration, args ...string) (*background, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := &background{done: make(chan int, 1), cancel: cancel}
	t.Cleanup(cancel)
	go func() { b.done <- run(ctx, args, &b.stdout, &b.stderr) }()
	re := regexp.MustCompile(ready)
	var got string
	testkit.Eventually(t, within, func() error {
		select {
		case code := <-b.done:
			t.Fatalf("svc %s exited %d:\nstdout %s\nstderr %s", args[0], code, b.stdout.String(), b.stderr.String())
		default:
		}
		if m := re.FindStringSubmatch(b.stdout.String()); m != nil {
			got = m[1]
			return nil
		}
		return fmt.Errorf("svc %s printed no %s:\nstdout %s\nstderr %s", args[0], ready, b.stdout.String(), b.stderr.String())
	})
	return b, got
}

// stop cancels the command and requires it to exit 0 within the given time.
func (b *background) stop(t *testing.T, within time.Duration) {
	t.Helper()
	b.cancel()
	select {
	case code := <-b.done:
		if code != 0 {
			t.Errorf("exit %d after cancel; stderr %s", code, b.stderr.String())
		}
	case <-time.After(within):
		t.Fatal("did not stop after cancel")
	}
}

// startTestSigner runs svc signer's server (its last heads in a temporary
// directory) on a kernel-picked port, closed with the test; its token is in
// TEST_SIGNER_TOKEN.
func startTestSigner(t *testing.T) (*signer.Key, *httptest.Server) {
	t.Helper()
	key, _ := signer.GenerateKey()
	heads, err := remote.OpenHeadStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := remote.NewServer(remote.ServerConfig{Key: key, Token: "signer-shared-token-123", ValidFrom: time.Now().Add(-time.Hour), Heads: heads})
	if err != nil {
		t.Fatal(err)
	}
	ss := httptest.NewServer(srv)
	t.Cleanup(ss.Close)
	t.Setenv("TEST_SIGNER_TOKEN", "signer-shared-token-123")
	return key, ss
}
