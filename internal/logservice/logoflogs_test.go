package logservice

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"log/slog"

	"svc.dev/svc/internal/logoflogs"
	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/projections"
	"svc.dev/svc/internal/testkit"
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
	err = pgx.BeginFunc(context.Background(), svc.hosted.cfg.Store.Pool, func(tx pgx.Tx) error {
		for i := range 999 {
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
	time.Sleep(600 * time.Millisecond)
	if got := lolRequests.Load() - before; got != 1 {
		t.Fatalf("%d witness requests for one changed tenant, want 1", got)
	}

	// End to end, with no credential.
	code, pbody := get(t, url+"/log-of-logs/proof/acme")
	if code != 200 {
		t.Fatalf("proof of acme: %d %s", code, pbody)
	}
	var p logoflogs.Proof
	if err := json.Unmarshal([]byte(pbody), &p); err != nil {
		t.Fatal(err)
	}
	tvk, _ := note.NewEd25519VerifierKey(projections.DefaultOrigin("", "acme"), key.Public().Key)
	tv, _ := note.NewVerifier(tvk)
	size, root, err := logoflogs.Verify(&p, policy, tv)
	if err != nil {
		t.Fatalf("acme's checkpoint is not proved witnessed: %v", err)
	}
	tree := tlog.Tree{N: int64(size), Hash: tlog.Hash(root)}
	i := int64(rp.Inclusion.LeafIndex)
	proof, err := tlog.ProveRecord(tree.N, i, tlog.TileHashReader(tree, publicTiles{t: t, base: url + "/t/acme"}))
	if err != nil {
		t.Fatal(err)
	}
	if err := tlog.CheckRecord(proof, tree.N, tree.Hash, i, tlog.RecordHash([]byte("the receipt"))); err != nil {
		t.Fatalf("the receipt is not under the witnessed checkpoint of acme: %v", err)
	}
	if code, body := get(t, url+"/log-of-logs/proof/nobody"); code != 404 {
		t.Fatalf("proof of a tenant with no checkpoint: %d %s", code, body)
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
		err := pgx.BeginFunc(context.Background(), db.Pool, func(tx pgx.Tx) error {
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
	var p logoflogs.Proof
	if code != 200 || json.Unmarshal([]byte(body), &p) != nil || p.Index != 60 {
		t.Fatalf("proof of t0060 from the new runner: %d %s", code, body)
	}
}
