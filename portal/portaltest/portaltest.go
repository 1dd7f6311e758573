// Package portaltest runs a whole portal for tests: an embedded nats-server, a
// database of its own on the test PostgreSQL (internal/pgtest), the
// database-backed log service over HTTP (the log the portal's tenants append to),
// its checkpoints directory served by a second server, and the portal over HTTP;
// optionally stripe-mock as the payment provider. Everything stops when the test
// ends. It is imported by tests only.
package portaltest

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/logservice"
	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/pgtest"
	"svc.dev/svc/internal/store"
	"svc.dev/svc/portal"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// Options configure Start; every field is optional.
type Options struct {
	// Billing turns on billing against stripe-mock (started by Start) with this
	// webhook secret and team price; WebhookSecret default "whsec_test", TeamPrice
	// default "price_team".
	Billing       bool
	WebhookSecret string
	TeamPrice     string
	// Configure, when set, adjusts the portal's configuration before New (a clock,
	// throttle rates, trust-proxy).
	Configure func(*portal.Config)
	// Verbose sends the portal's and the log's lines to t.Log.
	Verbose bool
}

// Env is a running portal and the log behind it.
type Env struct {
	URL            string // the portal
	LogURL         string // the log's HTTP front (the portal's --public-url)
	CheckpointsURL string
	NATSURL        string // the broker, for svc log-admin or a second process
	DBURL          string // the database, for the same
	StripeURL      string // stripe-mock's HTTP address when Billing
	WebhookSecret  string
	Portal         *portal.Portal
	Log            *logservice.Service
	Store          *store.Store
	JS             jetstream.JetStream
	Config         portal.Config // as passed to portal.New
}

// Secret is the session secret of the test portals.
const Secret = "portaltest-session-secret-0123456789abcdef"

// TestScrypt is a cheap scrypt cost for tests (N=1024); the default is measured by
// the benchmarks.
var TestScrypt = portal.ScryptParams{N: 1 << 10, R: 8, P: 1}

// Start runs the broker, database, log and portal.
func Start(t testing.TB, o Options) *Env {
	t.Helper()
	dir := t.TempDir()
	ns, err := natsembed.Start(natsembed.Config{DataDir: filepath.Join(dir, "broker"), Listen: "127.0.0.1:-1", Password: "pw-of-tests", NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	e := &Env{NATSURL: natsembed.URL(ns, "pw-of-tests"), DBURL: pgtest.New(t)}
	ctx := context.Background()
	e.Store, err = store.Open(ctx, e.DBURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Store.Close)
	logger := slog.New(slog.DiscardHandler)
	if o.Verbose {
		logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	key, err := signer.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	doc := &signer.KeyDocument{Keys: []signer.KeyEntry{key.Public().Entry(time.Now().Add(-time.Hour), nil)}}
	cpDir := filepath.Join(dir, "checkpoints")
	e.Log, err = logservice.Start(ctx, logservice.Config{
		DataDir: filepath.Join(dir, "log"), NATSURL: e.NATSURL, Signer: receipt.KeySigner{Key: key},
		Keys:          func(context.Context) (*signer.KeyDocument, error) { return doc, nil },
		CheckpointDir: cpDir, CheckpointEvery: time.Hour, Logger: logger,
		Hosted: &logservice.Hosted{Store: e.Store, LeaseTTL: 2 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	ls := httptest.NewServer(e.Log.Handler())
	cs := httptest.NewServer(http.FileServer(http.Dir(cpDir)))
	t.Cleanup(func() { ls.Close(); cs.Close(); e.Log.Close() })
	e.LogURL, e.CheckpointsURL = ls.URL, cs.URL
	if e.JS, err = jetstream.New(e.Log.Conn()); err != nil {
		t.Fatal(err)
	}
	cfg := portal.Config{
		Admin: e.Log.Admin(), View: e.Log.View(), JS: e.JS, Store: e.Store, Secret: []byte(Secret),
		PublicURL: e.LogURL, CheckpointsURL: e.CheckpointsURL, Scrypt: TestScrypt, Logger: logger,
	}
	if o.Billing {
		e.WebhookSecret = or(o.WebhookSecret, "whsec_test")
		e.StripeURL = StripeMock(t)
		cfg.Billing = &portal.Billing{SecretKey: "sk_test_123", WebhookSecret: e.WebhookSecret, TeamPrice: or(o.TeamPrice, "price_team"), APIURL: e.StripeURL}
	}
	if o.Configure != nil {
		o.Configure(&cfg)
	}
	ps := httptest.NewUnstartedServer(nil)
	if cfg.PortalURL == "" {
		cfg.PortalURL = "http://" + ps.Listener.Addr().String()
	}
	e.Config = cfg
	if e.Portal, err = portal.New(cfg); err != nil {
		ps.Close()
		t.Fatal(err)
	}
	ps.Config.Handler = e.Portal
	ps.Start()
	t.Cleanup(ps.Close)
	e.URL = ps.URL
	return e
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

var listening = regexp.MustCompile(`Listening for HTTP at address: (\S+)`)

// StripeMock starts stripe-mock (go install github.com/stripe/stripe-mock@v0.203.0;
// found on PATH or in $GOPATH/bin) on free ports and returns its HTTP base URL.
// The test fails when it is not installed.
func StripeMock(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("stripe-mock")
	if err != nil {
		home, _ := os.UserHomeDir()
		for _, c := range []string{os.Getenv("GOBIN"), filepath.Join(os.Getenv("GOPATH"), "bin"), filepath.Join(home, "go", "bin")} {
			if c == "" {
				continue
			}
			if _, serr := os.Stat(filepath.Join(c, "stripe-mock")); serr == nil {
				bin, err = filepath.Join(c, "stripe-mock"), nil
				break
			}
		}
	}
	if err != nil {
		t.Fatal("stripe-mock is not installed: go install github.com/stripe/stripe-mock@v0.203.0 (go tool task test does)")
	}
	cmd := exec.Command(bin, "-http-addr", "127.0.0.1:", "-https-addr", "127.0.0.1:")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				found <- "http://" + m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case u := <-found:
		return u
	case <-time.After(30 * time.Second):
		t.Fatal("stripe-mock did not say where it listens within 30 s")
		return ""
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }
