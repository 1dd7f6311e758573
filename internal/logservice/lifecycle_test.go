package logservice

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/pgtest"
	"svc.dev/svc/internal/store"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// consumers counts the consumers the broker holds on stream.
func consumers(t *testing.T, nc *nats.Conn, stream string) int {
	t.Helper()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}

// leases counts the sequencer leases held.
func leases(t *testing.T, nc *nats.Conn) int {
	t.Helper()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), LeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(context.Background())
	if err != nil && err != jetstream.ErrNoKeysFound {
		t.Fatal(err)
	}
	return len(keys)
}

// addTenants creates n tenants named prefix-<i> through a's admin, each with one
// token when tokens is set (returned by tenant).
func addTenants(t *testing.T, a *Service, prefix string, n int, tokens bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if tokens {
			out[id] = addTenant(t, a, id)
		} else if _, err := a.Admin().AddTenant(context.Background(), "test", id, ""); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestIdleTenantsCostNothing: a thousand tenants that were created and never used
// cost this process no goroutine, no broker consumer and no lease; the tenant
// created after them appends at once; once quiet it again holds no sequencer,
// consumer or lease, and its next append starts it again at the next index.
func TestIdleTenantsCostNothing(t *testing.T) {
	srv, dbURL, key := hostedParts(t)
	a, url := frontEndWith(t, t.TempDir(), srv.ClientURL(), dbURL, key, slog.New(slog.DiscardHandler),
		Hosted{LeaseTTL: 2 * time.Second, QuietPeriod: 500 * time.Millisecond})
	before := runtime.NumGoroutine()
	addTenants(t, a, "idle", 1000, false)
	if g := runtime.NumGoroutine(); g > before+50 {
		t.Fatalf("goroutines %d after a thousand idle tenants, %d before", g, before)
	}
	if n := consumers(t, a.Conn(), pipeline.AppendStream); n != 0 {
		t.Fatalf("%d consumers on %s for idle tenants, want 0", n, pipeline.AppendStream)
	}
	if n := leases(t, a.Conn()); n != 0 {
		t.Fatalf("%d leases for idle tenants, want 0", n)
	}
	tok := addTenant(t, a, "late")
	if s, body := appendTo(t, url, "late", tok, "first"); s != 200 {
		t.Fatalf("append of the tenant created after a thousand: %d %s", s, body)
	}
	if a.Sequencer("late") == nil || consumers(t, a.Conn(), pipeline.AppendStream) != 1 || leases(t, a.Conn()) != 1 {
		t.Fatal("the active tenant runs no sequencer, consumer or lease")
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		if a.Sequencer("late") != nil {
			return fmt.Errorf("sequencer still runs")
		}
		if n := consumers(t, a.Conn(), pipeline.AppendStream); n != 0 {
			return fmt.Errorf("%d consumers on %s", n, pipeline.AppendStream)
		}
		if n := consumers(t, a.Conn(), pipeline.LeavesStream); n > 3 { // the database projections' own
			return fmt.Errorf("%d consumers on %s", n, pipeline.LeavesStream)
		}
		if n := leases(t, a.Conn()); n != 0 {
			return fmt.Errorf("%d leases", n)
		}
		return nil
	})
	s, body := appendTo(t, url, "late", tok, "second")
	var p receipt.Proof
	if s != 200 || json.Unmarshal(body, &p) != nil || p.Inclusion.LeafIndex != 1 {
		t.Fatalf("append after the quiet stop: %d %s, want index 1", s, body)
	}
}

// TestRestartServesThousands: a process with two thousand tenants dies abruptly
// (its broker connection cut, nothing released, a hundred tenants active); the one
// started on its directory answers /health at once and every tenant's append.
func TestRestartServesThousands(t *testing.T) {
	srv, dbURL, key := hostedParts(t)
	dir := t.TempDir()
	st, err := store.Open(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	doc := &signer.KeyDocument{Keys: []signer.KeyEntry{key.Public().Entry(time.Now().Add(-time.Hour), nil)}}
	a, err := Start(context.Background(), Config{
		DataDir: dir, NATSURL: srv.ClientURL(), Signer: receipt.KeySigner{Key: key},
		Keys:          func(context.Context) (*signer.KeyDocument, error) { return doc, nil },
		CheckpointDir: filepath.Join(dir, "checkpoints"), CheckpointEvery: time.Hour,
		Logger: slog.New(slog.DiscardHandler), Hosted: &Hosted{Store: st, LeaseTTL: 2 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(a.Handler())
	tokens := addTenants(t, a, "t", 2000, true)
	for i := range 100 {
		id := fmt.Sprintf("t-%d", i)
		if s, body := appendTo(t, hs.URL, id, tokens[id], "before"); s != 200 {
			t.Fatalf("append to %s before the crash: %d %s", id, s, body)
		}
	}
	hs.Close()
	a.Conn().Close() // the broker sees the process die: nothing released
	a.Close()
	started := time.Now()
	b, url := frontEndIn(t, dir, srv.ClientURL(), dbURL, key)
	if code, _, body := testkit.Do(t, "GET", url+"/health", "", ""); code != 200 {
		t.Fatalf("/health after the restart: %d %s", code, body)
	}
	t.Logf("restart to /health: %s", time.Since(started).Round(time.Millisecond))
	var wg sync.WaitGroup
	errs := make(chan error, len(tokens))
	ids := make(chan string)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				want, n := "0", 0
				if _, err := fmt.Sscanf(id, "t-%d", &n); err == nil && n < 100 {
					want = "1"
				}
				code, _, body := testkit.Do(t, http.MethodPost, url+"/t/"+id+"/append", tokens[id], `{"leaf":"after"}`)
				if code != 200 || !strings.Contains(body, `"leafIndex":`+want+`,`) {
					errs <- fmt.Errorf("append to %s after the restart: %d %s, want index %s", id, code, body, want)
				}
			}
		}()
	}
	for id := range tokens {
		ids <- id
	}
	close(ids)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("restart to every tenant appended: %s", time.Since(started).Round(time.Millisecond))
	if n := consumers(t, b.Conn(), pipeline.AppendStream); n > DefaultMaxActive+100 {
		t.Fatalf("%d consumers on %s after serving 2,000 tenants", n, pipeline.AppendStream)
	}
}

// TestBrokerRefusalIsTheTenants: a broker that allows only a few consumers per
// stream refuses a tenant's consumer; that tenant's appends get 503 and /health
// names it, while the tenants already running append and the process stays up.
func TestBrokerRefusalIsTheTenants(t *testing.T) {
	srv, err := server.NewServer(&server.Options{JetStream: true, StoreDir: t.TempDir(), Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
		MaxPayload: pipeline.MaxBatchBytes + 64<<10, JetStreamLimits: server.JSLimitOpts{DefaultMaxConsumers: 3}})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("broker not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	key, _ := signer.GenerateKey()
	a, url := frontEndWith(t, t.TempDir(), srv.ClientURL(), pgtest.New(t), key, slog.New(slog.DiscardHandler), Hosted{LeaseTTL: 2 * time.Second})
	tokens := addTenants(t, a, "r", 4, true)
	for i := range 3 {
		id := fmt.Sprintf("r-%d", i)
		if s, body := appendTo(t, url, id, tokens[id], "first"); s != 200 {
			t.Fatalf("append to %s: %d %s", id, s, body)
		}
	}
	s, body := appendTo(t, url, "r-3", tokens["r-3"], "refused")
	if s != 503 || !strings.Contains(string(body), "maximum consumers limit reached") {
		t.Fatalf("append to the tenant whose consumer the broker refuses: %d %s, want 503", s, body)
	}
	code, _, health := testkit.Do(t, "GET", url+"/health", "", "")
	if code != 200 || !strings.Contains(health, `"r-3":`) {
		t.Fatalf("/health: %d %s, want r-3 listed", code, health)
	}
	for i := range 3 {
		id := fmt.Sprintf("r-%d", i)
		if s, body := appendTo(t, url, id, tokens[id], "after the refusal"); s != 200 {
			t.Fatalf("append to %s after r-3 was refused: %d %s", id, s, body)
		}
	}
	select {
	case err := <-a.Err():
		t.Fatalf("the process was told to stop: %v", err)
	default:
	}
}
