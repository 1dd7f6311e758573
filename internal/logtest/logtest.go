// Package logtest runs a real log service for tests: the embedded nats-server in a
// temporary directory, the given tenants with their tokens, served over HTTP by
// httptest, and the checkpoint directory served by a second one. It replaces the
// per-package copies of "a running log with these tenants".
package logtest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/internal/logserver"
	"svc.dev/svc/internal/logservice"
	"svc.dev/svc/internal/telemetry"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// Tenant is one tenant of the test log.
type Tenant struct {
	ID    string // required; a valid tenant id
	LogID string // optional; named in signed heads
	Token string // its bearer token; empty: none
	// More are further bearer tokens of the tenant (each with its own rate limit).
	More []string
	// File, when set, is the tenant's SPEC log file (relative paths resolve against
	// the log's directory); a file that already holds leaves is adopted at start.
	File string
}

// Options configure Start. Every field is optional.
type Options struct {
	// Tenants default to one: "default" with token "tok".
	Tenants []Tenant
	// Key is the log key; default a fresh one. Its key document is valid from an hour
	// ago.
	Key *signer.Key
	// Signer signs the log's heads instead of Key (a signer that fails on demand, say);
	// Key still makes the key document.
	Signer receipt.EnvelopeSigner
	// Notes also publishes checkpoints as C2SP signed notes, signed with Key.
	Notes bool
	// Witnesses are C2SP tlog-witness base URLs that cosign each C2SP checkpoint.
	Witnesses []string
	// Dir is the service's directory; default t.TempDir().
	Dir string
	// NATSURL is a broker to use instead of the embedded one.
	NATSURL string
	// AppendTimeout bounds how long the HTTP front waits for the sequencer; default
	// the service's.
	AppendTimeout time.Duration
	// Verbose sends the service's log lines to t.Log (default: dropped).
	Verbose bool
	// Telemetry receives the service's metrics and traces; nil: none.
	Telemetry *telemetry.Telemetry
}

// Log is a running log service.
type Log struct {
	Service        *logservice.Service
	URL            string // the HTTP front
	CheckpointsURL string // CheckpointDir served read-only
	CheckpointDir  string
	Dir            string
	Key            *signer.Key
	tokens         map[string]string
}

// Start runs the log service and stops it when the test ends. Checkpoints are
// published only when a test calls Checkpoint (every hour otherwise).
func Start(t testing.TB, o Options) *Log {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	if o.Key == nil {
		var err error
		if o.Key, err = signer.GenerateKey(); err != nil {
			t.Fatal(err)
		}
	}
	if o.Tenants == nil {
		o.Tenants = []Tenant{{ID: client.DefaultTenant, Token: "tok"}}
	}
	l := &Log{Dir: o.Dir, Key: o.Key, CheckpointDir: filepath.Join(o.Dir, "checkpoints"), tokens: map[string]string{}}
	var specs []logservice.TenantSpec
	for _, tn := range o.Tenants {
		spec := logservice.TenantSpec{ID: tn.ID, LogID: tn.LogID}
		if tn.File != "" {
			spec.File = tn.File
			if !filepath.IsAbs(spec.File) {
				spec.File = filepath.Join(o.Dir, spec.File)
			}
		}
		if tn.Token != "" {
			spec.TokenHashes = [][32]byte{logserver.HashToken(tn.Token)}
		}
		for _, tok := range tn.More {
			spec.TokenHashes = append(spec.TokenHashes, logserver.HashToken(tok))
		}
		l.tokens[tn.ID] = tn.Token
		specs = append(specs, spec)
	}
	doc := &signer.KeyDocument{Keys: []signer.KeyEntry{o.Key.Public().Entry(time.Now().Add(-time.Hour), nil)}}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if o.Verbose {
		logger = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	var sg receipt.EnvelopeSigner = receipt.KeySigner{Key: o.Key}
	if o.Signer != nil {
		sg = o.Signer
	}
	var noteKey *signer.Key
	if o.Notes {
		noteKey = o.Key
	}
	svc, err := logservice.Start(context.Background(), logservice.Config{
		DataDir: filepath.Join(o.Dir, "data"), NATSURL: o.NATSURL, Signer: sg, NoteKey: noteKey,
		Keys:    func(context.Context) (*signer.KeyDocument, error) { return doc, nil },
		Tenants: specs, CheckpointDir: l.CheckpointDir, CheckpointEvery: time.Hour,
		AppendTimeout: o.AppendTimeout, NoSync: true, Logger: logger, Telemetry: o.Telemetry, Witnesses: o.Witnesses,
	})
	if err != nil {
		t.Fatal(err)
	}
	ls := httptest.NewServer(svc.Handler())
	cs := httptest.NewServer(http.FileServer(http.Dir(l.CheckpointDir)))
	t.Cleanup(func() { ls.Close(); cs.Close(); svc.Close() })
	l.Service, l.URL, l.CheckpointsURL = svc, ls.URL, cs.URL
	return l
}

// Base is where tenant's public routes are.
func (l *Log) Base(tenant string) string { return client.TenantBase(l.URL, tenant) }

// Append appends leaf to tenant with its token and returns the answer's body; any
// status but 200 fails the test.
func (l *Log) Append(t testing.TB, tenant, leaf string) []byte {
	t.Helper()
	return AppendAt(t, l.URL, tenant, l.tokens[tenant], leaf)
}

// AppendAt appends leaf to tenant through the log front at base (a proxy, say) with
// token (empty: none) and returns the answer's body; any status but 200 fails the
// test.
func AppendAt(t testing.TB, base, tenant, token, leaf string) []byte {
	t.Helper()
	code, _, body := testkit.Do(t, http.MethodPost, client.TenantBase(base, tenant)+"/append", token, fmt.Sprintf(`{"leaf":%q}`, leaf))
	if code != http.StatusOK {
		t.Fatalf("append to %s: %d %s", tenant, code, body)
	}
	return []byte(body)
}

// Grow appends n distinct leaves to tenant, named after prefix.
func (l *Log) Grow(t testing.TB, tenant, prefix string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		l.Append(t, tenant, fmt.Sprintf("%s %s %d %d", prefix, tenant, i, time.Now().UnixNano()))
	}
}

// Checkpoint publishes a checkpoint of tenant now.
func (l *Log) Checkpoint(t testing.TB, tenant string) {
	t.Helper()
	if err := l.Service.Checkpointer(tenant).Tick(context.Background()); err != nil {
		t.Fatal(err)
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
