package store

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/client"
	"svc.dev/svc/internal/pgtest"
	"svc.dev/svc/internal/projections"
	"svc.dev/svc/internal/sequencer"
	"svc.dev/svc/internal/tenancy"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/merkle"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

func open(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), pgtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func TestMigrationsAppliedOnce(t *testing.T) {
	url := pgtest.New(t)
	ctx := context.Background()
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil || len(files) < 2 {
		t.Fatalf("embedded migrations %v (%v)", files, err)
	}
	for range 2 {
		s, err := Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := s.Pool.QueryRow(ctx, "SELECT count(*) FROM schema_migrations").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != len(files) {
			t.Fatalf("schema_migrations holds %d rows, want %d (one per embedded migration)", n, len(files))
		}
		s.Close()
	}
}

type env struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	admin *tenancy.Admin
	view  *tenancy.View
}

func startBroker(t *testing.T) env {
	t.Helper()
	nc, js := testkit.Broker(t)()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v := tenancy.NewView(js, nil, nil)
	if err := v.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return env{nc: nc, js: js, admin: &tenancy.Admin{JS: js, View: v}, view: v}
}

func runSequencer(t *testing.T, e env, tenant string) *sequencer.Sequencer {
	t.Helper()
	key, _ := signer.GenerateKey()
	seq, err := sequencer.New(sequencer.Config{Tenant: tenant, Conn: e.nc, Dir: t.TempDir(), Signer: receipt.KeySigner{Key: key}, Admit: &tenancy.Quota{View: e.view, JS: e.js}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- seq.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; seq.Close() })
	<-seq.Ready()
	return seq
}

func leaf(i int) pipeline.Leaf {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(i))
	return pipeline.Leaf{Hash: merkle.Hash(sha256.Sum256(b[:]))}
}

// dump reads a table row by row as text, in a stable order.
func dump(t *testing.T, s *Store, table, order string) []string {
	t.Helper()
	rows, err := s.Pool.Query(context.Background(), fmt.Sprintf("SELECT t::text FROM %s t ORDER BY %s", table, order))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var r string
		if err := rows.Scan(&r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// TestReplayRebuildsTheLiveDatabase: the projections followed live while tenants,
// tokens, plans and appends happened, and a rebuild into an empty database from the
// streams, hold the same rows, table by table; applying an event again changes
// nothing.
func TestReplayRebuildsTheLiveDatabase(t *testing.T) {
	e := startBroker(t)
	live := open(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- live.Run(ctx, e.js) }()

	actor := "alice@host"
	for _, id := range []string{"acme", "globex"} {
		if _, err := e.admin.AddTenant(ctx, actor, id, "log.example/"+id); err != nil {
			t.Fatal(err)
		}
	}
	_, tok, err := e.admin.AddToken(ctx, actor, "acme", "ci")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.admin.AddToken(ctx, actor, "globex", "prod"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.RevokeToken(ctx, actor, "acme", tok.TokenHash); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.SetPlan(ctx, actor, "globex", tenancy.PlanTeam); err != nil {
		t.Fatal(err)
	}
	runSequencer(t, e, "acme")
	runSequencer(t, e, "globex")
	cl, _ := pipeline.NewClient(e.nc, pipeline.ClientConfig{Retries: -1})
	defer cl.Close()
	var appended atomic.Int64
	for i := range 300 {
		tenant := "acme"
		if i%3 == 0 {
			tenant = "globex"
		}
		if _, err := cl.Do(ctx, tenant, leaf(i)); err != nil {
			t.Fatal(err)
		}
		appended.Add(1)
	}
	if _, err := e.admin.DisableTenant(ctx, actor, "acme"); err != nil {
		t.Fatal(err)
	}
	adminLast, _ := lastSeq(t, e.js, pipeline.AdminStream)
	leavesLast, _ := lastSeq(t, e.js, pipeline.LeavesStream)
	testkit.Eventually(t, 5*time.Second, func() error {
		a, _ := live.Position(ctx, "admin")
		l, _ := live.Position(ctx, "leaves")
		if a != adminLast || l != leavesLast {
			return fmt.Errorf("live projections at admin %d/%d, leaves %d/%d", a, adminLast, l, leavesLast)
		}
		return nil
	})
	month := time.Now().UTC().Format("2006-01")
	if a, n, err := live.Usage(ctx, "acme", month); err != nil || a != 200 || n != 200 {
		t.Fatalf("acme usage: %d appends, %d leaves, %v; want 200, 200", a, n, err)
	}

	rebuilt := open(t)
	var caught []string
	if err := rebuilt.Rebuild(ctx, e.js, func(n string) { caught = append(caught, n) }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(caught, ",") != "admin,leaves" {
		t.Fatalf("progress reported %v", caught)
	}
	for _, tb := range []struct{ name, order string }{
		{"tenants", "id"}, {"tokens", "hash"}, {"audit", "stream_seq"}, {"usage", "tenant_id, month"},
		{"log_sizes", "tenant_id"}, {"projection_positions", "name"},
	} {
		a, b := dump(t, live, tb.name, tb.order), dump(t, rebuilt, tb.name, tb.order)
		if len(a) == 0 {
			t.Fatalf("table %s is empty in the live database", tb.name)
		}
		if strings.Join(a, "\n") != strings.Join(b, "\n") {
			t.Fatalf("table %s differs:\nlive:\n%s\nrebuilt:\n%s", tb.name, strings.Join(a, "\n"), strings.Join(b, "\n"))
		}
	}
	// Idempotent by stream position: the first event again changes nothing.
	ev := tenancy.Event{AuditEntry: client.AuditEntry{ID: "x", At: receipt.FormatTime(time.Now()), Actor: "replayed", Action: tenancy.ActionTenantDisable, TenantID: "globex"}}
	if err := rebuilt.ApplyAdmin(ctx, 1, ev); err != nil {
		t.Fatal(err)
	}
	if got := dump(t, rebuilt, "tenants", "id"); strings.Join(got, "\n") != strings.Join(dump(t, live, "tenants", "id"), "\n") {
		t.Fatalf("re-applying stream seq 1 changed tenants: %v", got)
	}
	// No table holds a token: only its 64-hex hash.
	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("live projections: %v", err)
	}
}

func lastSeq(t *testing.T, js jetstream.JetStream, stream string) (uint64, error) {
	t.Helper()
	return testkit.StreamInfo(t, js, stream).State.LastSeq, nil
}

// countingSigner counts the heads it signs.
type countingSigner struct {
	receipt.KeySigner
	n atomic.Int32
}

func (c *countingSigner) SignEnvelope(ctx context.Context, payloadType string, payload []byte) (*receipt.Envelope, error) {
	c.n.Add(1)
	return c.KeySigner.SignEnvelope(ctx, payloadType, payload)
}

// TestCheckpointNeverSignsASecondRoot: a checkpointer whose tree has another root at
// a size the database already holds refuses without signing, and the store refuses
// such a row even when asked directly; a heartbeat over the same root re-signs.
func TestCheckpointNeverSignsASecondRoot(t *testing.T) {
	db := open(t)
	ctx := context.Background()
	key, _ := signer.GenerateKey()
	tree := func(seed int) *merkle.Tree {
		tr, err := merkle.NewTree(merkle.NewMemoryStore())
		if err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			if _, err := tr.Append(leaf(seed*100 + i).Hash); err != nil {
				t.Fatal(err)
			}
		}
		return tr
	}
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	sig := &countingSigner{KeySigner: receipt.KeySigner{Key: key}}
	mk := func(tr *merkle.Tree) *projections.Checkpointer {
		c := &projections.Checkpointer{Dir: t.TempDir(), Tenant: "acme", Tree: tr, Signer: sig, DB: db, Heartbeat: time.Hour, Now: func() time.Time { return now }}
		if err := c.Load(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	honest := mk(tree(1))
	if err := honest.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	signed := sig.n.Load()
	other := mk(tree(2)) // same size, another history, a fresh directory
	err := other.Tick(ctx)
	if err == nil || !strings.Contains(err.Error(), "refusing to sign") {
		t.Fatalf("a second root at size 10: got %v, want a refusal", err)
	}
	if sig.n.Load() != signed {
		t.Fatal("the checkpointer signed a second root for a stored size")
	}
	cp, err := db.CheckpointAt(ctx, "acme", 10)
	if err != nil || cp == nil {
		t.Fatal(cp, err)
	}
	forged := *cp
	forged.RootHash = strings.Repeat("ab", 32)
	if err := db.PutCheckpoint(ctx, forged); !errors.Is(err, ErrRootDiffers) {
		t.Fatalf("store took a second root: %v", err)
	}
	// A heartbeat later, the honest checkpointer re-signs the same root.
	now = now.Add(2 * time.Hour)
	if err := honest.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	latest, err := db.LatestCheckpoint(ctx, "acme")
	if err != nil || latest.RootHash != cp.RootHash || latest.SignedAt == cp.SignedAt || latest.TreeSize != 10 {
		t.Fatalf("after the heartbeat: %+v, %v", latest, err)
	}
	list, err := db.CheckpointsSince(ctx, "acme", 0, 100)
	if err != nil || len(list) != 1 || list[0].Envelope == nil {
		t.Fatalf("checkpoints: %+v, %v", list, err)
	}
}

// TestLeavesBulkAndRowByRowAgree: a group of batches of 40 tenants (written with
// COPY) and the same batches applied one at a time (row by row) give the same usage
// and sizes; applying the group again changes nothing.
func TestLeavesBulkAndRowByRowAgree(t *testing.T) {
	ctx := context.Background()
	bulk, rows := open(t), open(t)
	var evs []projections.Event
	first := map[string]uint64{}
	at := time.Date(2026, 10, 31, 23, 0, 0, 0, time.UTC)
	for i := range 400 {
		tenant := fmt.Sprintf("t%02d", i%40)
		n := 1 + i%7
		evs = append(evs, projections.Event{Seq: uint64(i + 1), Tenant: tenant, Time: at.Add(time.Duration(i) * 20 * time.Second),
			Batch: &pipeline.Batch{First: first[tenant], Leaves: make([]pipeline.Leaf, n)}})
		first[tenant] += uint64(n)
	}
	if err := bulk.ApplyLeaves(ctx, evs); err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if err := rows.ApplyLeaves(ctx, []projections.Event{ev}); err != nil {
			t.Fatal(err)
		}
	}
	if err := bulk.ApplyLeaves(ctx, evs[100:]); err != nil {
		t.Fatal(err)
	}
	for _, tb := range []struct{ name, order string }{{"usage", "tenant_id, month"}, {"log_sizes", "tenant_id"}, {"projection_positions", "name"}} {
		a, b := dump(t, bulk, tb.name, tb.order), dump(t, rows, tb.name, tb.order)
		if strings.Join(a, "\n") != strings.Join(b, "\n") {
			t.Fatalf("%s differs:\nbulk:\n%s\nrow by row:\n%s", tb.name, strings.Join(a, "\n"), strings.Join(b, "\n"))
		}
	}
	if got := dump(t, bulk, "usage", "tenant_id, month"); len(got) != 80 { // 40 tenants, October and November
		t.Fatalf("%d usage rows, want 80", len(got))
	}
	if a, n, _ := bulk.Usage(ctx, "t07", "2026-11"); n != first["t07"] || a == 0 {
		t.Fatalf("t07: %d appends in November, %d leaves; want >0 and %d", a, n, first["t07"])
	}
}

// TestCheckpointRowsThinned: the rows follow projections.ThinCheckpoints, including
// rows another process wrote (a tenant that moved: its first checkpointer's
// directory is gone, its rows are not).
func TestCheckpointRowsThinned(t *testing.T) {
	db := open(t)
	ctx := context.Background()
	key, _ := signer.GenerateKey()
	tr, _ := merkle.NewTree(merkle.NewMemoryStore())
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	mk := func() *projections.Checkpointer {
		c := &projections.Checkpointer{Dir: t.TempDir(), Tenant: "acme", Tree: tr, Signer: receipt.KeySigner{Key: key}, DB: db, Heartbeat: time.Hour, Now: func() time.Time { return now }}
		if err := c.Load(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	var all []uint64
	c := mk()
	for i := range 150 {
		if i == 100 {
			c = mk() // the tenant moved to another process
		}
		if _, err := tr.Append(leaf(i).Hash); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Minute)
		if err := c.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		all = append(all, tr.Size())
	}
	drop := projections.ThinCheckpoints(all)
	want := slices.DeleteFunc(slices.Clone(all), func(n uint64) bool { return slices.Contains(drop, n) })
	rows, err := db.CheckpointsSince(ctx, "acme", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, cp := range rows {
		got = append(got, cp.TreeSize)
	}
	if !slices.Equal(got, want) || len(got) >= 100 {
		t.Fatalf("rows %v, want %v", got, want)
	}
}
