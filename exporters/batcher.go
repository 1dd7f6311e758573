package exporters

import (
	"context"
	"sync"
	"time"
)

// batcher gathers the records of concurrent deliveries to one exporter into one
// request: a delivery waits at most linger (or until max records wait) and then gets
// its own record's outcome. A batch the collector refuses for good is sent again one
// record at a time (attempt), so one bad record does not sink the rest.
type batcher struct {
	e       Exporter
	max     int
	linger  time.Duration
	timeout time.Duration

	mu      sync.Mutex
	pending []*batchJob
	timer   *time.Timer
}

type batchJob struct {
	rec  *Record
	done chan error
}

func newBatcher(e Exporter, max int, linger, timeout time.Duration) *batcher {
	return &batcher{e: e, max: max, linger: linger, timeout: timeout}
}

// send delivers r in the next batch and returns its outcome: nil (accepted), an error
// wrapping ErrPermanent (refused for good), or another error (retry later).
func (b *batcher) send(ctx context.Context, r *Record) error {
	j := &batchJob{rec: r, done: make(chan error, 1)}
	b.mu.Lock()
	b.pending = append(b.pending, j)
	switch {
	case len(b.pending) >= b.max:
		batch := b.take()
		b.mu.Unlock()
		go b.flush(batch)
	case b.timer == nil:
		b.timer = time.AfterFunc(b.linger, func() {
			b.mu.Lock()
			batch := b.take()
			b.mu.Unlock()
			b.flush(batch)
		})
		b.mu.Unlock()
	default:
		b.mu.Unlock()
	}
	select {
	case err := <-j.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// take empties the pending list; b.mu is held.
func (b *batcher) take() []*batchJob {
	batch := b.pending
	b.pending = nil
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	return batch
}

func (b *batcher) flush(batch []*batchJob) {
	if len(batch) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	recs := make([]*Record, len(batch))
	byRec := make(map[*Record]*batchJob, len(batch))
	for i, j := range batch {
		recs[i] = j.rec
		byRec[j.rec] = j
	}
	final, retry, err := attempt(ctx, b.e, recs)
	for _, o := range final {
		byRec[o.rec].done <- o.err
	}
	for _, r := range retry {
		byRec[r].done <- err
	}
}
