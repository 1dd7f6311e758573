package logservice

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/natsembed"
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
	return testkit.StreamInfo(t, js, stream).State.Consumers
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
// created after them appends at once (the process gets its consumer on SVC_APPEND);
// once quiet it again holds no sequencer or lease (the process keeps its one
// consumer) and its checkpoint is published as it stops (the checkpointer's next
// tick was an hour away), and its next append starts it again at the next index.
func TestIdleTenantsCostNothing(t *testing.T) {
	srv, dbURL, key := hostedParts(t)
	dir := t.TempDir()
	a, url := frontEndWith(t, dir, natsembed.URL(srv, "pw-of-tests"), dbURL, key, slog.New(slog.DiscardHandler),
		Hosted{LeaseTTL: 2 * time.Second, QuietPeriod: 500 * time.Millisecond}, 1)
	before := runtime.NumGoroutine()
	addTenants(t, a, "idle", 1000, false)
	if g := runtime.NumGoroutine(); g > before+50 {
		t.Fatalf("goroutines %d after a thousand idle tenants, %d before", g, before)
	}
	if n := consumers(t, a.Conn(), pipeline.AppendStream); n != 0 {
		t.Fatalf("%d consumers on %s with a thousand idle tenants, want 0", n, pipeline.AppendStream)
	}
	if n := leases(t, a.Conn()); n != 0 {
		t.Fatalf("%d leases for idle tenants, want 0", n)
	}
	tok := addTenant(t, a, "late")
	if s, body := appendTo(t, url, "late", tok, "first"); s != 200 {
		t.Fatalf("append of the tenant created after a thousand: %d %s", s, body)
	}
	if a.Sequencer("late") == nil || consumers(t, a.Conn(), pipeline.AppendStream) != 1 || leases(t, a.Conn()) != 1 {
		t.Fatal("the active tenant runs no sequencer or lease, or has a consumer of its own")
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		if a.Sequencer("late") != nil {
			return fmt.Errorf("sequencer still runs")
		}
		if n := consumers(t, a.Conn(), pipeline.AppendStream); n != 1 {
			return fmt.Errorf("%d consumers on %s, want the process's one", n, pipeline.AppendStream)
		}
		if n := consumers(t, a.Conn(), pipeline.LeavesStream); n > 3 { // the database projections' own
			return fmt.Errorf("%d consumers on %s", n, pipeline.LeavesStream)
		}
		if n := leases(t, a.Conn()); n != 0 {
			return fmt.Errorf("%d leases", n)
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(dir, "checkpoints", "late", "1.json")); err != nil {
		t.Fatalf("no checkpoint of the quiet tenant's one leaf: %v", err)
	}
	s, body := appendTo(t, url, "late", tok, "second")
	var p receipt.Proof
	if s != 200 || json.Unmarshal(body, &p) != nil || p.Inclusion.LeafIndex != 1 {
		t.Fatalf("append after the quiet stop: %d %s, want index 1", s, body)
	}
}

// TestRestartServesThousands: a process with 1,200 tenants dies abruptly (its
// broker connection cut, nothing released, fifty tenants active); the one started on
// its directory answers /health at once and every tenant's append.
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
		DataDir: dir, NATSURL: natsembed.URL(srv, "pw-of-tests"), Signer: receipt.KeySigner{Key: key},
		Keys:          func(context.Context) (*signer.KeyDocument, error) { return doc, nil },
		CheckpointDir: filepath.Join(dir, "checkpoints"), CheckpointEvery: time.Hour,
		Logger: slog.New(slog.DiscardHandler), Hosted: &Hosted{Store: st, LeaseTTL: 2 * time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(a.Handler())
	tokens := addTenants(t, a, "t", 1200, true)
	for i := range 50 {
		id := fmt.Sprintf("t-%d", i)
		if s, body := appendTo(t, hs.URL, id, tokens[id], "before"); s != 200 {
			t.Fatalf("append to %s before the crash: %d %s", id, s, body)
		}
	}
	hs.Close()
	a.Conn().Close() // the broker sees the process die: nothing released
	a.Close()
	started := time.Now()
	b, url := frontEndIn(t, dir, natsembed.URL(srv, "pw-of-tests"), dbURL, key)
	if code, _, body := testkit.Do(t, "GET", url+"/health", "", ""); code != 200 {
		t.Fatalf("/health after the restart: %d %s", code, body)
	}
	t.Logf("restart to /health: %s", time.Since(started).Round(time.Millisecond))
	// The dead process is out of the process bucket: the balancer hands no tenant
	// over to it (each such hand-over stopped a sequencer in the middle of the
	// restart's first appends).
	if _, err := b.hosted.members.Get(context.Background(), memberKey(a.hosted.id)); err == nil {
		t.Fatal("the previous process on the data directory is still in the process bucket after the restart")
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(tokens))
	ids := make(chan string)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				want, n := "0", 0
				if _, err := fmt.Sscanf(id, "t-%d", &n); err == nil && n < 50 {
					want = "1"
				}
				// As a client does (SPEC.md: three retries of a 503): on a machine this
				// loaded a lease renewal can miss its TTL and hand a tenant over mid-append.
				var code int
				var body string
				for try := 0; try < 4; try++ {
					if code, _, body = testkit.Do(t, http.MethodPost, url+"/t/"+id+"/append", tokens[id], `{"leaf":"after"}`); code != 503 {
						break
					}
					time.Sleep(time.Duration(100<<try) * time.Millisecond)
				}
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
	if n := consumers(t, b.Conn(), pipeline.AppendStream); n >= 1000 {
		t.Fatalf("%d consumers on %s after serving 1,200 tenants", n, pipeline.AppendStream)
	}
}

// TestOneConsumerWhateverTheTenants: on a broker that allows three consumers a
// stream, forty tenants all active at once append (then, idle, they are brought
// back under MaxActive) (the process has one consumer on
// SVC_APPEND for up to 64 active tenants: the count read from the broker's stream
// info stays 1), as does an idle tenant whose append comes over the broker
// (a gateway's or SDK's); a tenant whose start fails on a resource (its tree
// directory cannot be made, as on a full disk) gets 503 and is named in /health,
// while the others go on appending and the process stays up.
func TestOneConsumerWhateverTheTenants(t *testing.T) {
	srv := testkit.StartServer(t, &server.Options{JetStream: true, StoreDir: t.TempDir(), Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
		MaxPayload: pipeline.MaxBatchBytes + 64<<10, JetStreamLimits: server.JSLimitOpts{DefaultMaxConsumers: 3}})
	key, _ := signer.GenerateKey()
	dir := t.TempDir()
	a, url := frontEndWith(t, dir, srv.ClientURL(), pgtest.New(t), key, slog.New(slog.DiscardHandler), Hosted{LeaseTTL: 2 * time.Second, MaxActive: 10}, 1)
	tokens := addTenants(t, a, "r", 40, true)
	for round := range 2 {
		var wg sync.WaitGroup
		for id, tok := range tokens {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if s, body := appendTo(t, url, id, tok, fmt.Sprint("leaf ", round)); s != 200 || !strings.Contains(string(body), fmt.Sprintf(`"leafIndex":%d,`, round)) {
					t.Errorf("append %d to %s: %d %s", round, id, s, body)
				}
			}()
		}
		wg.Wait()
		if n := consumers(t, a.Conn(), pipeline.AppendStream); n != 1 {
			t.Fatalf("%d consumers on %s with %d tenants active, want 1", n, pipeline.AppendStream, len(tokens))
		}
	}
	// The forty went past MaxActive at once (a soft cap); idle, they are brought
	// back under it.
	testkit.Eventually(t, 30*time.Second, func() error {
		running := 0
		for id := range tokens {
			if a.Sequencer(id) != nil {
				running++
			}
		}
		if running >= 10 || leases(t, a.Conn()) >= 10 {
			return fmt.Errorf("%d sequencers and %d leases, want under MaxActive (10)", running, leases(t, a.Conn()))
		}
		return nil
	})
	addTenants(t, a, "over-nats", 1, false)
	c, err := pipeline.NewClient(a.Conn(), pipeline.ClientConfig{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if p, err := c.Do(context.Background(), "over-nats-0", pipeline.NewLeaf([]byte("from a gateway"))); err != nil || p.Inclusion.LeafIndex != 0 {
		t.Fatalf("append over the broker to an idle tenant: %v %v", p, err)
	}
	tok := addTenant(t, a, "r-blocked")
	if err := os.MkdirAll(filepath.Join(dir, "tenants"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tenants", "r-blocked"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, body := appendTo(t, url, "r-blocked", tok, "refused")
	if s != 503 || !strings.Contains(string(body), "not a directory") {
		t.Fatalf("append to the tenant whose start fails: %d %s, want 503", s, body)
	}
	code, _, health := testkit.Do(t, "GET", url+"/health", "", "")
	if code != 200 || !strings.Contains(health, `"r-blocked":`) {
		t.Fatalf("/health: %d %s, want r-blocked listed", code, health)
	}
	for _, id := range []string{"r-0", "r-1"} {
		if s, body := appendTo(t, url, id, tokens[id], "after the refusal"); s != 200 {
			t.Fatalf("append to %s after r-blocked was refused: %d %s", id, s, body)
		}
	}
	select {
	case err := <-a.Err():
		t.Fatalf("the process was told to stop: %v", err)
	default:
	}
}

// TestTakeoverFromADeadHoldersConsumer: a process that held a tenant dies without
// a word (its broker connection cut: its lease runs out, and its consumer on
// SVC_APPEND keeps the tenant in its filter). Another process's append to that
// tenant wins the lease, takes the tenant out of the dead process's consumer (the
// broker allows one consumer per subject of a work queue) and is answered at the
// next index; the broker holds one consumer per process, not per tenant.
func TestTakeoverFromADeadHoldersConsumer(t *testing.T) {
	srv, dbURL, key := hostedParts(t)
	url := natsembed.URL(srv, "pw-of-tests")
	h := Hosted{LeaseTTL: time.Second}
	a, urlA := frontEndWith(t, t.TempDir(), url, dbURL, key, slog.New(slog.DiscardHandler), h, 1)
	b, urlB := frontEndWith(t, t.TempDir(), url, dbURL, key, slog.New(slog.DiscardHandler), h, 1)
	tokens := addTenants(t, a, "d", 5, true)
	for id, tok := range tokens {
		if s, body := appendTo(t, urlA, id, tok, "first"); s != 200 {
			t.Fatalf("append to %s through a: %d %s", id, s, body)
		}
	}
	if n := consumers(t, b.Conn(), pipeline.AppendStream); n != 1 {
		t.Fatalf("%d consumers on %s with a holding five tenants and b none, want 1", n, pipeline.AppendStream)
	}
	a.Conn().Close() // a dies: nothing released, its consumer stays
	for id, tok := range tokens {
		var s int
		var body []byte
		for try := 0; try < 20; try++ { // until a's lease ran out
			if s, body = appendTo(t, urlB, id, tok, "second"); s != 503 {
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
		if s != 200 || !strings.Contains(string(body), `"leafIndex":1,`) {
			t.Fatalf("append to %s through b after a died: %d %s, want index 1", id, s, body)
		}
		if b.Sequencer(id) == nil {
			t.Fatalf("b does not run %s's sequencer", id)
		}
	}
	js, _ := jetstream.New(b.Conn())
	stream, err := js.Stream(context.Background(), pipeline.AppendStream)
	if err != nil {
		t.Fatal(err)
	}
	for info := range stream.ListConsumers(context.Background()).Info() {
		if strings.HasPrefix(info.Name, b.hosted.feed.name+"-") {
			continue
		}
		for _, s := range info.Config.FilterSubjects {
			if strings.HasPrefix(s, pipeline.AppendPrefix+"d-") {
				t.Errorf("the dead process's consumer %s still has %s", info.Name, s)
			}
		}
	}
	if n := consumers(t, b.Conn(), pipeline.AppendStream); n != 2 {
		t.Fatalf("%d consumers on %s, want 2 (b's and the dead a's)", n, pipeline.AppendStream)
	}
}

// TestActiveTenantGoroutines: an active tenant costs its sequencer's goroutine, not
// one more each for its lease's renewal and its checkpoints (one loop per process
// does each: leaseruns.go, checkpointruns.go).
func TestActiveTenantGoroutines(t *testing.T) {
	srv, dbURL, key := hostedParts(t)
	a, url := frontEndWith(t, t.TempDir(), natsembed.URL(srv, "pw-of-tests"), dbURL, key, slog.New(slog.DiscardHandler),
		Hosted{LeaseTTL: 2 * time.Second}, 1)
	const n = 40
	tokens := addTenants(t, a, "busy", n, true)
	warm := addTenant(t, a, "warm") // the process's own loops and its first lane start here
	if s, body := appendTo(t, url, "warm", warm, "first"); s != 200 {
		t.Fatalf("append: %d %s", s, body)
	}
	time.Sleep(500 * time.Millisecond)
	before := runtime.NumGoroutine()
	for id, tok := range tokens {
		if s, body := appendTo(t, url, id, tok, "first"); s != 200 {
			t.Fatalf("append to %s: %d %s", id, s, body)
		}
	}
	time.Sleep(500 * time.Millisecond) // the first renewals and checkpoint ticks are done
	g := runtime.NumGoroutine()
	t.Logf("%d goroutines for %d more active tenants (%.1f each)", g-before, n, float64(g-before)/n)
	if g-before > n*3/2 {
		t.Fatalf("%d goroutines for %d more active tenants, want at most 1.5 each", g-before, n)
	}
}
