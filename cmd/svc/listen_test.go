package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"svc.dev/svc/internal/pgtest"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
)

// TestBrokerListenerNeedsCredentials: svc log --nats-listen refuses to start without
// --nats-nkey; with the seed of svc keygen --nats-nkey (written 0600) its listener
// refuses a connection without credentials or with a guessed password or token, and
// admits the nkey, with which svc log-admin and svc portal work, and the password of
// --nats-listen-password-env (what a gateway's log.nats URL carries).
func TestBrokerListenerNeedsCredentials(t *testing.T) {
	dir := t.TempDir()
	seed := filepath.Join(dir, "nats.nk")
	out := mustRun(t, "keygen", "--nats-nkey", seed)
	if fi, err := os.Stat(seed); err != nil || fi.Mode().Perm() != 0o600 || !strings.Contains(out, "public key   U") {
		t.Fatalf("keygen --nats-nkey: %v %v\n%s", fi, err, out)
	}
	if code, _, _ := runSvc(t, "keygen", "--nats-nkey", seed); code == 0 {
		t.Fatal("keygen --nats-nkey overwrote a seed")
	}
	_, ss := startTestSigner(t)
	t.Setenv("TEST_DATABASE_URL", pgtest.New(t))
	t.Setenv("TEST_ADMIN_TOKEN", strings.Repeat("a", 32))
	t.Setenv("TEST_PORTAL_SECRET", strings.Repeat("s", 32))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	args := []string{"--db-env", "TEST_DATABASE_URL", "--data", filepath.Join(dir, "data"), "--nats-listen", listen,
		"--signer-url", ss.URL, "--signer-token-env", "TEST_SIGNER_TOKEN", "--admin-token-env", "TEST_ADMIN_TOKEN", "--public-url", "https://log.example"}
	if code, _, errOut := runSvc(t, append([]string{"log", "--port", "0"}, args...)...); code == 0 || !strings.Contains(errOut, "needs --nats-nkey") {
		t.Fatalf("svc log --nats-listen without --nats-nkey: exit %d, %s", code, errOut)
	}
	t.Setenv("TEST_NATS_LISTEN_PASSWORD", "gateway-password-0123456789")
	base, _ := startLogCmd(t, append(args, "--nats-nkey", seed, "--nats-listen-password-env", "TEST_NATS_LISTEN_PASSWORD")...)
	url := "nats://" + listen
	for _, opts := range [][]nats.Option{nil, {nats.UserInfo("svc", "guess")}, {nats.Token("guess")}} {
		if nc, err := nats.Connect(url, opts...); err == nil {
			nc.Close()
			t.Fatalf("the listener admitted a connection with options %v", opts)
		} else if !strings.Contains(err.Error(), "Authorization Violation") {
			t.Fatalf("refused for another reason: %v", err)
		}
	}
	nk, err := nats.NkeyOptionFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, nk)
	if err != nil {
		t.Fatalf("the nkey was refused: %v", err)
	}
	nc.Close()
	// Gateways and SDKs: the password of --nats-listen-password-env in log.nats's URL.
	if nc, err = pipeline.Connect(pipeline.Credentials{URL: "nats://svc:gateway-password-0123456789@" + listen}, "gateway"); err != nil {
		t.Fatalf("the listener's password was refused: %v", err)
	}
	nc.Close()
	if code, _, errOut := runSvc(t, "log-admin", "--db-env", "TEST_DATABASE_URL", "--nats-url", url, "tenant", "add", "acme"); code == 0 || !strings.Contains(errOut, "Authorization Violation") {
		t.Fatalf("log-admin without credentials: exit %d, %s", code, errOut)
	}
	mustRun(t, "log-admin", "--db-env", "TEST_DATABASE_URL", "--nats-url", url, "--nats-nkey", seed, "tenant", "add", "acme")
	token := strings.TrimSpace(mustRun(t, "log-admin", "--db-env", "TEST_DATABASE_URL", "--nats-url", url, "--nats-nkey", seed, "token", "add", "acme", "--label", "ci"))
	if s, body := httpDo(t, "POST", base+"/t/acme/append", token, `{"leaf":"hello"}`); s != 200 {
		t.Fatalf("append with the token log-admin made: %d %s", s, body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr, done := make(chan string, 1), make(chan error, 1)
	go func() {
		done <- servePortal(ctx, []string{"--db-env", "TEST_DATABASE_URL", "--nats-url", url, "--nats-nkey", seed, "--secret-env", "TEST_PORTAL_SECRET",
			"--public-url", base, "--port", "0"}, &testkit.LockedBuffer{}, func(a string) { addr <- a })
	}()
	defer func() { cancel(); <-done }()
	select {
	case a := <-addr:
		if code, _, body := testkit.Do(t, "GET", "http://"+a+"/health", "", ""); code != 200 {
			t.Fatalf("portal health: %d %s", code, body)
		}
	case err := <-done:
		t.Fatalf("svc portal with the nkey stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("svc portal did not listen within 30 s")
	}
}
