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
