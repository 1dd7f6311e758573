package conformance

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"svc.dev/svc/receipt"
)

// Batch verifies many bundles with one set of options: on every core, each bundle read
// and parsed once, and the checks bundles share (a grant and its chain, a tree head,
// the witness checkpoint, a head's consistency with it) run once per distinct input
// and are remembered by digest. Every bundle gets the very checks, in the same order
// and with the same details, that Verify gives it alone: only the work is shared.
type Batch struct {
	opts    Options
	workers int
	keep    int

	found, done, failed atomic.Int64
}

// BatchOptions tune a Batch.
type BatchOptions struct {
	// Workers is the number of bundles verified at once; default (0) runtime.GOMAXPROCS(0).
	Workers int
	// KeepFailures caps how many failed bundles the summary lists (the counts cover
	// all of them); default (0) 10,000; negative keeps none.
	KeepFailures int
}

// NewBatch prepares a batch verifier. opts are those of Verify; its consistency
// source (WitnessLog) is asked for each proof once.
func NewBatch(opts Options, bo BatchOptions) *Batch {
	opts.cache = &verifyCache{}
	if opts.WitnessLog != nil {
		opts.WitnessLog = &proofCache{src: opts.WitnessLog}
	}
	b := &Batch{opts: opts, workers: bo.Workers, keep: bo.KeepFailures}
	if b.workers <= 0 {
		b.workers = runtime.GOMAXPROCS(0)
	}
	switch {
	case b.keep == 0:
		b.keep = 10000
	case b.keep < 0:
		b.keep = 0
	}
	return b
}

// BundleResult is the verdict on one bundle of a batch: one line of `svc verify --json`
// over many bundles.
type BundleResult struct {
	Path      string `json:"path"`
	ReceiptID string `json:"receiptId,omitempty"`
	Verified  bool   `json:"verified"`
	// FailedCheck and Detail name the first failed check, as verifying the bundle
	// alone reports it; Error is set instead when the file could not be read.
	FailedCheck string `json:"failedCheck,omitempty"`
	Detail      string `json:"detail,omitempty"`
	Error       string `json:"error,omitempty"`
	Issuer      string `json:"issuer,omitempty"`    // issuer kind: gateway or sdk
	Agent       string `json:"agent,omitempty"`     // agent id
	Tool        string `json:"tool,omitempty"`      // tool name
	Status      string `json:"status,omitempty"`    // execution status
	Execution   string `json:"execution,omitempty"` // provenance of the execution
	Checks      int    `json:"checks"`              // checks that ran
}

// Progress is a batch's running count, safe to read while it runs.
type Progress struct {
	Found, Done, Failed int64
}

// Progress reports how many bundle paths were found, verified and failed so far.
func (b *Batch) Progress() Progress {
	return Progress{Found: b.found.Load(), Done: b.done.Load(), Failed: b.failed.Load()}
}

// Run verifies every bundle whose path arrives on paths until it is closed (or ctx
// ends), calling each (from one goroutine at a time) with every result as it comes,
// in no fixed order. It returns the summary; the error is ctx's when it was cancelled.
func (b *Batch) Run(ctx context.Context, paths <-chan string, each func(*BundleResult) error) (*Summary, error) {
	start := time.Now()
	results := make(chan *BundleResult, 4*b.workers)
	var wg sync.WaitGroup
	for range b.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range paths {
				if ctx.Err() != nil {
					continue // drain, so the sender never blocks
				}
				results <- b.verifyFile(p)
			}
		}()
	}
	go func() { wg.Wait(); close(results) }()
	s := newSummary(b.keep)
	var eachErr error
	for r := range results {
		b.done.Add(1)
		if !r.Verified {
			b.failed.Add(1)
		}
		s.add(r)
		if each != nil && eachErr == nil {
			eachErr = each(r)
		}
	}
	s.finish(time.Since(start), b.workers, b.opts.cache)
	if err := ctx.Err(); err != nil {
		return s, err
	}
	return s, eachErr
}

// Found counts a path handed to Run (the walker calls it), for progress.
func (b *Batch) Found() { b.found.Add(1) }

func (b *Batch) verifyFile(path string) *BundleResult {
	data, err := receipt.ReadFileCapped(path, receipt.MaxBundleSize)
	if err != nil {
		return &BundleResult{Path: path, Error: err.Error()}
	}
	return b.VerifyBytes(path, data)
}

// VerifyBytes verifies one bundle of the batch (path only labels the result).
func (b *Batch) VerifyBytes(path string, data []byte) *BundleResult {
	r, v := verifyBytes(data, b.opts)
	res := &BundleResult{Path: path, ReceiptID: r.ReceiptID, Verified: r.Verified, Checks: len(r.Checks)}
	for _, c := range r.Checks {
		if !c.OK {
			res.FailedCheck, res.Detail = c.Name, c.Detail
			break
		}
	}
	if v != nil && v.pred != nil {
		p := v.pred
		res.Issuer, res.Agent, res.Tool, res.Status = p.Issuer.Kind, p.Agent.ID, p.Tool.Name, p.Execution.Status
		switch v.attestedBy {
		case "":
			res.Execution = string(p.Execution.Provenance)
		case "shared secret":
			res.Execution = "attested (shared secret)"
		default:
			res.Execution = "attested (upstream key)"
		}
	}
	return res
}

// verifyBytes is VerifyBytes returning the verification too (nil when the bundle did
// not parse), for what the batch summary counts, and a brief report: the checks and
// their results, details of failures only, no table of fields.
func verifyBytes(data []byte, opts Options) (*Report, *verification) {
	bundle, err := receipt.ParseBundle(data)
	if err != nil {
		return VerifyBytes(data, opts), nil
	}
	v := &verification{opts: opts, b: bundle, r: &Report{brief: true}}
	v.run()
	v.r.finish()
	return v.r, v
}

// ErrBatchFailed says that at least one bundle of a batch failed.
var ErrBatchFailed = errors.New("at least one bundle failed verification")
