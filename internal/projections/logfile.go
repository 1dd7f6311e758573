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
	var (
		mu        sync.Mutex // pending, the writer and the positions: Follow's goroutine and the timer
		pending   []merkle.Entry
		lastSeq   uint64
		flushErr  error // a failed timer flush, returned by the next batch
		lastSave  = time.Now()
		lastFlush = time.Now()
	)
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		if err := w.Append(pending); err != nil {
			return fmt.Errorf("log file %s: %w", p.Path, err)
		}
		pending = pending[:0]
		lastFlush = time.Now()
		if time.Since(lastSave) > time.Second {
			lastSave = time.Now()
			return saveState(p.StatePath, logFileState{Lines: w.Count(), Offset: w.Offset(), StreamSeq: lastSeq})
		}
		return nil
	}
	// The timer: lines still pending FlushAfter after the last write are written even
	// when no later batch comes, so a reader of a running server's file (svc verify
	// --log, svc audit --log) finds every acknowledged leaf within a second.
	tickCtx, stopTick := context.WithCancel(ctx)
	tickDone := make(chan struct{})
	go func() {
		defer close(tickDone)
		t := time.NewTicker(flushTick)
		defer t.Stop()
		for {
			select {
			case <-tickCtx.Done():
				return
			case <-t.C:
			}
			mu.Lock()
			if len(pending) > 0 && flushErr == nil && time.Since(lastFlush) >= flushAfter {
				flushErr = flush()
			}
			mu.Unlock()
		}
	}()
	apply := func(ev Event) error {
		mu.Lock()
		defer mu.Unlock()
		if flushErr != nil {
			return flushErr
		}
		have := w.Count() + uint64(len(pending))
		b := ev.Batch
		if b.First > have {
			return fmt.Errorf("log file %s holds %d leaves but the next committed batch starts at %d", p.Path, have, b.First)
		}
		for _, l := range b.Leaves[min(have-b.First, uint64(len(b.Leaves))):] {
			if l.Data != nil {
				pending = append(pending, merkle.Entry{Kind: merkle.LineLeaf, Leaf: string(l.Data), Hash: l.Hash})
			} else {
				pending = append(pending, merkle.Entry{Kind: merkle.LineHash, Hash: l.Hash})
			}
		}
		lastSeq = ev.Seq
		if p.OnBatch != nil {
			defer p.OnBatch(ev.Seq)
		}
		// The file is a projection: the stream holds every leaf, so the file is
		// written (and fsynced) in groups rather than once a batch; the timer
		// writes what a quiet moment leaves pending.
		if len(pending) >= 8192 || (ev.Pending == 0 && time.Since(lastFlush) >= flushAfter) {
			return flush()
		}
		return nil
	}
	caughtUp := func() {
		mu.Lock()
		defer mu.Unlock()
		if err := flush(); err == nil && p.CaughtUp != nil {
			p.CaughtUp()
		}
	}
	subject := pipeline.LeavesSubject(p.Tenant)
	ctx = telemetry.WithConsumer(ctx, "logfile/"+p.Tenant)
	err = Follow(ctx, p.JS, subject, start, apply, caughtUp)
	if err == nil && ctx.Err() != nil {
		// Stopping: take what the stream committed before the stop, within a
		// deadline, so the file a stopped server leaves holds every leaf it
		// acknowledged (the stream is the record either way; a restart catches up).
		mu.Lock()
		from := start
		if lastSeq > 0 {
			from = lastSeq + 1
		}
		mu.Unlock()
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopCatchUp)
		derr := Follow(dctx, p.JS, subject, from, apply, cancel)
		if dctx.Err() == nil || !errors.Is(dctx.Err(), context.Canceled) {
			if derr != nil || dctx.Err() != nil {
				p.Logger.Warn("log file projection: stopped before catching up", "file", p.Path, "err", errors.Join(derr, dctx.Err()))
			}
		}
		cancel()
	}
	stopTick()
	<-tickDone
	if ferr := flush(); err == nil {
		err = ferr
	}
	if lastSeq > 0 {
		_ = saveState(p.StatePath, logFileState{Lines: w.Count(), Offset: w.Offset(), StreamSeq: lastSeq})
	}
	return err
}
