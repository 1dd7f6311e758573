package pipeline

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// From is where a read of a stream starts: a stream sequence, or a time (used when
// Time is not nil); the zero From reads from the first message.
type From struct {
	Seq         uint64     // the first stream sequence to read (0 or 1: the first)
	Time        *time.Time // or: the first message stored at or after it
	HeadersOnly bool       // deliver headers and metadata without the data
}

// ReadFrom reads subject of stream in stream order from from, on an ordered consumer
// (the broker's cheapest reader, which never acknowledges and resumes itself after a
// hiccup): the projections following SVC_LEAVES, the sequencer's replay into its tree
// store, the quota's monthly count and the import's comparison all read this way.
// done stops the reading and deletes the consumer ([CloseOrdered]); the caller defers
// it.
func ReadFrom(ctx context.Context, stream jetstream.Stream, subject string, from From) (it jetstream.MessagesContext, done func(), err error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}, HeadersOnly: from.HeadersOnly}
	switch {
	case from.Time != nil:
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, from.Time
	case from.Seq > 1:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from.Seq
	}
	cons, err := stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	if it, err = cons.Messages(); err != nil {
		CloseOrdered(stream, cons)
		return nil, nil, err
	}
	return it, func() { it.Stop(); CloseOrdered(stream, cons) }, nil
}
