package logservice

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"svc.dev/svc/internal/projections"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// TestCheckpointRunsOneGoroutine: a hundred tenants' checkpointers run by the
// process's one loop, not a goroutine each, and each publishes its first checkpoint
// within about First of its first leaf; a tenant stopped has its done called once,
// and no tick of it runs after.
func TestCheckpointRunsOneGoroutine(t *testing.T) {
	key, _ := signer.GenerateKey()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := newCheckpointRuns()
	loopDone := make(chan struct{})
	go func() { defer close(loopDone); _ = c.run(ctx) }()
	defer func() { cancel(); <-loopDone }()
	before := runtime.NumGoroutine()
	const n = 100
	cps := make([]*projections.Checkpointer, n)
	trees := make([]*merkle.Tree, n)
	stops := make([]context.CancelFunc, n)
	var done atomic.Int64
	for i := range n {
		trees[i], _ = merkle.NewTree(merkle.NewMemoryStore())
		cps[i] = &projections.Checkpointer{Dir: t.TempDir(), Tenant: fmt.Sprint("t", i), Tree: trees[i], Signer: receipt.KeySigner{Key: key},
			Every: time.Hour, First: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
		if err := cps[i].Load(); err != nil {
			t.Fatal(err)
		}
		var wctx context.Context
		wctx, stops[i] = context.WithCancel(ctx)
		c.add(wctx, cps[i], func() { done.Add(1) })
	}
	time.Sleep(100 * time.Millisecond) // the first ticks find empty trees
	for i := range n {
		if _, err := trees[i].Append(merkle.LeafHash([]byte("leaf"))); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		for i, cp := range cps {
			if len(cp.Since(0)) != 1 {
				return fmt.Errorf("tenant %d: %d checkpoints, want 1", i, len(cp.Since(0)))
			}
		}
		return nil
	})
	// AfterFunc registrations are not goroutines; the ticks' are short-lived.
	if g := runtime.NumGoroutine(); g > before+checkpointTicksAtOnce {
		t.Fatalf("%d goroutines with %d checkpointers, %d before", g, n, before)
	}
	for _, stop := range stops {
		stop()
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		if d := done.Load(); d != n {
			return fmt.Errorf("%d of %d stopped", d, n)
		}
		return nil
	})
	c.sched.mu.Lock()
	left := len(c.sched.items)
	c.sched.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d runs left after every tenant stopped", left)
	}
	for i := range n { // a leaf after the stop: no tick signs it
		if _, err := trees[i].Append(merkle.LeafHash([]byte("late"))); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	for i, cp := range cps {
		if got := len(cp.Since(0)); got != 1 || done.Load() != n {
			t.Fatalf("tenant %d: %d checkpoints after its stop, want 1; done called %d times", i, got, done.Load())
		}
	}
}

// stuckSigner signs nothing until release is closed (a signer or database slow to
// answer, its own timeout not yet reached), whatever the context.
type stuckSigner struct {
	receipt.KeySigner
	release chan struct{}
}

func (s stuckSigner) SignEnvelope(ctx context.Context, payloadType string, payload []byte) (*receipt.Envelope, error) {
	<-s.release
	return s.KeySigner.SignEnvelope(ctx, payloadType, payload)
}

// TestCheckpointStopWaitsForNoOtherTenant: a tenant stopped while its tick waits for
// a slot of the pool (every slot taken by other tenants' ticks, stuck on the signer)
// leaves the schedule at once: its stop (which holds the tenant's lock) does not
// wait for other tenants' signatures.
func TestCheckpointStopWaitsForNoOtherTenant(t *testing.T) {
	key, _ := signer.GenerateKey()
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	c := newCheckpointRuns()
	loopDone := make(chan struct{})
	go func() { defer close(loopDone); _ = c.run(ctx) }()
	defer func() { close(release); cancel(); <-loopDone }()
	add := func(name string, sg receipt.EnvelopeSigner, done func()) context.CancelFunc {
		tree, _ := merkle.NewTree(merkle.NewMemoryStore())
		if _, err := tree.Append(merkle.LeafHash([]byte("leaf"))); err != nil {
			t.Fatal(err)
		}
		cp := &projections.Checkpointer{Dir: t.TempDir(), Tenant: name, Tree: tree, Signer: sg,
			Every: time.Hour, First: time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
		if err := cp.Load(); err != nil {
			t.Fatal(err)
		}
		wctx, stop := context.WithCancel(ctx)
		c.add(wctx, cp, done)
		return stop
	}
	for i := range checkpointTicksAtOnce {
		add(fmt.Sprint("stuck", i), stuckSigner{receipt.KeySigner{Key: key}, release}, func() {})
	}
	testkit.Eventually(t, 5*time.Second, func() error {
		if n := len(c.pool); n != checkpointTicksAtOnce {
			return fmt.Errorf("%d ticks in flight", n)
		}
		return nil
	})
	done := make(chan struct{})
	stop := add("x", receipt.KeySigner{Key: key}, func() { close(done) })
	time.Sleep(100 * time.Millisecond) // x is due, its tick waiting for a slot
	stop()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("the stopped tenant's run did not end while other tenants' ticks held every slot")
	}
}
