package tenancy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"svc.dev/svc/internal/sequencer"
	"svc.dev/svc/internal/testkit"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

func hashLeaf(i int) pipeline.Leaf { return testkit.HashLeaf(i) }

// TestQuotaEdge: on the free plan the 10,000th append of the month passes and the
// 10,001st gets ErrQuota with a Retry-After reaching the start of next month, computed
// from the injected clock; the count is exact when the last allowed and the first
// refused appends share a batch, and survives a restart of the admitter.
func TestQuotaEdge(t *testing.T) {
	connect := broker(t)
	admin, view := process(t, connect)
	nc, js := connect()
	ctx := context.Background()
	if _, err := admin.AddTenant(ctx, "test", "acme", ""); err != nil {
		t.Fatal(err)
	}
	// The injected clock is 60.5 s before the next month begins. The broker stamps
	// each batch with the real time, which the month's count reads, so the clock
	// follows the real month: a fixed date turns the test false once it has passed.
	real := time.Now().UTC()
	nextMonth := time.Date(real.Year(), real.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	now := nextMonth.Add(-60500 * time.Millisecond)
	quota := &Quota{View: view, JS: js, Now: func() time.Time { return now }}
	key, err := signer.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	seq, err := sequencer.New(sequencer.Config{Tenant: "acme", Conn: nc, Dir: t.TempDir(), Signer: receipt.KeySigner{Key: key}, Admit: quota})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- seq.Run(sctx) }()
	t.Cleanup(func() { cancel(); <-done; seq.Close() })
	<-seq.Ready()
	cl, err := pipeline.NewClient(nc, pipeline.ClientConfig{Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// 9,998 appends from 32 concurrent producers (so batches form).
	testkit.AppendHashes(t, cl, "acme", 1, 9998)
	// An admitter that counted the month now (another process's, the tenant's
	// sequencer then moving away and back): its count goes stale.
	early := &Quota{View: view, JS: js, Now: func() time.Time { return now }}
	if n, err := early.AdmitUpTo(ctx, "acme", 0); n != 0 || err != nil {
		t.Fatalf("early count: %d %v", n, err)
	}
	var wg sync.WaitGroup
	// Three at once: the 9,999th and 10,000th pass, one is refused.
	var passed, refused atomic.Int32
	var refusal atomic.Pointer[pipeline.Refusal]
	for i := 9999; i <= 10001; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := cl.Do(ctx, "acme", hashLeaf(i))
			var ref *pipeline.Refusal
			switch {
			case err == nil:
				passed.Add(1)
			case errors.As(err, &ref) && errors.Is(err, pipeline.ErrQuota):
				refused.Add(1)
				refusal.Store(ref)
			default:
				t.Errorf("append %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if passed.Load() != 2 || refused.Load() != 1 {
		t.Fatalf("of the appends 9,999 to 10,001, %d passed and %d were refused; want 2 and 1", passed.Load(), refused.Load())
	}
	if seq.Tree().Size() != 10000 {
		t.Fatalf("log holds %d leaves, want 10000", seq.Tree().Size())
	}
	ref := refusal.Load()
	if ref.RetryAfter != 61 { // 60.5 s to the next month's start, rounded up
		t.Fatalf("Retry-After %d, want 61", ref.RetryAfter)
	}
	if want := "monthly quota reached: "; len(ref.Message) < len(want) || ref.Message[:len(want)] != want {
		t.Fatalf("message %q does not start with %q", ref.Message, want)
	}
	// An admitter that starts afresh (a restarted process) counts the month from the
	// log of record and refuses too.
	fresh := &Quota{View: view, JS: js, Now: func() time.Time { return now }}
	if n, err := fresh.AdmitUpTo(ctx, "acme", 1); n != 0 || !errors.Is(err, pipeline.ErrQuota) {
		t.Fatalf("restarted admitter: admitted %d, %v", n, err)
	}
	if _, m := fresh.Used("acme"); m != 10000 {
		t.Fatalf("restarted admitter counted %d appends this month, want 10000", m)
	}
	// A sequencer's recovery seeds the admitter with the last batch it read: the stale
	// count is dropped and the month counted from that batch.
	stream, err := js.Stream(ctx, pipeline.LeavesStream)
	if err != nil {
		t.Fatal(err)
	}
	last, err := stream.GetLastMsgForSubject(ctx, pipeline.LeavesSubject("acme"))
	if err != nil {
		t.Fatal(err)
	}
	early.Seed("acme", last)
	if n, err := early.AdmitUpTo(ctx, "acme", 1); n != 0 || !errors.Is(err, pipeline.ErrQuota) {
		t.Fatalf("seeded admitter: admitted %d, %v", n, err)
	}
	if _, m := early.Used("acme"); m != 10000 {
		t.Fatalf("seeded admitter counted %d appends this month, want 10000", m)
	}
	// The next month (by the injected clock) starts a new count on the same free plan.
	nextQuota := &Quota{View: view, JS: js, Now: func() time.Time { return nextMonth.Add(time.Second) }}
	if n, err := nextQuota.AdmitUpTo(ctx, "acme", 5); n != 5 || err != nil {
		t.Fatalf("first appends of the next month: admitted %d, %v", n, err)
	}
	if m, used := nextQuota.Used("acme"); m != nextMonth.Format("2006-01") || used != 5 {
		t.Fatalf("the next month's count: %s %d", m, used)
	}
	// The team plan has room.
	if _, err := admin.SetPlan(ctx, "test", "acme", PlanTeam); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Do(ctx, "acme", hashLeaf(20000)); err != nil {
		t.Fatalf("on the team plan: %v", err)
	}
	if _, err := admin.DisableTenant(ctx, "test", "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Do(ctx, "acme", hashLeaf(20001)); !errors.Is(err, pipeline.ErrDisabled) {
		t.Fatalf("disabled tenant: got %v, want ErrDisabled", err)
	}
	// A leaf already in the log is still answered (not a new append).
	if _, err := cl.Do(ctx, "acme", hashLeaf(20000)); err != nil {
		t.Fatalf("retry of a committed leaf of a disabled tenant: %v", err)
	}
}
