package logservice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/natsembed"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/receipt"
)

// TestLostLeaseStepsDown: when another holder takes a tenant's lease, the process
// stops only that tenant's sequencer and serves it read-only as a standby; its other
// tenants go on appending and the process does not stop. When the lease is free again
// the standby takes the tenant back and its indices continue.
func TestLostLeaseStepsDown(t *testing.T) {
	srv, dbURL, key := hostedParts(t)
	a, url := frontEnd(t, natsembed.URL(srv, "pw-of-tests"), dbURL, key)
	tokA, tokB := addTenant(t, a, "acme"), addTenant(t, a, "beta")
	for i := range 3 {
		for _, tt := range []struct{ tenant, tok string }{{"acme", tokA}, {"beta", tokB}} {
			if s, body := appendTo(t, url, tt.tenant, tt.tok, fmt.Sprintf("before %d", i)); s != 200 {
				t.Fatalf("%s append: %d %s", tt.tenant, s, body)
			}
		}
	}
	nc, err := nats.Connect(natsembed.URL(srv, "pw-of-tests"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, LeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	// Another holder takes acme's lease (and keeps it while the test looks).
	stolen := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(stolen)
		for {
			e, err := kv.Get(ctx, "acme")
			if err == nil && string(e.Value()) == "thief" {
				return
			}
			if err == nil {
				_, _ = kv.Update(ctx, "acme", []byte("thief"), e.Revision())
			} else {
				_, _ = kv.Create(ctx, "acme", []byte("thief"))
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	keep := make(chan struct{})
	go func() { // renew the thief's lease until told to let go
		<-stolen
		for {
			select {
			case <-keep:
				return
			case <-time.After(500 * time.Millisecond):
				if e, err := kv.Get(ctx, "acme"); err == nil && string(e.Value()) == "thief" {
					_, _ = kv.Update(ctx, "acme", []byte("thief"), e.Revision())
				}
			}
		}
	}()
	defer close(stop)
	testkit.Eventually(t, 10*time.Second, func() error {
		if a.isHeld("acme") {
			return errors.New("the process still runs acme's sequencer")
		}
		return nil
	})
	if !a.isHeld("beta") {
		t.Fatal("losing acme's lease also stopped beta's sequencer")
	}
	for i := range 3 {
		if s, body := appendTo(t, url, "beta", tokB, fmt.Sprintf("during %d", i)); s != 200 {
			t.Fatalf("beta append while acme's lease is held elsewhere: %d %s", s, body)
		}
	}
	select {
	case err := <-a.Err():
		t.Fatalf("the process stopped: %v", err)
	default:
	}
	// The thief lets go: the lease runs out and this process takes acme back.
	close(keep)
	takenBack(t, a, url, tokA, 3)
	select {
	case err := <-a.Err():
		t.Fatalf("the process stopped: %v", err)
	default:
	}
}

// TestLostTenantReportedOnce: a sequencer fenced out and its lease lost both report
// one loss (loseTenant from two goroutines); the process steps down once, says so
// once, and takes the tenant back when the lease is free.
func TestLostTenantReportedOnce(t *testing.T) {
	srv, dbURL, key := hostedParts(t)
	var lost atomic.Int32
	logger := slog.New(countingHandler{match: "lost a tenant's sequencer", n: &lost})
	a, url := frontEndLogged(t, t.TempDir(), natsembed.URL(srv, "pw-of-tests"), dbURL, key, logger)
	tok := addTenant(t, a, "acme")
	if s, body := appendTo(t, url, "acme", tok, "before"); s != 200 {
		t.Fatalf("append: %d %s", s, body)
	}
	var wg sync.WaitGroup
	for _, cause := range []error{errLeaseLost, errors.New("sequencer fenced")} {
		wg.Add(1)
		go func() { defer wg.Done(); a.loseTenant("acme", cause) }()
	}
	wg.Wait()
	if n := lost.Load(); n != 1 {
		t.Fatalf("one loss reported %d times, want once", n)
	}
	takenBack(t, a, url, tok, 1)
}

// takenBack waits until a runs acme's sequencer again and checks that acme's next
// append gets index next: the indices go on where they stopped.
func takenBack(t *testing.T, a *Service, url, tok string, next uint64) {
	t.Helper()
	testkit.Eventually(t, 15*time.Second, func() error {
		if !a.isHeld("acme") {
			return errors.New("acme not taken back")
		}
		return nil
	})
	s, body := appendTo(t, url, "acme", tok, "after")
	var p receipt.Proof
	if s != 200 || json.Unmarshal(body, &p) != nil || p.Inclusion.LeafIndex != next {
		t.Fatalf("acme after taking it back: %d %s, want index %d", s, body, next)
	}
}

// countingHandler counts the log records whose message contains match.
type countingHandler struct {
	match string
	n     *atomic.Int32
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		h.n.Add(1)
	}
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

// TestSlowHandOverLeavesItsOwnLease: while a process hands a tenant over, its own
// standby for the tenant (started first, to serve reads) does not take the lease the
// holding still holds and renews, however long the hand-over takes (tryLease takes
// back a lease that names this process): it tries once the holding released it, at
// once. Taking it kept the lease from every other process's standby (the release
// of a revision no longer the last failed). Then a hand-over slowed past several
// of the standby's attempts (a checkpointer slow to stop) ends with the tenant
// taken back here, no lease lost, and its indices going on.
func TestSlowHandOverLeavesItsOwnLease(t *testing.T) {
	srv, dbURL, key := hostedParts(t)
	var lost atomic.Int32
	logger := slog.New(countingHandler{match: "lost a tenant's sequencer", n: &lost})
	a, url := frontEndLogged(t, t.TempDir(), natsembed.URL(srv, "pw-of-tests"), dbURL, key, logger)
	st, ctx := a.hosted, context.Background()

	// The mechanism: a lease naming this process, its holding not yet done.
	if _, err := st.kv.Put(ctx, "ghost", []byte(st.id)); err != nil {
		t.Fatal(err)
	}
	own := make(chan struct{})
	wctx, cancel := context.WithTimeout(ctx, 4*st.cfg.LeaseTTL/4) // four attempts' worth
	err := st.awaitLease(wctx, "ghost", own)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("awaitLease with the holding's lease still held: %v, want to wait", err)
	}
	go func() { st.release("ghost", 0); close(own) }()
	wctx, cancel = context.WithTimeout(ctx, st.cfg.LeaseTTL/4) // sooner than a periodic attempt
	err = st.awaitLease(wctx, "ghost", own)
	cancel()
	if err != nil {
		t.Fatalf("awaitLease once the holding released the lease: %v, want it taken at once", err)
	}

	// End to end: a hand-over slowed past the standby's attempts.
	tok := addTenant(t, a, "acme")
	if s, body := appendTo(t, url, "acme", tok, "before"); s != 200 {
		t.Fatalf("append: %d %s", s, body)
	}
	st.mu.Lock()
	h := st.held["acme"]
	st.mu.Unlock()
	h.work.Add(1) // a checkpointer slow to stop
	go func() { time.Sleep(st.cfg.LeaseTTL); h.work.Done() }()
	if err := a.stepDown(ctx, "acme", "test"); err != nil {
		t.Fatal(err)
	}
	takenBack(t, a, url, tok, 1)
	if n := lost.Load(); n != 0 {
		t.Fatalf("the slow hand-over lost the lease %d times", n)
	}
}

// TestStopReleasesTheLeaseLast: when the whole process stops, a tenant's lease is
// released only once its sequencer and checkpointer stopped and the process's lanes
// are gone, so a standby the release wakes finds no commit of this process still on
// its way and no request of the tenant pending in its lane. A holding whose work is
// slow to stop keeps its lease until it has (the release went first).
func TestStopReleasesTheLeaseLast(t *testing.T) {
	srv, dbURL, key := hostedParts(t)
	a, url := frontEnd(t, natsembed.URL(srv, "pw-of-tests"), dbURL, key)
	tok := addTenant(t, a, "acme")
	if s, body := appendTo(t, url, "acme", tok, "before the stop"); s != 200 {
		t.Fatalf("append: %d %s", s, body)
	}
	st, ctx := a.hosted, context.Background()
	st.mu.Lock()
	h := st.held["acme"]
	st.mu.Unlock()
	if h == nil {
		t.Fatal("the process does not hold acme")
	}
	h.work.Add(1) // a sequencer slow to stop
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	nc, err := nats.Connect(natsembed.URL(srv, "pw-of-tests"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(ctx, LeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if e, err := kv.Get(ctx, "acme"); err != nil || string(e.Value()) != st.id {
		t.Fatalf("acme's lease a second into the stop, its sequencer still running: %v %v; want still the stopping process's", e, err)
	}
	h.work.Done()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return once the sequencer stopped")
	}
	if _, err := kv.Get(ctx, "acme"); !errors.Is(err, jetstream.ErrKeyDeleted) && !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("acme's lease after the stop: %v, want released", err)
	}
	stream, err := js.Stream(ctx, "SVC_APPEND")
	if err != nil {
		t.Fatal(err)
	}
	for name := range stream.ConsumerNames(ctx).Name() {
		t.Errorf("consumer %s of SVC_APPEND left after the stop", name)
	}
}
