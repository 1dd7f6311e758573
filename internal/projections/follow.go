package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/telemetry"
	"svc.dev/svc/pipeline"
)

// Event is one committed batch as a projection sees it.
type Event struct {
	Seq    uint64    // stream sequence
	Tenant string    // from the subject
	Time   time.Time // when the broker stored it
	Batch  *pipeline.Batch
	// Pending is how many messages on the subject the consumer knows to follow this
	// one; 0 means this is the newest, a good moment to flush.
	Pending uint64
}

// Target is the stream sequence of the last batch on subject now (0: none): how far
// a replay has to go.
func Target(ctx context.Context, js jetstream.JetStream, subject string) (uint64, error) {
	stream, err := js.Stream(ctx, pipeline.LeavesStream)
	if err != nil {
		return 0, err
	}
	last, err := stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return last.Sequence, nil
}

// Follow delivers every batch on subject (a tenant's leaves subject, or
// svc.leaves.> for all) from stream sequence startSeq on, in order, until ctx ends.
// When caughtUp is not nil it is called once, when Follow has delivered everything
// the stream held when it started.
// tel, when not nil, hears each batch applied (the projection's lag) and each broker
// retry.
//
// The contract with apply:
//   - Batches arrive in stream order, each once per Follow call; a projection restarted
//     from a position it saved earlier sees again every batch after that position, so
//     apply must be idempotent by (tenant, index) or by Event.Seq (a projection that
//     records the last Seq it applied skips anything at or below it).
//   - apply is called from Follow's goroutine; the next batch waits for it.
//   - An error from apply stops Follow, which returns that error unchanged: nothing is
//     skipped, and the caller decides whether to restart from its saved position.
//
// Follow returns nil when ctx ends, and an error when a batch does not decode. A
// broker that fails (a node lost, no stream leader for a while, no quorum) is retried
// with backoff from the batch after the last one delivered, for as long as it takes:
// each failure is logged and counted (svc_broker_retries_total{loop=subject}), and
// the projection's lag shows how far behind it is; the process never stops for it.
func Follow(ctx context.Context, tel *telemetry.Telemetry, js jetstream.JetStream, subject string, startSeq uint64, apply func(Event) error, caughtUp func()) error {
	f := &follower{tel: tel, js: js, subject: subject, next: max(startSeq, 1), apply: apply, caughtUp: caughtUp}
	wait := retryMin
	for {
		delivered := f.delivered
		err := f.once(ctx)
		var perm permanent
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &perm):
			return perm.err
		}
		if f.delivered > delivered {
			wait = retryMin
		}
		tel.BrokerRetry(subject)
		slog.Warn("following the log of record failed; retrying", "subject", subject, "from", f.next, "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, retryMax)
	}
}

// The backoff of a broker-facing loop: short, since a cluster's failover takes
// seconds and every moment waited beyond it is a longer stall of the log.
const (
	retryMin = 50 * time.Millisecond
	retryMax = time.Second
)

// permanent marks an error that retrying cannot cure (apply refused a batch, a batch
// does not decode): Follow returns it.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }

// follower is one Follow: where it is, and what it calls.
type follower struct {
	tel       *telemetry.Telemetry // nil: none
	js        jetstream.JetStream
	subject   string
	next      uint64 // the stream sequence to deliver from
	delivered uint64 // batches delivered so far
	apply     func(Event) error
	caughtUp  func()
}

// once follows from f.next until the broker fails (that error) or ctx ends.
func (f *follower) once(ctx context.Context) error {
	js, subject, startSeq := f.js, f.subject, f.next
	stream, err := js.Stream(ctx, pipeline.LeavesStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return permanent{fmt.Errorf("follow %s: %w", subject, err)}
	} else if err != nil {
		return fmt.Errorf("follow %s: %w", subject, err)
	}
	var target uint64 // the last batch on subject when Follow starts; 0: none
	if last, err := stream.GetLastMsgForSubject(ctx, subject); err == nil {
		target = last.Sequence
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("follow %s: %w", subject, err)
	}
	if f.caughtUp != nil && startSeq > target {
		f.caughtUp()
		f.caughtUp = nil
	}
	it, done, err := pipeline.ReadFrom(ctx, stream, subject, pipeline.From{Seq: startSeq})
	if err != nil {
		return err
	}
	defer done()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("follow %s: %w", subject, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		b, err := pipeline.DecodeBatch(m.Data())
		if err != nil {
			return permanent{fmt.Errorf("follow %s: stream seq %d: %w", subject, md.Sequence.Stream, err)}
		}
		ev := Event{Seq: md.Sequence.Stream, Tenant: strings.TrimPrefix(m.Subject(), pipeline.LeavesPrefix), Time: md.Timestamp, Batch: b, Pending: md.NumPending}
		if err := f.apply(ev); err != nil {
			return permanent{err}
		}
		f.next, f.delivered = ev.Seq+1, f.delivered+1
		f.tel.Applied(ctx, js, subject, ev.Seq, ev.Time)
		if f.caughtUp != nil && ev.Seq >= target {
			f.caughtUp()
			f.caughtUp = nil
		}
	}
}
