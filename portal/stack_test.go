//go:build portalbrowser

package portal_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"svc.dev/svc/internal/logservice"
	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/pgtest"
	"svc.dev/svc/internal/store"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// hostedLog is the database-backed log service the portal manages: an embedded
// broker, a database of the test's own, and the service's HTTP front.
type hostedLog struct {
	Service *logservice.Service
	Store   *store.Store
	URL     string
	DBURL   string
	NATSURL string
}

// startHostedLog runs the hosted log for t and stops it when t ends.
func startHostedLog(t *testing.T) *hostedLog {
	t.Helper()
	dbURL := pgtest.New(t)
	srv, err := natsembed.Start(natsembed.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:-1", NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	st, err := store.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	key, err := signer.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	doc := &signer.KeyDocument{Keys: []signer.KeyEntry{key.Public().Entry(time.Now().Add(-time.Hour), nil)}}
	dir := t.TempDir()
	svc, err := logservice.Start(context.Background(), logservice.Config{
		DataDir: dir, NATSURL: srv.ClientURL(), Signer: receipt.KeySigner{Key: key},
		Keys:          func(context.Context) (*signer.KeyDocument, error) { return doc, nil },
		CheckpointDir: filepath.Join(dir, "checkpoints"), CheckpointEvery: time.Hour, NoSync: true,
		Logger: slog.New(slog.DiscardHandler), Hosted: &logservice.Hosted{Store: st, LeaseTTL: 2 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(svc.Handler())
	t.Cleanup(func() { hs.Close(); svc.Close(); st.Close() })
	return &hostedLog{Service: svc, Store: st, URL: hs.URL, DBURL: dbURL, NATSURL: srv.ClientURL()}
}

// Checkpoint has the log sign tenant's head now (it does so hourly otherwise).
func (l *hostedLog) Checkpoint(t *testing.T, tenant string) {
	t.Helper()
	testkit.Eventually(t, 10*time.Second, func() error {
		cp := l.Service.Checkpointer(tenant)
		if cp == nil {
			return fmt.Errorf("no checkpointer for %s yet", tenant)
		}
		return cp.Tick(context.Background())
	})
}

// stack is what the browser test drives: the portal and the log it manages.
type stack struct {
	PortalURL string // the portal's pages and /api
	LogURL    string // the hosted log (exportCommand's --log-url)
	Log       *hostedLog
}

// startStack runs `svc portal`'s handler over startHostedLog's log, with billing
// against stripe-mock, for t.
//
// NOT WIRED YET: package portal (the server half of issue 11, branch issue11api) had
// no handler when this was written, so these browser tests build only with
// -tags portalbrowser and stop here.
func startStack(t *testing.T) stack {
	t.Helper()
	log := startHostedLog(t)
	t.Fatalf("the portal server is not wired into the browser test yet (log at %s)", log.URL)
	return stack{}
}
