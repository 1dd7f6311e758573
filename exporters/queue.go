package exporters

import (
	"context"
	"io"
	"sync"
	"time"

	"svc.dev/svc/receipt"
)

// Queue is the standalone Sink: where no broker is present, each exporter has a
// bounded in-memory queue and one goroutine that sends batches and retries with
// backoff. A receipt is dropped, with one line on stderr naming the exporter, the
// receipt and why, when its exporter's queue is full, when it has been retried for
// QueueConfig.MaxAge, when the collector refused it for good, or when Close runs out
// of time. Delivery is at least once; the collector recognises a re-delivery by the
// receipt id (OTLP: the same trace and span ids; HEC: receipt_id).
type Queue struct {
	mu      sync.RWMutex // Export holds it shared; Close exclusively
	closed  bool
	workers []*queueWorker
	log     *lineWriter
	count   counters
	wg      sync.WaitGroup
}

type queueItem struct {
	b   *receipt.Bundle
	rec *Record // instead of b: a record that is not a receipt (ToolChange)
	at  time.Time
}

type queueWorker struct {
	q       *Queue
	exp     Exporter
	cfg     QueueConfig
	ch      chan queueItem
	closing chan struct{} // closed by Close: drain, then stop
	hard    context.Context
	stop    context.CancelFunc // Close's deadline passed: give up on what is left
}

// NewQueue starts one delivery goroutine per exporter. stderr nil means os.Stderr.
func NewQueue(exps []Exporter, cfg QueueConfig, stderr io.Writer) *Queue {
	cfg = cfg.withDefaults()
	q := &Queue{log: newLineWriter(stderr)}
	for _, e := range exps {
		hard, stop := context.WithCancel(context.Background())
		w := &queueWorker{q: q, exp: e, cfg: cfg, ch: make(chan queueItem, cfg.Size), closing: make(chan struct{}), hard: hard, stop: stop}
		q.workers = append(q.workers, w)
		q.wg.Add(1)
		go w.run()
	}
	return q
}

// Export queues b for every exporter without waiting.
func (q *Queue) Export(_ context.Context, b *receipt.Bundle) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	now := time.Now()
	for _, w := range q.workers {
		if q.closed {
			q.drop(w.exp.Name(), "receipt "+receiptIDOf(b), "the exporter is closed")
			continue
		}
		select {
		case w.ch <- queueItem{b: b, at: now}:
		default:
			q.drop(w.exp.Name(), "receipt "+receiptIDOf(b), "queue full")
		}
	}
}

// Stats counts exports so far.
func (q *Queue) Stats() Stats { return q.count.stats() }

// Close stops accepting, delivers what is queued until ctx ends, then drops the rest
// with a line each. It returns ctx's error when it had to drop.
func (q *Queue) Close(ctx context.Context) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	q.mu.Unlock()
	for _, w := range q.workers {
		close(w.closing)
	}
	done := make(chan struct{})
	go func() { q.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		for _, w := range q.workers {
			w.stop()
		}
		<-done
		return ctx.Err()
	}
}

// ExportToolChange queues a tool definition change for every exporter without
// waiting (EventSink).
func (q *Queue) ExportToolChange(_ context.Context, c ToolChange) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	r := c.record()
	for _, w := range q.workers {
		if q.closed {
			q.drop(w.exp.Name(), r.label(), "the exporter is closed")
			continue
		}
		select {
		case w.ch <- queueItem{rec: r, at: time.Now()}:
		default:
			q.drop(w.exp.Name(), r.label(), "queue full")
		}
	}
}

// drop counts and reports what (a record's label: "receipt <id>", …) given up.
func (q *Queue) drop(exporter, what, why string) {
	q.count.dropped.Add(1)
	q.log.printf("svc: %s export of %s dropped: %s", exporter, what, why)
}

func (w *queueWorker) run() {
	defer w.q.wg.Done()
	defer w.stop()
	for {
		var first queueItem
		select {
		case first = <-w.ch:
		case <-w.closing:
			select {
			case first = <-w.ch:
			default:
				return // closed and drained
			}
		}
		batch := []queueItem{first}
	fill:
		for len(batch) < w.cfg.Batch {
			select {
			case it := <-w.ch:
				batch = append(batch, it)
			default:
				break fill
			}
		}
		w.deliver(batch)
	}
}

func (w *queueWorker) deliver(batch []queueItem) {
	name := w.exp.Name()
	recs := make([]*Record, 0, len(batch))
	oldest := batch[0].at
	for _, it := range batch {
		if it.rec != nil {
			recs = append(recs, it.rec)
			continue
		}
		r, err := FromBundle(it.b)
		if err != nil {
			w.q.drop(name, "receipt (unreadable bundle)", err.Error())
			continue
		}
		recs = append(recs, r)
	}
	for try := 0; len(recs) > 0; try++ {
		if w.hard.Err() != nil {
			for _, r := range recs {
				w.q.drop(name, r.label(), "the exporter was closed before the collector accepted it")
			}
			return
		}
		final, retry, err := attempt(w.hard, w.exp, recs)
		for _, o := range final {
			if o.err == nil {
				w.q.count.exported.Add(1)
			} else {
				w.q.drop(name, o.rec.label(), o.err.Error())
			}
		}
		recs = retry
		if len(recs) == 0 {
			return
		}
		if time.Since(oldest) >= w.cfg.MaxAge {
			for _, r := range recs {
				w.q.drop(name, r.label(), "collector did not accept it within "+w.cfg.MaxAge.String()+": "+err.Error())
			}
			return
		}
		sleepCtx(w.hard, w.cfg.backoff(try))
	}
}
