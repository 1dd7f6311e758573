package logservice

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"log/slog"

	"svc.dev/svc/internal/logoflogs"
	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/projections"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
	"svc.dev/svc/witness"
)

// TestLogOfLogsInTheHostedLog: a hosted process runs the log of logs (its lease won,
// its leaves in PostgreSQL): 999 tenants' checkpoints that appear at once cost one
// add-checkpoint request to the C2SP witness, intervals with no change cost none, and
// one changed tenant costs one; a tenant's receipt is verified end to end with no
// credential: the proof route's tenant checkpoint is in the witnessed log-of-logs
// checkpoint (under a C2SP tlog-policy), and the receipt's leaf is under that tenant
// checkpoint by the public hash tiles (golang.org/x/mod/sumdb/tlog).
func TestLogOfLogsInTheHostedLog(t *testing.T) {
	var lolRequests atomic.Int64
	var wv string
	svc, url, key := hostedWithRemoteSigner(t, func(key *signer.Key) []string {
		var logs []string
		for _, tenant := range []string{"acme", LogOfLogsLease} {
			vk, _ := note.NewEd25519VerifierKey(projections.DefaultOrigin("", tenant), key.Public().Key)
			logs = append(logs, vk)
		}
		wkey, _ := signer.GenerateKey()
		tw, err := witness.NewTlogWitness(witness.TlogConfig{Key: wkey, Name: "w.example.com/lol", Logs: logs, Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		wv = tw.VerifierKey()
		lolOrigin := []byte(projections.DefaultOrigin("", LogOfLogsLease) + "\n")
		ws := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			if bytes.Contains(body, lolOrigin) {
				lolRequests.Add(1)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			tw.ServeHTTP(w, r)
		}))
		t.Cleanup(ws.Close)
		return []string{ws.URL}
	}, func(c *Config) { c.Hosted.LogOfLogsEvery = 200 * time.Millisecond })
	lolVkey, _ := note.NewEd25519VerifierKey(projections.DefaultOrigin("", LogOfLogsLease), key.Public().Key)
	policy, err := witness.ParsePolicy(fmt.Appendf(nil, "log %s\nwitness W %s\nquorum W\n", lolVkey, wv))
	if err != nil {
		t.Fatal(err)
	}
	witnessedSize := func() uint64 {
		code, body := get(t, url+"/log-of-logs/checkpoint")
		if code != 200 {
			return 0
		}
		c, err := policy.VerifyCheckpoint([]byte(body), nil)
		if err != nil {
			t.Fatalf("the log of logs' checkpoint does not meet the policy: %v\n%s", err, body)
		}
		return c.Size
	}
	awaitSize := func(want uint64) {
		t.Helper()
		testkit.Eventually(t, 20*time.Second, func() error {
			if got := witnessedSize(); got != want {
				return fmt.Errorf("witnessed log of logs of size %d, want %d", got, want)
			}
			return nil
		})
	}
	tok := addTenant(t, svc, "acme")
	code, body := appendTo(t, url, "acme", tok, "the receipt")
	if code != 200 {
		t.Fatalf("append: %d %s", code, body)
	}
	var rp receipt.Proof
	if err := json.Unmarshal(body, &rp); err != nil {
		t.Fatal(err)
	}
	tick := func() {
		if err := svc.Checkpointer("acme").Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	tick()
	awaitSize(1)
	// 999 tenants' checkpoints appear at once: one witness request.
	before := lolRequests.Load()
	insertSyntheticCheckpoints(t, svc.hosted.cfg.Store.Pool, 0, 999)
	awaitSize(1000)
	if got := lolRequests.Load() - before; got != 1 {
		t.Fatalf("%d witness requests for 999 new tenants' checkpoints, want 1", got)
	}
	before = lolRequests.Load()
	time.Sleep(time.Second) // five intervals with no change
	if got := lolRequests.Load() - before; got != 0 {
		t.Fatalf("%d witness requests in intervals with no change, want 0", got)
	}
	if code, body := appendTo(t, url, "acme", tok, "another receipt"); code != 200 {
		t.Fatalf("append: %d %s", code, body)
	}
	tick()
	awaitSize(1001)
	// The process's copy of the tree is on disk (a file store), not in memory.
	if fi, err := os.Stat(filepath.Join(svc.cfg.DataDir, "log-of-logs", "tree", merkle.LevelFileName(0))); err != nil || fi.Size() < 768*merkle.HashSize {
		t.Fatalf("the log of logs' leaf hashes on disk: %v %v, want at least 768 of the 1,001 written out", fi, err)
	}
	time.Sleep(600 * time.Millisecond)
	if got := lolRequests.Load() - before; got != 1 {
		t.Fatalf("%d witness requests for one changed tenant, want 1", got)
	}

	// End to end, with no credential: the proof in C2SP tlog-proof's text form.
	code, pbody := get(t, url+"/log-of-logs/proof/acme")
	if code != 200 || !strings.HasPrefix(pbody, "c2sp.org/tlog-proof@v1\n") {
		t.Fatalf("proof of acme: %d %s", code, pbody)
	}
	p, err := logoflogs.ParseProof([]byte(pbody))
	if err != nil {
		t.Fatal(err)
	}
	tvk, _ := note.NewEd25519VerifierKey(projections.DefaultOrigin("", "acme"), key.Public().Key)
	tv, _ := note.NewVerifier(tvk)
	size, root, err := logoflogs.Verify(p, policy, tv)
	if err != nil {
		t.Fatalf("acme's checkpoint is not proved witnessed: %v", err)
	}
	tree := tlog.Tree{N: int64(size), Hash: tlog.Hash(root)}
	i := int64(rp.Inclusion.LeafIndex)
	proof, err := tlog.ProveRecord(tree.N, i, tlog.TileHashReader(tree, testkit.C2SPTiles{T: t, Base: url + "/t/acme"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tlog.CheckRecord(proof, tree.N, tree.Hash, i, tlog.RecordHash([]byte("the receipt"))); err != nil {
		t.Fatalf("the receipt is not under the witnessed checkpoint of acme: %v", err)
	}
	if code, body := get(t, url+"/log-of-logs/proof/nobody"); code != 404 {
		t.Fatalf("proof of a tenant with no checkpoint: %d %s", code, body)
	}
	lolIncludes(t, url, lolVkey, "acme", p.Index)
	lolStrangerBounded(t, url)
}

// insertSyntheticCheckpoints writes, in one transaction, a size-1 checkpoint note
// for each of the n tenants t<from>..t<from+n-1>, as if they had all just grown.
func insertSyntheticCheckpoints(t *testing.T, pool *pgxpool.Pool, from, n int) {
	t.Helper()
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		for i := from; i < from+n; i++ {
			if _, err := tx.Exec(context.Background(), `INSERT INTO checkpoint_notes (tenant_id, tree_size, note) VALUES ($1, 1, $2)`,
				fmt.Sprintf("t%04d", i), fmt.Appendf(nil, "synthetic checkpoint of t%04d\n", i)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// lolStrangerBounded: one address asking the /log-of-logs/ routes as fast as it can
// is answered 429 with Retry-After past its budget (LogOfLogsBurst at once), while
// another address is served meanwhile.
func lolStrangerBounded(t *testing.T, base string) {
	t.Helper()
	from := func(ip string) *http.Client {
		tr := &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}).DialContext}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	ask := func(c *http.Client, path string) *http.Response {
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	stranger, other := from("127.0.0.2"), from("127.0.0.3")
	statuses := map[int]int{}
	var refused *http.Response
	for range 3 * LogOfLogsBurst {
		resp := ask(stranger, "/log-of-logs/tile/0/000.p/1")
		statuses[resp.StatusCode]++
		if resp.StatusCode == http.StatusTooManyRequests {
			refused = resp
		}
	}
	if refused == nil || refused.Header.Get("Retry-After") != "1" || statuses[200] < LogOfLogsBurst || statuses[200]+statuses[429] != 3*LogOfLogsBurst {
		t.Fatalf("%d requests from one address: statuses %v, want %d or more 200s, then 429s with Retry-After: 1", 3*LogOfLogsBurst, statuses, LogOfLogsBurst)
	}
	for _, path := range []string{"/log-of-logs/checkpoint", "/log-of-logs/tile/0/000.p/1", "/log-of-logs/proof/acme"} {
		if resp := ask(other, path); resp.StatusCode != 200 {
			t.Fatalf("%s from another address while the first is over its budget: %d", path, resp.StatusCode)
		}
	}
}

// lolIncludes: an independent client (golang.org/x/mod/sumdb/note and tlog) reads the
// log of logs' checkpoint and hash tiles at base with no credential, and proves
// tenant's checkpoint, as its own route serves it, the log of logs' leaf index.
func lolIncludes(t *testing.T, base, lolVkey, tenant string, index uint64) {
	t.Helper()
	v, err := note.NewVerifier(lolVkey)
	if err != nil {
		t.Fatal(err)
	}
	tree := publicCheckpointOf(t, base+"/log-of-logs", note.VerifierList(v), 1)
	code, cp := get(t, base+"/t/"+tenant+"/checkpoint")
	if code != 200 {
		t.Fatalf("%s's checkpoint: %d %s", tenant, code, cp)
	}
	proof, err := tlog.ProveRecord(tree.N, int64(index), tlog.TileHashReader(tree, testkit.C2SPTiles{T: t, Base: base + "/log-of-logs"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tlog.CheckRecord(proof, tree.N, tree.Hash, int64(index), tlog.RecordHash([]byte(cp))); err != nil {
		t.Fatalf("%s's checkpoint is not leaf %d of the log of logs by its public tiles: %v", tenant, index, err)
	}
}

// TestLogOfLogsOneRunnerTakesOver: two processes of one deployment run one log of
// logs between them (one witness request for a change, not two); when the runner
// stops, the other wins the lease, replays the leaves from PostgreSQL and goes on, and
// the witness, which cosigned the first runner's checkpoint, cosigns the next (it
// accepts only a log consistent with it).
func TestLogOfLogsOneRunnerTakesOver(t *testing.T) {
	srv, dbURL, key := hostedParts(t)
	vkey, _ := note.NewEd25519VerifierKey(projections.DefaultOrigin("", LogOfLogsLease), key.Public().Key)
	wkey, _ := signer.GenerateKey()
	tw, err := witness.NewTlogWitness(witness.TlogConfig{Key: wkey, Name: "w.example.com/lol", Logs: []string{vkey}, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var requests atomic.Int64
	ws := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { requests.Add(1); tw.ServeHTTP(w, r) }))
	t.Cleanup(ws.Close)
	policy, err := witness.ParsePolicy(fmt.Appendf(nil, "log %s\nwitness W %s\nquorum W\n", vkey, tw.VerifierKey()))
	if err != nil {
		t.Fatal(err)
	}
	h := Hosted{LeaseTTL: time.Second, LogOfLogsEvery: 100 * time.Millisecond}
	withWitness := func(c *Config) { c.Witnesses = []string{ws.URL} }
	var procs []*Service
	var urls []string
	for range 2 {
		p, u := frontEndWith(t, t.TempDir(), natsembed.URL(srv, "pw-of-tests"), dbURL, key, slog.New(slog.DiscardHandler), h, 1, withWitness)
		procs, urls = append(procs, p), append(urls, u)
	}
	db := procs[0].hosted.cfg.Store
	publish := func(from, n int) {
		t.Helper()
		insertSyntheticCheckpoints(t, db.Pool, from, n)
	}
	await := func(url string, want uint64) {
		t.Helper()
		testkit.Eventually(t, 20*time.Second, func() error {
			code, body := get(t, url+"/log-of-logs/checkpoint")
			if code != 200 {
				return fmt.Errorf("%d %s", code, body)
			}
			c, err := policy.VerifyCheckpoint([]byte(body), nil)
			if err != nil {
				return err
			}
			if c.Size != want {
				return fmt.Errorf("witnessed size %d, want %d", c.Size, want)
			}
			return nil
		})
	}
	publish(0, 50)
	await(urls[1], 50)
	time.Sleep(300 * time.Millisecond) // three more intervals of both processes
	if got := requests.Load(); got != 1 {
		t.Fatalf("%d witness requests for one change with two processes, want 1", got)
	}
	e, err := procs[0].hosted.kv.Get(context.Background(), LogOfLogsLease)
	if err != nil {
		t.Fatal(err)
	}
	runner, other := 0, 1
	if string(e.Value()) != procs[0].hosted.id {
		runner, other = 1, 0
	}
	procs[runner].Close()
	publish(50, 25)
	await(urls[other], 75)
	if got := requests.Load(); got != 2 {
		t.Fatalf("%d witness requests after the take-over, want 2", got)
	}
	code, body := get(t, urls[other]+"/log-of-logs/proof/t0060")
	if p, err := logoflogs.ParseProof([]byte(body)); code != 200 || err != nil || p.Index != 60 {
		t.Fatalf("proof of t0060 from the new runner: %d %s", code, body)
	}

	// A process whose tree store is not the database's (another deployment's, or
	// one the database lost) rebuilds it from the database: its proof verifies.
	dir := t.TempDir()
	bogus, err := merkle.OpenFileStore(filepath.Join(dir, "log-of-logs", "tree"))
	if err != nil {
		t.Fatal(err)
	}
	bt, _ := merkle.NewTree(bogus)
	for i := range 10 {
		if _, err := bt.Append(merkle.LeafHash(fmt.Appendf(nil, "not a leaf of this log of logs %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := bogus.Close(); err != nil {
		t.Fatal(err)
	}
	_, url3 := frontEndWith(t, dir, natsembed.URL(srv, "pw-of-tests"), dbURL, key, slog.New(slog.DiscardHandler), h, 1, withWitness)
	code, body = get(t, url3+"/log-of-logs/proof/t0005")
	p, err := logoflogs.ParseProof([]byte(body))
	if code != 200 || err != nil {
		t.Fatalf("proof of t0005 from a process whose tree store was another's: %d %s", code, body)
	}
	c, err := policy.VerifyCheckpoint(p.Witnessed, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := merkle.VerifyInclusion(p.Index, c.Size, merkle.LeafHash(p.Checkpoint), p.Inclusion, c.Root); err != nil || p.Index != 5 {
		t.Fatalf("proof of t0005 (leaf %d) from a rebuilt tree: %v", p.Index, err)
	}
}
