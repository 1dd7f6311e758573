package store

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"svc.dev/svc/internal/pgtest"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/pipeline/consume"
)

// running is one Run of the projections, stopped with the test or by stop.
type running struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func runStore(t *testing.T, s *Store, e env) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.Run(ctx, e.js) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *running) stop(t *testing.T) {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("projections: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("projections did not stop within 20s")
		}
	})
}

// caughtUp waits until both projections of s reached what the streams hold.
func caughtUp(t *testing.T, s *Store, e env, within time.Duration) {
	t.Helper()
	adminLast, _ := lastSeq(t, e.js, pipeline.AdminStream)
	leavesLast, _ := lastSeq(t, e.js, pipeline.LeavesStream)
	testkit.Eventually(t, within, func() error {
		a, err1 := s.Position(context.Background(), "admin")
		l, err2 := s.Position(context.Background(), "leaves")
		if a != adminLast || l != leavesLast {
			return fmt.Errorf("projections at admin %d/%d, leaves %d/%d (%v %v; %+v)", a, adminLast, l, leavesLast, err1, err2, s.Stats())
		}
		return nil
	})
}

func count(t *testing.T, s *Store, query string) int64 {
	t.Helper()
	var n int64
	if err := s.Pool.QueryRow(context.Background(), query).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func appendN(t *testing.T, e env, tenant string, from, n int) {
	t.Helper()
	cl, _ := pipeline.NewClient(e.nc, pipeline.ClientConfig{Retries: -1})
	defer cl.Close()
	for i := from; i < from+n; i++ {
		if _, err := cl.Do(context.Background(), tenant, leaf(i)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestProjectionsPauseThroughADatabaseOutage: PostgreSQL is cut off behind a proxy;
// appends and administrative events go on, the projections wait (retrying) and then
// catch up, with every usage row and audit row there exactly once.
func TestProjectionsPauseThroughADatabaseOutage(t *testing.T) {
	e := startBroker(t)
	dbURL := pgtest.New(t)
	u, _ := url.Parse(dbURL)
	proxy := testkit.StartProxy(t, u.Host)
	u.Host = proxy.Addr()
	ctx := context.Background()
	s, err := Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Router = RouterConfig{MinBackoff: 10 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Timeout: 2 * time.Second}
	runStore(t, s, e)
	if _, err := e.admin.AddTenant(ctx, "op", "acme", "log.example/acme"); err != nil {
		t.Fatal(err)
	}
	runSequencer(t, e, "acme")
	appendN(t, e, "acme", 0, 50)
	caughtUp(t, s, e, 10*time.Second)

	proxy.SetCut(true)
	appendN(t, e, "acme", 50, 150) // appends do not need the database
	if _, _, err := e.admin.AddToken(ctx, "op", "acme", "during-outage"); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if st := s.Stats()[HandlerLeaves]; st.Failed == 0 || st.LastError == "" {
			return fmt.Errorf("no failed attempt seen during the outage: %+v", st)
		}
		return nil
	})
	if pos, err := s.Position(ctx, "leaves"); err == nil {
		t.Fatalf("the database answered through a cut proxy (leaves at %d)", pos)
	}
	proxy.SetCut(false)
	caughtUp(t, s, e, 20*time.Second)

	month := time.Now().UTC().Format("2006-01")
	if a, n, err := s.Usage(ctx, "acme", month); err != nil || a != 200 || n != 200 {
		t.Fatalf("acme usage after the outage: %d appends, %d leaves, %v; want 200, 200", a, n, err)
	}
	adminLast, _ := lastSeq(t, e.js, pipeline.AdminStream)
	if n := count(t, s, "SELECT count(*) FROM audit"); n != int64(adminLast) {
		t.Fatalf("audit holds %d rows, want %d (one per administrative event)", n, adminLast)
	}
	if n := count(t, s, "SELECT count(*) FROM tokens WHERE label = 'during-outage'"); n != 1 {
		t.Fatalf("token added during the outage: %d rows, want 1", n)
	}
}

// TestPoisonGoesToTheDeadLetterStream: a message on SVC_ADMIN and one on SVC_LEAVES
// (on a tenant without a sequencer, which would be fenced out) that cannot be decoded land in SVC_DEAD with the handler, the error and the
// attempts; the events after them still apply, and a restart does not see them again.
func TestPoisonGoesToTheDeadLetterStream(t *testing.T) {
	e := startBroker(t)
	s := open(t)
	ctx := context.Background()
	if _, err := e.admin.AddTenant(ctx, "op", "acme", "log.example/acme"); err != nil {
		t.Fatal(err)
	}
	runSequencer(t, e, "acme")
	appendN(t, e, "acme", 0, 10)
	badAdmin, err := e.js.Publish(ctx, pipeline.AdminSubject("acme"), []byte("{not json"))
	if err != nil {
		t.Fatal(err)
	}
	badLeaves, err := e.js.Publish(ctx, pipeline.LeavesSubject("ghost"), []byte("not a batch"))
	if err != nil {
		t.Fatal(err)
	}
	r := runStore(t, s, e)
	if _, err := e.admin.AddTenant(ctx, "op", "globex", "log.example/globex"); err != nil {
		t.Fatal(err)
	}
	appendN(t, e, "acme", 10, 20)
	caughtUp(t, s, e, 10*time.Second)

	letters, err := consume.ListDead(ctx, e.js, "")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{HandlerAdmin: badAdmin.Sequence, HandlerLeaves: badLeaves.Sequence}
	if len(letters) != 2 {
		t.Fatalf("SVC_DEAD holds %d letters, want 2: %+v", len(letters), letters)
	}
	for _, l := range letters {
		if l.SourceSeq != strconv.FormatUint(want[l.Handler], 10) || l.Error == "" || l.Attempts < 1 {
			t.Fatalf("dead letter %+v: want handler %s at source seq %d with an error and attempts", l, l.Handler, want[l.Handler])
		}
	}
	st, err := s.Status(ctx, e.js)
	leavesLast, _ := lastSeq(t, e.js, pipeline.LeavesStream)
	if err != nil || len(st) != 2 || st[0].DeadLetters != 1 || st[1].DeadLetters != 1 || st[1].Position != leavesLast || st[1].Backlog != 0 {
		t.Fatalf("status %+v (%v): want one dead letter each, leaves at %d with no backlog", st, err, leavesLast)
	}
	month := time.Now().UTC().Format("2006-01")
	if a, _, err := s.Usage(ctx, "acme", month); err != nil || a != 30 {
		t.Fatalf("acme usage: %d appends (%v), want 30", a, err)
	}
	if n := count(t, s, "SELECT count(*) FROM tenants"); n != 2 {
		t.Fatalf("tenants: %d, want 2 (the one after the poison applied)", n)
	}
	// Restart: positions continue past the poison; nothing is dead-lettered again.
	r.stop(t)
	appendN(t, e, "acme", 30, 5)
	runStore(t, s, e)
	caughtUp(t, s, e, 10*time.Second)
	if letters, _ := consume.ListDead(ctx, e.js, ""); len(letters) != 2 {
		t.Fatalf("after a restart SVC_DEAD holds %d letters, want still 2", len(letters))
	}
	if a, _, _ := s.Usage(ctx, "acme", month); a != 35 {
		t.Fatalf("acme usage after the restart: %d, want 35", a)
	}
}

// TestProjectionsContinueAcrossARestart: the router closed, events appended while no
// projection runs, a new store and router on the same database continue from the
// saved positions: nothing lost, nothing counted twice.
func TestProjectionsContinueAcrossARestart(t *testing.T) {
	e := startBroker(t)
	dbURL := pgtest.New(t)
	ctx := context.Background()
	first, err := Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	r := runStore(t, first, e)
	if _, err := e.admin.AddTenant(ctx, "op", "acme", "log.example/acme"); err != nil {
		t.Fatal(err)
	}
	runSequencer(t, e, "acme")
	appendN(t, e, "acme", 0, 40)
	caughtUp(t, first, e, 10*time.Second)
	r.stop(t)
	first.Close()

	appendN(t, e, "acme", 40, 60)
	if _, err := e.admin.SetPlan(ctx, "op", "acme", "team"); err != nil {
		t.Fatal(err)
	}
	second, err := Open(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	runStore(t, second, e)
	caughtUp(t, second, e, 10*time.Second)
	month := time.Now().UTC().Format("2006-01")
	if a, n, err := second.Usage(ctx, "acme", month); err != nil || a != 100 || n != 100 {
		t.Fatalf("acme usage across the restart: %d appends, %d leaves, %v; want 100, 100", a, n, err)
	}
	adminLast, _ := lastSeq(t, e.js, pipeline.AdminStream)
	if n := count(t, second, "SELECT count(*) FROM audit"); n != int64(adminLast) {
		t.Fatalf("audit holds %d rows, want %d", n, adminLast)
	}
	if st := second.Stats()[HandlerLeaves]; st.Messages == 0 || st.Messages > 60 {
		t.Fatalf("the second router applied %d leaves messages, want 1..60 (only what came after the restart)", st.Messages)
	}
}

// TestDeadReplayOfAProjectionLetter: a letter that still cannot be decoded stays in
// SVC_DEAD; one that can (the decoder was fixed) is applied below the saved position,
// once even when handed twice, and leaves SVC_DEAD.
func TestDeadReplayOfAProjectionLetter(t *testing.T) {
	e := startBroker(t)
	s := open(t)
	ctx := context.Background()
	if err := consume.EnsureDeadStream(ctx, e.js, 1); err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC()
	good := (&pipeline.Batch{First: 7, Leaves: make([]pipeline.Leaf, 3)}).Encode()
	for _, p := range []struct {
		seq     string
		payload []byte
	}{{"5", []byte("still not a batch")}, {"9", good}} {
		l := consume.DeadLetter{Handler: HandlerLeaves, Tenant: "acme", Error: "x", Attempts: 1, SourceSeq: p.seq, At: at}
		if err := consume.PublishDead(ctx, e.js, l, p.payload); err != nil {
			t.Fatal(err)
		}
	}
	n, err := consume.ReplayDead(ctx, e.js, nil, nil, s.DeadHandlers()...)
	if n != 1 || err == nil || !strings.Contains(err.Error(), ErrPoison.Error()) {
		t.Fatalf("replay delivered %d (%v), want 1 and the undecodable letter's error", n, err)
	}
	letters, _ := consume.ListDead(ctx, e.js, "")
	if len(letters) != 1 || letters[0].SourceSeq != "5" {
		t.Fatalf("SVC_DEAD after replay: %+v, want only the letter of source seq 5", letters)
	}
	// Handed twice (its removal from SVC_DEAD failed): applied once.
	l := consume.DeadLetter{Handler: HandlerLeaves, Tenant: "acme", SourceSeq: "9", At: at}
	if err := s.DeadHandlers()[1].ReplayLetter(ctx, l, good); err != nil {
		t.Fatal(err)
	}
	if a, size, err := s.Usage(ctx, "acme", at.Format("2006-01")); err != nil || a != 3 || size != 10 {
		t.Fatalf("acme usage after the replayed letter: %d appends, size %d (%v); want 3, 10", a, size, err)
	}
}
