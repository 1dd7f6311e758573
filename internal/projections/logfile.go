package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/telemetry"
	"svc.dev/svc/merkle"
	"svc.dev/svc/pipeline"
)

// LogFile keeps a SPEC.md log file in step with a tenant's committed leaves, so the
// file a file-mode log server names with --file stays a faithful log file that
// `svc verify --log` and `svc audit --log` read. Lines are written in batches, one
// fsync each, and every committed leaf is in the file within a second, whether or not
// more appends follow (a timer writes what a quiet moment leaves pending).
type LogFile struct {
	Path      string // the log file
	StatePath string // where the stream position is kept
	Tenant    string
	JS        jetstream.JetStream
	Logger    *slog.Logger
	// Telemetry receives the projection's lag and broker retries; nil: none.
	Telemetry *telemetry.Telemetry
	// CaughtUp, when set, is called once the file holds every leaf the stream held
	// when Run started.
	CaughtUp func()
	// OnBatch, when set, is called with the stream sequence of each batch written.
	OnBatch func(seq uint64)

	w *merkle.LineWriter
}

// The file's write timing: a batch that finds the stream quiet is written when the
// last write is flushAfter old; otherwise the timer, looking every flushTick, writes
// it once it is. A leaf is in the file at most flushAfter+flushTick (750 ms) after
// the stream committed it.
const (
	flushAfter = 500 * time.Millisecond
	flushTick  = 250 * time.Millisecond
	// stopCatchUp bounds the time a stopping projection takes to write the batches
	// the stream committed before the stop.
	stopCatchUp = 2 * time.Second
)

type logFileState struct {
	Lines     uint64 `json:"lines"`
	Offset    int64  `json:"offset"`    // bytes of those lines, fsynced
	StreamSeq uint64 `json:"streamSeq"` // the batch that ends at Lines
}

// Run follows the stream until ctx ends.
func (p *LogFile) Run(ctx context.Context) error {
	if p.Logger == nil {
		p.Logger = slog.Default()
	}
	var st logFileState
	if err := loadState(p.StatePath, &st); err != nil {
		return fmt.Errorf("log file projection %s: %w", p.StatePath, err)
	}
	// Only what was written since the recorded position is read back.
	w, err := merkle.ResumeLineWriter(p.Path, p.Logger, st.Lines, st.Offset)
	if err != nil {
		return err
	}
	p.w = w
	defer w.Close()
	start := uint64(1)
	if st.Lines <= w.Count() && st.StreamSeq > 0 {
		start = st.StreamSeq + 1
	}
	r := &logFileRun{p: p, w: w, lastSave: time.Now(), lastFlush: time.Now()}
	// The timer: lines still pending FlushAfter after the last write are written even
	// when no later batch comes, so a reader of a running server's file (svc verify
	// --log, svc audit --log) finds every acknowledged leaf within a second.
	tickCtx, stopTick := context.WithCancel(ctx)
	tickDone := make(chan struct{})
	go func() { defer close(tickDone); r.tick(tickCtx) }()
	subject := pipeline.LeavesSubject(p.Tenant)
	ctx = telemetry.WithConsumer(ctx, "logfile/"+p.Tenant)
	err = Follow(ctx, p.Telemetry, p.JS, subject, start, r.apply, r.caughtUp)
	if err == nil && ctx.Err() != nil {
		r.drain(ctx, subject, start)
	}
	stopTick()
	<-tickDone
	if ferr := r.flush(); err == nil {
		err = ferr
	}
	if r.lastSeq > 0 {
		_ = saveState(p.StatePath, logFileState{Lines: w.Count(), Offset: w.Offset(), StreamSeq: r.lastSeq})
	}
	return err
}

// logFileRun is one Run of the projection: the lines not yet written and the
// positions, shared by Follow's goroutine and the timer under mu.
type logFileRun struct {
	p         *LogFile
	w         *merkle.LineWriter
	mu        sync.Mutex
	pending   []merkle.Entry
	lastSeq   uint64
	flushErr  error // a failed timer flush, returned by the next batch
	lastSave  time.Time
	lastFlush time.Time
}

// flush writes the pending lines, and the state at most once a second.
func (r *logFileRun) flush() error {
	if len(r.pending) == 0 {
		return nil
	}
	if err := r.w.Append(r.pending); err != nil {
		return fmt.Errorf("log file %s: %w", r.p.Path, err)
	}
	r.pending = r.pending[:0]
	r.lastFlush = time.Now()
	if time.Since(r.lastSave) > time.Second {
		r.lastSave = time.Now()
		return saveState(r.p.StatePath, logFileState{Lines: r.w.Count(), Offset: r.w.Offset(), StreamSeq: r.lastSeq})
	}
	return nil
}

// tick writes what a quiet moment leaves pending, until ctx ends.
func (r *logFileRun) tick(ctx context.Context) {
	t := time.NewTicker(flushTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.mu.Lock()
		if len(r.pending) > 0 && r.flushErr == nil && time.Since(r.lastFlush) >= flushAfter {
			r.flushErr = r.flush()
		}
		r.mu.Unlock()
	}
}

// apply takes a committed batch: the leaves the file lacks become pending lines.
func (r *logFileRun) apply(ev Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.flushErr != nil {
		return r.flushErr
	}
	have := r.w.Count() + uint64(len(r.pending))
	b := ev.Batch
	if b.First > have {
		return fmt.Errorf("log file %s holds %d leaves but the next committed batch starts at %d", r.p.Path, have, b.First)
	}
	for _, l := range b.Leaves[min(have-b.First, uint64(len(b.Leaves))):] {
		if l.Data != nil {
			r.pending = append(r.pending, merkle.Entry{Kind: merkle.LineLeaf, Leaf: string(l.Data), Hash: l.Hash})
		} else {
			r.pending = append(r.pending, merkle.Entry{Kind: merkle.LineHash, Hash: l.Hash})
		}
	}
	r.lastSeq = ev.Seq
	if r.p.OnBatch != nil {
		defer r.p.OnBatch(ev.Seq)
	}
	// The file is a projection: the stream holds every leaf, so the file is written
	// (and fsynced) in groups rather than once a batch; the timer writes what a quiet
	// moment leaves pending.
	if len(r.pending) >= 8192 || (ev.Pending == 0 && time.Since(r.lastFlush) >= flushAfter) {
		return r.flush()
	}
	return nil
}

func (r *logFileRun) caughtUp() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.flush(); err == nil && r.p.CaughtUp != nil {
		r.p.CaughtUp()
	}
}

// drain, when stopping, takes what the stream committed before the stop, within a
// deadline, so the file a stopped server leaves holds every leaf it acknowledged (the
// stream is the record either way; a restart catches up).
func (r *logFileRun) drain(ctx context.Context, subject string, start uint64) {
	r.mu.Lock()
	from := start
	if r.lastSeq > 0 {
		from = r.lastSeq + 1
	}
	r.mu.Unlock()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopCatchUp)
	defer cancel()
	derr := Follow(dctx, r.p.Telemetry, r.p.JS, subject, from, r.apply, cancel)
	if dctx.Err() == nil || !errors.Is(dctx.Err(), context.Canceled) {
		if derr != nil || dctx.Err() != nil {
			r.p.Logger.Warn("log file projection: stopped before catching up", "file", r.p.Path, "err", errors.Join(derr, dctx.Err()))
		}
	}
}
