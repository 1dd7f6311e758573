package witness_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"svc.dev/svc/client"
	"svc.dev/svc/internal/logtest"
	"svc.dev/svc/internal/svcbin"
	"svc.dev/svc/internal/testkit"

	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
	"svc.dev/svc/witness"
)

var svcBin string

func TestMain(m *testing.M) { svcbin.Main(m, &svcBin) }

// switchable is an HTTP front whose backend can be swapped, and which can answer
// chosen paths with chosen bodies: the test double for an operator who misbehaves.
type switchable struct {
	mu   sync.RWMutex
	h    http.Handler
	over map[string][]byte
}

func newSwitchable(h http.Handler) *switchable { return &switchable{h: h, over: map[string][]byte{}} }

func (s *switchable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.RLock()
	h, body, ok := s.h, s.over[r.URL.Path], s.over[r.URL.Path] != nil
	s.mu.RUnlock()
	if ok {
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
		return
	}
	h.ServeHTTP(w, r)
}

func (s *switchable) set(h http.Handler) { s.mu.Lock(); s.h = h; s.mu.Unlock() }

func (s *switchable) serve(path string, body []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if body == nil {
		delete(s.over, path)
	} else {
		s.over[path] = body
	}
}

func (s *switchable) reset() { s.mu.Lock(); s.over = map[string][]byte{}; s.mu.Unlock() }

const (
	defaultToken = "default-tenant-token"
	acmeToken    = "acme-tenant-token"
)

// startLog runs a real log service in dir with tenants default and acme, each with
// a log file.
func startLog(t *testing.T, dir string, key *signer.Key) *logtest.Log {
	return logtest.Start(t, logtest.Options{Dir: dir, Key: key, AppendTimeout: 5 * time.Second, Tenants: []logtest.Tenant{
		{ID: "default", File: "default.log", Token: defaultToken},
		{ID: "acme", LogID: "acme-prod", File: "acme.log", Token: acmeToken},
	}})
}

// appendLeaves appends n leaves through base (the log's HTTP front).
func appendLeaves(t *testing.T, base, tenant, prefix string, n int) {
	t.Helper()
	token := defaultToken
	if tenant != "default" {
		token = acmeToken
	}
	for i := 0; i < n; i++ {
		logtest.AppendAt(t, base, tenant, token, fmt.Sprintf("%s-%s-%d-%d", prefix, tenant, i, time.Now().UnixNano()))
	}
}

// tick publishes a checkpoint of each tenant.
func tick(t *testing.T, l *logtest.Log, tenants ...string) {
	t.Helper()
	for _, tn := range tenants {
		l.Checkpoint(t, tn)
	}
}

// runBin runs the svc binary as its own process.
func runBin(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, svcBin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("svc %v: %v", args, err)
	}
	return code, out.String(), errOut.String()
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	testkit.Eventually(t, timeout, func() error {
		if !cond() {
			return fmt.Errorf("waiting for %s", what)
		}
		return nil
	})
}

func readCheckpoint(t *testing.T, path string) *client.Checkpoint {
	t.Helper()
	return testkit.ReadFileAs(t, path, client.ParseCheckpoint)
}

func tryCheckpoint(path string) *client.Checkpoint {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	cp, err := client.ParseCheckpoint(data)
	if err != nil {
		return nil
	}
	return cp
}

func readState(t *testing.T, path string) *witness.State {
	t.Helper()
	return testkit.ReadFileAs(t, path, witness.ParseState)
}

func readAlarm(t *testing.T, path string) *witness.Alarm {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no alarm: %v", err)
	}
	a, err := witness.ParseAlarm(data)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// checkpointJSON is a checkpoint in the file form, signed by the given keys.
func checkpointJSON(t *testing.T, tenant, logID string, size uint64, root string, keys ...*signer.Key) []byte {
	t.Helper()
	at := time.Now()
	th := receipt.TreeHead{TreeSize: size, RootHash: root, Timestamp: receipt.FormatTime(at), Log: logID}
	env, err := receipt.SignJSON(receipt.PayloadTreeHead, th, keys...)
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.MarshalIndent(client.CheckpointFile{Tenant: tenant, LogID: logID, TreeSize: size, RootHash: root, SignedAt: th.Timestamp, Envelope: env}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func alarmFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "ALARM-*.json"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func fileServer(dir string) *httptest.Server {
	return httptest.NewServer(http.FileServer(http.Dir(dir)))
}

func quietLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.Default()
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
