// Package bench is the append load tool behind `svc bench append`: N concurrent
// clients over HTTP or NATS, progress while running, and a final table of appends/s,
// latency percentiles and errors, after checking that every returned proof verifies
// and every head returned is consistent with the last.
package bench

import (
	"context"
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
	Errors    int64
	Elapsed   time.Duration
	Rate      float64 // appends/s
	P50       time.Duration
	P95       time.Duration
	P99       time.Duration
	Max       time.Duration
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
	if cfg.Clients < 1 || cfg.Clients > 4096 {
		return nil, fmt.Errorf("clients %d outside 1..4096", cfg.Clients)
	}
	if cfg.LeafBytes < 32 || cfg.LeafBytes > 60000 {
		return nil, fmt.Errorf("leaf size %d outside 32..60000", cfg.LeafBytes)
	}
	if cfg.Duration <= 0 && cfg.Count <= 0 {
		return nil, fmt.Errorf("give a duration or a count")
	}
	if len(cfg.Keys) == 0 {
		return nil, fmt.Errorf("no trusted log key to check heads with")
	}
	runCtx := ctx
	var cancel context.CancelFunc = func() {}
	if cfg.Duration > 0 {
		runCtx, cancel = context.WithTimeout(ctx, cfg.Duration)
	}
	defer cancel()

	var (
		sent, done, errs atomic.Int64
		firstErr         atomic.Value
		failed           atomic.Value
		mu               sync.Mutex
		lat              = make([][]time.Duration, cfg.Clients)
		late             = make([][]time.Duration, cfg.Clients)
		heads            = map[string]head{} // by envelope signature, to verify each head once
	)
	var ticks <-chan time.Time
	if cfg.Rate > 0 {
		// Open loop: sends are scheduled at the target rate; latency counts from the
		// scheduled time, so queueing behind a slow answer is not hidden.
		sched := make(chan time.Time, cfg.Clients*4)
		ticks = sched
		go func() {
			defer close(sched)
			start := time.Now()
			interval := time.Duration(float64(time.Second) / cfg.Rate)
			for i := int64(0); ; i++ {
				at := start.Add(time.Duration(i) * interval)
				if d := time.Until(at); d > 0 {
					select {
					case <-runCtx.Done():
						return
					case <-time.After(d):
					}
				}
				select {
				case <-runCtx.Done():
					return
				case sched <- at:
				}
			}
		}()
	}
	checkProof := func(leaf []byte, p *receipt.Proof) error {
		sig := ""
		if len(p.TreeHead.Signatures) > 0 {
			sig = string(p.TreeHead.Signatures[0].Sig)
		}
		mu.Lock()
		h, ok := heads[sig]
		mu.Unlock()
		if !ok {
			if _, err := p.TreeHead.Verify(cfg.Keys); err != nil {
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
			mu.Lock()
			heads[sig] = h
			mu.Unlock()
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
	start := time.Now()
	var wg sync.WaitGroup
	for c := 0; c < cfg.Clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), uint64(start.UnixNano())))
			leaf := make([]byte, cfg.LeafBytes)
			for {
				if cfg.Count > 0 && sent.Add(1) > int64(cfg.Count) {
					return
				}
				at := time.Now()
				if ticks != nil {
					t, ok := <-ticks
					if !ok {
						return
					}
					at = t
					late[c] = append(late[c], time.Since(t))
				} else if runCtx.Err() != nil {
					return
				}
				fillLeaf(leaf, rng)
				p, err := a.Append(ctx, leaf, cfg.HashOnly)
				d := time.Since(at)
				if err == nil {
					err = checkProof(leaf, p)
					if err != nil {
						failed.CompareAndSwap(nil, err.Error())
					}
				}
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				done.Add(1)
				lat[c] = append(lat[c], d)
			}
		}(c)
	}
	progressDone := make(chan struct{})
	if cfg.Progress != nil {
		go func() {
			t := time.NewTicker(time.Second)
			defer t.Stop()
			var last int64
			for {
				select {
				case <-progressDone:
					return
				case <-t.C:
					n := done.Load()
					fmt.Fprintf(cfg.Progress, "  %4.0fs  %s  appends %9d  %7d/s  errors %d\n", time.Since(start).Seconds(), a.Name(), n, n-last, errs.Load())
					last = n
				}
			}
		}()
	}
	wg.Wait()
	close(progressDone)
	elapsed := time.Since(start)
	all := slices.Concat(lat...)
	slices.Sort(all)
	res := &Result{Transport: a.Name(), Appends: done.Load(), Errors: errs.Load(), Elapsed: elapsed, Heads: len(heads)}
	res.Rate = float64(res.Appends) / elapsed.Seconds()
	if n := len(all); n > 0 {
		res.P50, res.P95, res.P99, res.Max = all[n*50/100], all[n*95/100], all[min(n*99/100, n-1)], all[n-1]
	}
	if l := slices.Concat(late...); len(l) > 0 {
		slices.Sort(l)
		res.PacerP99 = l[min(len(l)*99/100, len(l)-1)]
	}
	if v := firstErr.Load(); v != nil {
		res.FirstError = v.(string)
	}
	res.ProofsOK = failed.Load() == nil
	if v := failed.Load(); v != nil {
		res.FailedCheck = v.(string)
	}
	// Every head must be consistent with the last (largest) one.
	hs := make([]head, 0, len(heads))
	for _, h := range heads {
		hs = append(hs, h)
	}
	slices.SortFunc(hs, func(a, b head) int { return int(int64(a.size) - int64(b.size)) })
	res.Consistent = true
	if len(hs) > 1 {
		last := hs[len(hs)-1]
		for _, h := range hs[:len(hs)-1] {
			proof, err := a.Consistency(ctx, h.size, last.size)
			if err == nil {
				err = merkle.VerifyConsistency(h.size, last.size, h.root, last.root, proof)
			}
			if err != nil {
				res.Consistent = false
				res.FailedCheck = fmt.Sprintf("head at size %d is not consistent with the head at %d: %v", h.size, last.size, err)
				break
			}
		}
	}
	return res, nil
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
	fmt.Fprintf(w, "\n%-6s %10s %10s %9s %9s %9s %9s %10s %7s %6s %7s %10s\n", "via", "appends", "appends/s", "p50", "p95", "p99", "max", "pacer p99", "errors", "heads", "proofs", "consistent")
	for _, r := range rs {
		fmt.Fprintf(w, "%-6s %10d %10.0f %9s %9s %9s %9s %10s %7d %6d %7s %10s\n", r.Transport, r.Appends, r.Rate,
			r.P50.Round(10*time.Microsecond), r.P95.Round(10*time.Microsecond), r.P99.Round(10*time.Microsecond), r.Max.Round(10*time.Microsecond),
			r.PacerP99.Round(10*time.Microsecond), r.Errors, r.Heads, okWord(r.ProofsOK), okWord(r.Consistent))
	}
	for _, r := range rs {
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
