package faults

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"svc.dev/svc/internal/logoflogs"
	"svc.dev/svc/internal/logservice"
	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/pgtest"
	"svc.dev/svc/internal/projections"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/merkle"
	"svc.dev/svc/signer"
	"svc.dev/svc/signer/remote"
	"svc.dev/svc/witness"
)

// gatedWitness is svc's C2SP witness behind a gate the test closes: the next
// add-checkpoint request, its body read, waits until the test opens the gate, and is
// then handed to the witness (which cosigns it whether or not its sender still lives).
type gatedWitness struct {
	w       http.Handler
	mu      sync.Mutex
	gate    chan struct{} // nil: open
	arrived chan struct{} // closed when a request reaches the closed gate
	sizes   []uint64      // the sizes the witness cosigned, in order
}

func (g *gatedWitness) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	g.mu.Lock()
	gate, arrived := g.gate, g.arrived
	g.gate = nil
	g.mu.Unlock()
	if gate != nil {
		close(arrived)
		<-gate
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	rec := httptest.NewRecorder()
	g.w.ServeHTTP(rec, r)
	if rec.Code == http.StatusOK {
		if _, cp, ok := bytes.Cut(body, []byte("\n\n")); ok { // old size, proof, then the checkpoint
			if lines := strings.SplitN(string(cp), "\n", 3); len(lines) == 3 {
				size, _ := strconv.ParseUint(lines[1], 10, 64)
				g.mu.Lock()
				g.sizes = append(g.sizes, size)
				g.mu.Unlock()
			}
		}
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// close makes the next request wait at the gate; the returned channels: closed when
// it arrived, and the one to close to let it through.
func (g *gatedWitness) close() (arrived, gate chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate, g.arrived = make(chan struct{}), make(chan struct{})
	return g.arrived, g.gate
}

// TestLogOfLogsRunnerKilled: two `svc log --db-env --log-of-logs-every 1` processes;
// the one running the log of logs is killed with SIGKILL mid-interval (its leaves
// recorded in PostgreSQL, its checkpoint at the witness, which cosigns it after the
// kill: a cosignature nobody recorded). The other takes the `_log-of-logs` lease,
// rebuilds the tree from the PostgreSQL table, and publishes the killed runner's
// leaves at once and the next changes after; the witness cosigns each (it accepts only
// a log consistent with what it cosigned), every checkpoint either process ever served
// is consistent with the last (by the public tiles, golang.org/x/mod/sumdb/tlog), and
// every tenant's latest checkpoint is proved in the last one.
func TestLogOfLogsRunnerKilled(t *testing.T) {
	srv := testkit.ListeningBroker(t)
	natsURL := natsembed.URL(srv, testkit.BrokerPassword)
	dbURL := pgtest.New(t)
	key, _ := signer.GenerateKey()
	heads, err := remote.OpenHeadStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ss, err := remote.NewServer(remote.ServerConfig{Key: key, Token: "signer-shared-token-123", ValidFrom: time.Now().Add(-time.Hour), Heads: heads, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	signerSrv := httptest.NewServer(ss)
	t.Cleanup(signerSrv.Close)
	lolVkey, _ := note.NewEd25519VerifierKey(projections.DefaultOrigin("", logservice.LogOfLogsLease), key.Public().Key)
	wkey, _ := signer.GenerateKey()
	tw, err := witness.NewTlogWitness(witness.TlogConfig{Key: wkey, Name: "w.example.com/kill", Logs: []string{lolVkey}, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	gw := &gatedWitness{w: tw}
	ws := httptest.NewServer(gw)
	t.Cleanup(ws.Close)
	policy, err := witness.ParsePolicy(fmt.Appendf(nil, "log %s\nwitness W %s\nquorum W\n", lolVkey, tw.VerifierKey()))
	if err != nil {
		t.Fatal(err)
	}

	env := []string{"TEST_DATABASE_URL=" + dbURL, "TEST_ADMIN_TOKEN=admin-token-456-0123456789abcdefghij", "TEST_SIGNER_TOKEN=signer-shared-token-123"}
	var procs []*plainProc
	for i := range 2 {
		p := newPlainProc(t, env, "--db-env", "TEST_DATABASE_URL", "--nats-url", natsURL, "--data", filepath.Join(t.TempDir(), fmt.Sprint("data", i)),
			"--signer-url", signerSrv.URL, "--signer-token-env", "TEST_SIGNER_TOKEN", "--admin-token-env", "TEST_ADMIN_TOKEN",
			"--log-of-logs-every", "1", "--witness-add-checkpoint", ws.URL)
		p.start()
		procs = append(procs, p)
	}
	for _, p := range procs {
		testkit.Eventually(t, 60*time.Second, func() error {
			p.alive("at start")
			if code, msg := p.health(); code != 200 {
				return fmt.Errorf("/health: %d %s", code, msg)
			}
			return nil
		})
	}
	o := startObserver(t, procs, policy)

	// The tenants' checkpoints (synthetic notes: the log of logs takes any note).
	db, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	latest := map[string][]byte{}
	publish := func(round string, tenants ...int) {
		t.Helper()
		for _, i := range tenants {
			name := fmt.Sprintf("t%04d", i)
			latest[name] = fmt.Appendf(nil, "checkpoint of %s, round %s\n", name, round)
			if _, err := db.Exec(context.Background(), `INSERT INTO checkpoint_notes (tenant_id, tree_size, note) VALUES ($1, 1, $2)
				ON CONFLICT (tenant_id) DO UPDATE SET note = excluded.note`, name, latest[name]); err != nil {
				t.Fatal(err)
			}
		}
	}
	span := func(from, n int) []int {
		var out []int
		for i := from; i < from+n; i++ {
			out = append(out, i)
		}
		return out
	}
	publish("1", span(0, 30)...)
	o.await(t, 30)

	// Mid-interval: the runner recorded 25 leaves and waits on the witness.
	arrived, gate := gw.close()
	publish("2", append(span(30, 20), 0, 1, 2, 3, 4)...)
	select {
	case <-arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("no witness request for the second round")
	}
	var recorded int
	if err := db.QueryRow(context.Background(), `SELECT count(*) FROM log_of_logs`).Scan(&recorded); err != nil || recorded != 55 {
		t.Fatalf("%d leaves recorded when the runner asked the witness (%v), want 55", recorded, err)
	}
	runner := lolRunner(t, natsURL, procs)
	_ = runner.cmd.Process.Kill() // SIGKILL
	<-runner.done
	close(gate) // the witness cosigns 55 for a runner that is gone
	other := procs[0]
	if other == runner {
		other = procs[1]
	}
	t0 := time.Now()
	o.await(t, 55) // the leaves the killed runner recorded, published by the next
	t.Logf("the other process took over and published the killed runner's leaves %s after the kill", time.Since(t0).Round(time.Millisecond))
	if got := lolRunner(t, natsURL, procs); got != other {
		t.Fatal("the lease is not the surviving process's")
	}
	publish("3", append(span(50, 10), 5, 30)...)
	o.await(t, 67)
	other.alive("at the end")

	final := o.check(t, other.base)
	for tenant, cp := range latest {
		code, body := httpGet(t, other.base+"/log-of-logs/proof/"+tenant)
		p, err := logoflogs.ParseProof([]byte(body))
		if code != 200 || err != nil {
			t.Fatalf("proof of %s: %d %v %s", tenant, code, err, body)
		}
		c, err := policy.VerifyCheckpoint(p.Witnessed, nil)
		if err != nil || c.Size != uint64(final.N) || !bytes.Equal(p.Checkpoint, cp) {
			t.Fatalf("proof of %s: %v, size %d, leaf %q; want the final checkpoint over its latest %q", tenant, err, c.Size, p.Checkpoint, cp)
		}
		if err := merkle.VerifyInclusion(p.Index, c.Size, merkle.LeafHash(cp), p.Inclusion, c.Root); err != nil {
			t.Fatalf("%s's latest checkpoint is not in the log of logs: %v", tenant, err)
		}
	}
	gw.mu.Lock()
	defer gw.mu.Unlock()
	for i := 1; i < len(gw.sizes); i++ {
		if gw.sizes[i] < gw.sizes[i-1] {
			t.Fatalf("the witness cosigned sizes %v: not increasing", gw.sizes)
		}
	}
	if !containsSize(gw.sizes, 55) || gw.sizes[len(gw.sizes)-1] != 67 {
		t.Fatalf("the witness cosigned sizes %v; want 55 (for the killed runner) and 67 last", gw.sizes)
	}
}

func containsSize(sizes []uint64, n uint64) bool {
	for _, s := range sizes {
		if s == n {
			return true
		}
	}
	return false
}

// lolRunner is the process holding the log of logs' lease.
func lolRunner(t *testing.T, natsURL string, procs []*plainProc) *plainProc {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	var found *plainProc
	testkit.Eventually(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		pid, err := leaseHolder(ctx, js, logservice.LogOfLogsLease)
		if err != nil {
			return err
		}
		for _, p := range procs {
			if p.cmd != nil && p.cmd.Process.Pid == pid {
				select {
				case <-p.done:
				default:
					found = p
					return nil
				}
			}
		}
		return fmt.Errorf("the log of logs' lease is held by pid %d, none of ours alive", pid)
	})
	return found
}

// observer polls every process's /log-of-logs/checkpoint and keeps each distinct
// checkpoint served, verified under the policy.
type observer struct {
	policy *witness.Policy
	mu     sync.Mutex
	seen   map[uint64][]byte // size → the checkpoint's note
	last   uint64
	bad    error
}

func startObserver(t *testing.T, procs []*plainProc, policy *witness.Policy) *observer {
	o := &observer{policy: policy, seen: map[uint64][]byte{}}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			for _, p := range procs {
				o.poll(p.base)
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return o
}

func (o *observer) poll(base string) {
	resp, err := http.Get(base + "/log-of-logs/checkpoint")
	if err != nil {
		return // a killed process
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	c, err := o.policy.VerifyCheckpoint(body, nil)
	if err != nil {
		o.bad = fmt.Errorf("%s served a checkpoint short of the policy: %w\n%s", base, err, body)
		return
	}
	if prev, ok := o.seen[c.Size]; ok && !sameText(prev, body) {
		o.bad = fmt.Errorf("two checkpoints of size %d:\n%s\n%s", c.Size, prev, body)
	}
	o.seen[c.Size] = body
	o.last = max(o.last, c.Size)
}

// sameText reports whether two notes have the same text (their signatures may differ:
// a checkpoint re-signed by a runner that took over).
func sameText(a, b []byte) bool {
	ta, _, _ := bytes.Cut(a, []byte("\n\n"))
	tb, _, _ := bytes.Cut(b, []byte("\n\n"))
	return bytes.Equal(ta, tb)
}

// await waits until a process serves the checkpoint of size want.
func (o *observer) await(t *testing.T, want uint64) {
	t.Helper()
	testkit.Eventually(t, 60*time.Second, func() error {
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.bad != nil {
			t.Fatal(o.bad)
		}
		if o.last != want {
			return fmt.Errorf("the log of logs' checkpoint is at %d, want %d", o.last, want)
		}
		return nil
	})
}

// check proves every checkpoint served consistent with the last, from base's public
// tiles with golang.org/x/mod/sumdb/tlog, and returns the last.
func (o *observer) check(t *testing.T, base string) tlog.Tree {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.bad != nil {
		t.Fatal(o.bad)
	}
	tree := func(n []byte) tlog.Tree {
		c, err := o.policy.VerifyCheckpoint(n, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tlog.Tree{N: int64(c.Size), Hash: tlog.Hash(c.Root)}
	}
	final := tree(o.seen[o.last])
	hr := tlog.TileHashReader(final, testkit.C2SPTiles{T: t, Base: base + "/log-of-logs"})
	for size, n := range o.seen {
		old := tree(n)
		proof, err := tlog.ProveTree(final.N, old.N, hr)
		if err != nil {
			t.Fatal(err)
		}
		if err := tlog.CheckTree(proof, final.N, final.Hash, old.N, old.Hash); err != nil {
			t.Fatalf("the checkpoint of size %d served is not consistent with the last (%d): %v", size, final.N, err)
		}
	}
	t.Logf("%d checkpoints served, each consistent with the last (size %d)", len(o.seen), final.N)
	return final
}

// httpGet is a GET's status and body (testkit.Do without a token).
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	code, _, body := testkit.Do(t, http.MethodGet, url, "", "")
	return code, body
}
