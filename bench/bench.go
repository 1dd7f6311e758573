// Package bench is the append load tool behind `svc bench append`: N concurrent
// clients over HTTP or NATS, progress while running, and a final table of appends/s,
// latency percentiles and errors, after checking that every returned proof verifies
// and every head returned is consistent with the last.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"svc.dev/svc/merkle"
	"svc.dev/svc/receipt"
	"svc.dev/svc/signer"
)

// Appender is one transport: HTTP or NATS.
type Appender interface {
	// Append sends one leaf and returns the log's proof.
	Append(ctx context.Context, leaf []byte, hashOnly bool) (*receipt.Proof, error)
	// Consistency proves the tree at newSize extends the one at oldSize.
	Consistency(ctx context.Context, oldSize, newSize uint64) ([]merkle.Hash, error)
	Name() string
}

// Config is one run.
type Config struct {
	Clients   int           // concurrent clients; 1 ≤ Clients ≤ 4096
	Duration  time.Duration // how long to send; the run also stops at Count
	Count     int           // appends in all; 0: no limit
	Rate      float64       // target appends/s over all clients; 0: as fast as they go
	LeafBytes int           // size of each leaf; 32 ≤ LeafBytes ≤ 60000
	HashOnly  bool
	Keys      []signer.PublicKey // heads must be signed by one of these
	Progress  io.Writer          // a line a second; nil: quiet
}

// Result is what a run measured.
type Result struct {
	Transport string
	Appends   int64
	Errors    int64 // failed appends, refusals for the rate limit not included
	// Refused counts appends the log refused for its rate limit (429): each client
	// waited the answer's Retry-After and sent again. Many of them mean the run
	// measured the limit, not the log.
	Refused int64
	Elapsed time.Duration
	Rate    float64 // appends/s
	P50     time.Duration
	P95     time.Duration
	P99     time.Duration
	Max     time.Duration
	// PacerP99 is how late the load generator itself sent (open loop only): latency
	// counts from the scheduled time, so this much of P99 may be the generator's.
	PacerP99    time.Duration
	Heads       int    // distinct heads seen
	ProofsOK    bool   // every proof verified against a head signed by a trusted key
	Consistent  bool   // every head is consistent with the last
	FirstError  string // the first error, if any
	FailedCheck string // what did not verify, if anything
}

type head struct {
	size uint64
	root merkle.Hash
}

// Run runs one load test against a.
func Run(ctx context.Context, a Appender, cfg Config) (*Result, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	runCtx := ctx
	var cancel context.CancelFunc = func() {}
	if cfg.Duration > 0 {
		runCtx, cancel = context.WithTimeout(ctx, cfg.Duration)
	}
	defer cancel()
	r := &run{a: a, cfg: cfg, lat: make([][]time.Duration, cfg.Clients), late: make([][]time.Duration, cfg.Clients), heads: map[string]head{}}
	if cfg.Rate > 0 {
		r.ticks = pace(runCtx, cfg.Rate, cfg.Clients*4)
	}
	r.start = time.Now()
	var wg sync.WaitGroup
	for c := 0; c < cfg.Clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			r.client(ctx, runCtx, c)
		}(c)
	}
	progressDone := make(chan struct{})
	if cfg.Progress != nil {
		go r.progress(progressDone)
	}
	wg.Wait()
	close(progressDone)
	res := r.result(time.Since(r.start))
	r.checkConsistency(ctx, res)
	return res, nil
}

func (cfg *Config) check() error {
	if cfg.Clients < 1 || cfg.Clients > 4096 {
		return fmt.Errorf("clients %d outside 1..4096", cfg.Clients)
	}
	if cfg.LeafBytes < 32 || cfg.LeafBytes > 60000 {
		return fmt.Errorf("leaf size %d outside 32..60000", cfg.LeafBytes)
	}
	if cfg.Duration <= 0 && cfg.Count <= 0 {
		return fmt.Errorf("give a duration or a count")
	}
	if len(cfg.Keys) == 0 {
		return fmt.Errorf("no trusted log key to check heads with")
	}
	return nil
}

// run is one load run.
type run struct {
	a     Appender
	cfg   Config
	start time.Time
	ticks <-chan time.Time // open loop: the scheduled send times; nil: closed loop

	sent, done, errs atomic.Int64
	refused          atomic.Int64
	firstErr         atomic.Value
	failed           atomic.Value
	lat, late        [][]time.Duration // per client: latencies; pacer lateness

	mu    sync.Mutex
	heads map[string]head // by envelope signature, to verify each head once
}

// pace schedules sends at rate per second until ctx ends (open loop): latency then
// counts from the scheduled time, so queueing behind a slow answer is not hidden.
func pace(ctx context.Context, rate float64, buffer int) <-chan time.Time {
	sched := make(chan time.Time, buffer)
	go func() {
		defer close(sched)
		start := time.Now()
		interval := time.Duration(float64(time.Second) / rate)
		for i := int64(0); ; i++ {
			at := start.Add(time.Duration(i) * interval)
			if d := time.Until(at); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
			select {
			case <-ctx.Done():
				return
			case sched <- at:
			}
		}
	}()
	return sched
}

// client is client c's loop: append, check the proof, record.
func (r *run) client(ctx, runCtx context.Context, c int) {
	rng := rand.New(rand.NewPCG(uint64(c), uint64(r.start.UnixNano())))
	leaf := make([]byte, r.cfg.LeafBytes)
	for {
		if r.cfg.Count > 0 && r.sent.Add(1) > int64(r.cfg.Count) {
			return
		}
		at := time.Now()
		if r.ticks != nil {
			t, ok := <-r.ticks
			if !ok {
				return
			}
			at = t
			r.late[c] = append(r.late[c], time.Since(t))
		} else if runCtx.Err() != nil {
			return
		}
		fillLeaf(leaf, rng)
		p, err := r.a.Append(ctx, leaf, r.cfg.HashOnly)
		for r.refusedWait(runCtx, err) { // the same append again, timed from its resend
			if runCtx.Err() != nil {
				return
			}
			at = time.Now()
			p, err = r.a.Append(ctx, leaf, r.cfg.HashOnly)
		}
		d := time.Since(at)
		if err == nil {
			if err = r.checkProof(leaf, p); err != nil {
				r.failed.CompareAndSwap(nil, err.Error())
			}
		}
		if err != nil {
			r.errs.Add(1)
			r.firstErr.CompareAndSwap(nil, err.Error())
			continue
		}
		r.done.Add(1)
		r.lat[c] = append(r.lat[c], d)
	}
}

// refusedWait reports whether err is the log's rate limit; then the refusal is
// counted and the client waits the answer's Retry-After (or until the run ends).
func (r *run) refusedWait(runCtx context.Context, err error) bool {
	var rl *RateLimited
	if !errors.As(err, &rl) {
		return false
	}
	r.refused.Add(1)
	t := time.NewTimer(rl.RetryAfter)
	defer t.Stop()
	select {
	case <-runCtx.Done():
	case <-t.C:
	}
	return true
}

// checkProof verifies the answer's head (once per head) and the leaf's inclusion.
func (r *run) checkProof(leaf []byte, p *receipt.Proof) error {
	sig := ""
	if len(p.TreeHead.Signatures) > 0 {
		sig = string(p.TreeHead.Signatures[0].Sig)
	}
	r.mu.Lock()
	h, ok := r.heads[sig]
	r.mu.Unlock()
	if !ok {
		if _, err := p.TreeHead.Verify(r.cfg.Keys); err != nil {
			return fmt.Errorf("head signature: %w", err)
		}
		th, err := receipt.DecodeTreeHead(p.TreeHead)
		if err != nil {
			return err
		}
		root, err := merkle.ParseHash(th.RootHash)
		if err != nil {
			return err
		}
		h = head{size: th.TreeSize, root: root}
		r.mu.Lock()
		r.heads[sig] = h
		r.mu.Unlock()
	}
	if h.size != p.Inclusion.TreeSize {
		return fmt.Errorf("head size %d, proof size %d", h.size, p.Inclusion.TreeSize)
	}
	hashes, err := receipt.ParseHashes(p.Inclusion.Hashes)
	if err != nil {
		return err
	}
	return merkle.VerifyInclusion(p.Inclusion.LeafIndex, p.Inclusion.TreeSize, merkle.LeafHash(leaf), hashes, h.root)
}

// progress prints a line a second until done is closed.
func (r *run) progress(done <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var last int64
	for {
		select {
		case <-done:
			return
		case <-t.C:
			n := r.done.Load()
			fmt.Fprintf(r.cfg.Progress, "  %4.0fs  %s  appends %9d  %7d/s  errors %d  refused (429) %d\n", time.Since(r.start).Seconds(), r.a.Name(), n, n-last, r.errs.Load(), r.refused.Load())
			last = n
		}
	}
}

// result sums the run up.
func (r *run) result(elapsed time.Duration) *Result {
	all := slices.Concat(r.lat...)
	slices.Sort(all)
	res := &Result{Transport: r.a.Name(), Appends: r.done.Load(), Errors: r.errs.Load(), Refused: r.refused.Load(), Elapsed: elapsed, Heads: len(r.heads)}
	res.Rate = float64(res.Appends) / elapsed.Seconds()
	if n := len(all); n > 0 {
		res.P50, res.P95, res.P99, res.Max = all[n*50/100], all[n*95/100], all[min(n*99/100, n-1)], all[n-1]
	}
	if l := slices.Concat(r.late...); len(l) > 0 {
		slices.Sort(l)
		res.PacerP99 = l[min(len(l)*99/100, len(l)-1)]
	}
	if v := r.firstErr.Load(); v != nil {
		res.FirstError = v.(string)
	}
	res.ProofsOK = r.failed.Load() == nil
	if v := r.failed.Load(); v != nil {
		res.FailedCheck = v.(string)
	}
	return res
}

// checkConsistency requires every head handed out to be consistent with the last
// (largest) one.
func (r *run) checkConsistency(ctx context.Context, res *Result) {
	hs := make([]head, 0, len(r.heads))
	for _, h := range r.heads {
		hs = append(hs, h)
	}
	slices.SortFunc(hs, func(a, b head) int { return int(int64(a.size) - int64(b.size)) })
	res.Consistent = true
	if len(hs) < 2 {
		return
	}
	last := hs[len(hs)-1]
	for _, h := range hs[:len(hs)-1] {
		proof, err := r.a.Consistency(ctx, h.size, last.size)
		if err == nil {
			err = merkle.VerifyConsistency(h.size, last.size, h.root, last.root, proof)
		}
		if err != nil {
			res.Consistent = false
			res.FailedCheck = fmt.Sprintf("head at size %d is not consistent with the head at %d: %v", h.size, last.size, err)
			return
		}
	}
}

// fillLeaf writes a unique JSON-string-safe leaf.
func fillLeaf(b []byte, rng *rand.Rand) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	for i := range b {
		b[i] = alphabet[rng.IntN(len(alphabet))]
	}
}

// WriteTable prints results as a table.
func WriteTable(w io.Writer, rs []*Result) {
	fmt.Fprintf(w, "\n%-6s %10s %10s %9s %9s %9s %9s %10s %7s %8s %6s %7s %10s\n", "via", "appends", "appends/s", "p50", "p95", "p99", "max", "pacer p99", "errors", "refused", "heads", "proofs", "consistent")
	for _, r := range rs {
		fmt.Fprintf(w, "%-6s %10d %10.0f %9s %9s %9s %9s %10s %7d %8d %6d %7s %10s\n", r.Transport, r.Appends, r.Rate,
			r.P50.Round(10*time.Microsecond), r.P95.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond), r.Max.Round(10*time.Microsecond),
			r.PacerP99.Round(10*time.Microsecond), r.Errors, r.Refused, r.Heads, okWord(r.ProofsOK), okWord(r.Consistent))
	}
	for _, r := range rs {
		if r.Refused > 0 {
			fmt.Fprintf(w, "%s: WARNING: %d of %d requests were refused by the log's per-token rate limit (429; each client waited the Retry-After): "+
				"this run measured the limit, not the log. Spread the load over more tokens, or load a log without the limit (--embedded).\n",
				r.Transport, r.Refused, r.Refused+r.Appends+r.Errors)
		}
		if r.FirstError != "" {
			fmt.Fprintf(w, "%s: first error: %s\n", r.Transport, r.FirstError)
		}
		if r.FailedCheck != "" {
			fmt.Fprintf(w, "%s: check failed: %s\n", r.Transport, r.FailedCheck)
		}
	}
}

func okWord(ok bool) string {
	if ok {
		return "ok"
	}
	return "FAILED"
}
