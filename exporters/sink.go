package exporters

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"svc.dev/svc/receipt"
)

// Sink is where an issuer hands each receipt after writing it: the seam the SDK
// issuer, the sidecar and the gateway use. Export never blocks on a collector and
// never fails the receipt; a receipt whose export is finally given up costs one line
// on stderr. Close stops accepting, delivers what it can until ctx ends, and reports
// the rest as dropped (standalone) or leaves it in the stream (pipeline).
type Sink interface {
	Export(ctx context.Context, b *receipt.Bundle)
	Close(ctx context.Context) error
}

// Stats counts a sink's exports: Exported were accepted by a collector (one per
// exporter), Dropped were given up with a line on stderr.
type Stats struct {
	Exported uint64
	Dropped  uint64
}

// DefaultDrain is how long a stopping process (svc serve, svc gateway) waits for the
// exports still queued before it drops them with a line each (svc serve
// --export-drain). With a broker (a log over NATS) a receipt is stored in the stream
// as soon as it is published, and what its consumers had not delivered is delivered
// after the restart; only receipts not yet published wait on this limit.
const DefaultDrain = 30 * time.Second

// QueueConfig tunes delivery. Zero fields take the defaults.
type QueueConfig struct {
	Size       int           // standalone: receipts waiting per exporter; default 10000
	Batch      int           // records per request; default 100
	MaxAge     time.Duration // standalone: how long one export is retried; default 10 minutes
	MinBackoff time.Duration // first retry delay; default 200 ms, doubling with jitter
	MaxBackoff time.Duration // longest retry delay; default 10 s
}

func (c QueueConfig) withDefaults() QueueConfig {
	if c.Size <= 0 {
		c.Size = 10000
	}
	if c.Batch <= 0 {
		c.Batch = 100
	}
	if c.MaxAge <= 0 {
		c.MaxAge = 10 * time.Minute
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = 200 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 10 * time.Second
	}
	if c.MaxBackoff < c.MinBackoff {
		c.MaxBackoff = c.MinBackoff
	}
	return c
}

// backoff is the wait before retry attempt+1: MinBackoff doubling, up to 50% jitter,
// at most MaxBackoff.
func (c QueueConfig) backoff(attempt int) time.Duration {
	d := c.MinBackoff << min(attempt, 20)
	if d <= 0 || d > c.MaxBackoff {
		d = c.MaxBackoff
	}
	d += time.Duration(rand.Int64N(int64(d)/2 + 1))
	return min(d, c.MaxBackoff)
}

// Options configure New.
type Options struct {
	Stderr     io.Writer                   // drop lines; default os.Stderr
	HTTPClient *http.Client                // default: a fresh client
	Getenv     func(string) (string, bool) // default os.LookupEnv
	Queue      QueueConfig                 // delivery tuning
	// NATS, when set, makes exports durable: each receipt is published to the
	// SVC_RECEIPTS stream on svc.receipts.<Tenant>, and each exporter runs as a durable
	// JetStream consumer that acknowledges only after its collector accepted.
	NATS     *nats.Conn
	Tenant   string // with NATS; default "default"
	Replicas int    // with NATS: stream replicas (1 on one node, 3 in a cluster)
}

// Build makes the exporters cfg names, reading their environment variables; a
// missing variable is an error naming the field.
func Build(cfg Config, client *http.Client, getenv func(string) (string, bool)) ([]Exporter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var out []Exporter
	for _, k := range kinds {
		if !k.configured(cfg) {
			continue
		}
		e, err := k.build(cfg, client, getenv)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// New builds the sink for the exporters' config fields (Config): a StreamSink when
// opts.NATS is set, else a standalone Queue. It returns nil, nil when no field is
// set.
func New(ctx context.Context, cfg Config, opts Options) (Sink, error) {
	if cfg.Empty() {
		return nil, nil
	}
	exps, err := Build(cfg, opts.HTTPClient, opts.Getenv)
	if err != nil {
		return nil, err
	}
	if opts.NATS != nil {
		return NewStreamSink(ctx, opts.NATS, opts.Tenant, exps, StreamOptions{Stderr: opts.Stderr, Queue: opts.Queue, Replicas: opts.Replicas})
	}
	return NewQueue(exps, opts.Queue, opts.Stderr), nil
}

// lineWriter writes whole lines to stderr from several goroutines.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func newLineWriter(w io.Writer) *lineWriter {
	if w == nil {
		w = os.Stderr
	}
	return &lineWriter{w: w}
}

func (l *lineWriter) printf(format string, a ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format+"\n", a...)
}

// counters are the shared Stats of a sink.
type counters struct {
	exported, dropped atomic.Uint64
}

func (c *counters) stats() Stats {
	return Stats{Exported: c.exported.Load(), Dropped: c.dropped.Load()}
}

// receiptIDOf names a bundle in a drop line without failing.
func receiptIDOf(b *receipt.Bundle) string {
	if r, err := FromBundle(b); err == nil {
		return r.ReceiptID
	}
	return "(unreadable bundle)"
}

// sendOutcome is the final outcome of one record.
type sendOutcome struct {
	rec *Record
	err error // nil: accepted; else refused for good (wraps ErrPermanent)
}

// attempt sends recs once. When the collector refuses the batch for good and it holds
// several records, each is sent alone, so one bad record does not sink the rest. It
// returns the records whose outcome is final and those to retry, with the error that
// makes them worth retrying.
func attempt(ctx context.Context, exp Exporter, recs []*Record) (final []sendOutcome, retry []*Record, err error) {
	err = exp.Send(ctx, recs)
	switch {
	case err == nil:
		for _, r := range recs {
			final = append(final, sendOutcome{rec: r})
		}
		return final, nil, nil
	case !errors.Is(err, ErrPermanent):
		return nil, recs, err
	case len(recs) == 1:
		return []sendOutcome{{rec: recs[0], err: err}}, nil, nil
	}
	var lastErr error
	for _, r := range recs {
		e := exp.Send(ctx, []*Record{r})
		if e == nil || errors.Is(e, ErrPermanent) {
			final = append(final, sendOutcome{rec: r, err: e})
		} else {
			retry = append(retry, r)
			lastErr = e
		}
	}
	return final, retry, lastErr
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
