package projections

import (
	"context"
	"errors"
	"fmt"
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
// Follow returns nil when ctx ends, and an error when the stream cannot be read or a
// batch does not decode.
func Follow(ctx context.Context, js jetstream.JetStream, subject string, startSeq uint64, apply func(Event) error, caughtUp func()) error {
	stream, err := js.Stream(ctx, pipeline.LeavesStream)
	if err != nil {
		return fmt.Errorf("follow %s: %w", subject, err)
	}
	var target uint64 // the last batch on subject when Follow starts; 0: none
	if last, err := stream.GetLastMsgForSubject(ctx, subject); err == nil {
		target = last.Sequence
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("follow %s: %w", subject, err)
	}
	if startSeq == 0 {
		startSeq = 1
	}
	if caughtUp != nil && startSeq > target {
		caughtUp()
		caughtUp = nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    startSeq,
	})
	if err != nil {
		return err
	}
	defer pipeline.CloseOrdered(stream, cons)
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
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
			return fmt.Errorf("follow %s: stream seq %d: %w", subject, md.Sequence.Stream, err)
		}
		ev := Event{Seq: md.Sequence.Stream, Tenant: strings.TrimPrefix(m.Subject(), pipeline.LeavesPrefix), Time: md.Timestamp, Batch: b, Pending: md.NumPending}
		if err := apply(ev); err != nil {
			return err
		}
		telemetry.Current().Applied(ctx, js, subject, ev.Seq, ev.Time)
		if caughtUp != nil && ev.Seq >= target {
			caughtUp()
			caughtUp = nil
		}
	}
}
