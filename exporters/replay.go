package exporters

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Since is where a replay starts: a time, or a sequence of SVC_RECEIPTS.
type Since struct {
	Time time.Time // receipts stored at or after it
	Seq  uint64    // or: from this stream sequence on (used when Time is zero)
}

// ReplayResult counts a replay.
type ReplayResult struct {
	Sent    int      // receipts the collector accepted
	Refused []string // receipts it refused for good, with the error
}

// Replay sends tenant's receipts from since up to the newest stored when it starts to
// e again, in order (e.g. after the collector lost data), with retries for transient
// failures. It does not move the exporter's durable consumer. progress, when set, is
// called after each receipt with the count so far and the total.
func Replay(ctx context.Context, js jetstream.JetStream, tenant string, e Exporter, since Since, q QueueConfig, progress func(done, total int)) (*ReplayResult, error) {
	q = q.withDefaults()
	stream, err := js.Stream(ctx, ReceiptsStream)
	if err != nil {
		return nil, err
	}
	last, err := stream.GetLastMsgForSubject(ctx, ReceiptsSubject(tenant))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return &ReplayResult{}, nil
	}
	if err != nil {
		return nil, err
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{ReceiptsSubject(tenant)}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: max(since.Seq, 1)}
	if !since.Time.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, 0, &since.Time
	}
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	res := &ReplayResult{}
	total := -1
	for done := 0; ; done++ {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, context.DeadlineExceeded) {
			return res, nil // nothing at or after since
		}
		if err != nil {
			return res, err
		}
		md, err := m.Metadata()
		if err != nil {
			return res, err
		}
		if total < 0 {
			total = int(md.NumPending) + 1
		}
		if err := sendWithRetry(ctx, e, m.Data(), q); err != nil {
			if !errors.Is(err, ErrPermanent) {
				return res, fmt.Errorf("receipt %s (sequence %d): %w", m.Headers().Get(HeaderReceiptID), md.Sequence.Stream, err)
			}
			res.Refused = append(res.Refused, fmt.Sprintf("%s: %v", m.Headers().Get(HeaderReceiptID), err))
		} else {
			res.Sent++
		}
		if progress != nil {
			progress(done+1, total)
		}
		if md.Sequence.Stream >= last.Sequence {
			return res, nil
		}
	}
}

// sendWithRetry delivers one stored bundle, retrying a transient failure with
// backoff for up to q.MaxAge.
func sendWithRetry(ctx context.Context, e Exporter, data []byte, q QueueConfig) error {
	start := time.Now()
	for try := 0; ; try++ {
		err := sendBundle(ctx, e, data)
		if err == nil || errors.Is(err, ErrPermanent) || time.Since(start) > q.MaxAge {
			return err
		}
		if !sleepCtx(ctx, q.backoff(try)) {
			return ctx.Err()
		}
	}
}
