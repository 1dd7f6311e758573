package exporters

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"
)

// subscriber is a Watermill subscriber on one durable JetStream consumer: each
// message is handed to the router and acknowledged after the handler acked it, or
// negatively acknowledged with a backoff delay after it nacked (so the broker
// redelivers it later). MaxDeliver is unlimited: a receipt is never given up.
//
// It stands in for watermill-nats's JetStream subscriber (v2.1.3), which closes the
// output channel when the context ends while a consume callback may still be sending
// on it: stopping a router under load panicked with "send on closed channel" in
// (*Subscriber).handleMsg. Here the consumer is stopped and every callback has
// returned before the channel is closed.
type subscriber struct {
	consumer jetstream.Consumer
	q        QueueConfig
	ackWait  time.Duration
	lanes    int          // messages in hand at once
	cache    *decodeCache // shared by the router's exporters
}

// Subscribe consumes until ctx ends; the topic is the consumer's, fixed at creation.
func (s *subscriber) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	out := make(chan *message.Message)
	var inflight sync.WaitGroup
	stopping := make(chan struct{})
	var mu sync.Mutex
	stopped := false
	// s.lanes long-lived workers hold the messages in hand (a goroutine per message
	// would grow a fresh stack for every decode).
	work := make(chan jetstream.Msg)
	for range s.lanes {
		go func() {
			for m := range work {
				s.handle(ctx, m, out, stopping)
				inflight.Done()
			}
		}()
	}
	cc, err := s.consumer.Consume(func(m jetstream.Msg) {
		mu.Lock()
		if stopped {
			mu.Unlock()
			_ = m.Nak() // hand it back now rather than after AckWait
			return
		}
		inflight.Add(1)
		mu.Unlock()
		select {
		case work <- m: // at most s.lanes in hand; the next waits here
		case <-stopping:
			_ = m.Nak()
			inflight.Done()
		}
	}, jetstream.PullMaxMessages(max(s.lanes, 2*s.q.Batch)))
	if err != nil {
		return nil, err
	}
	go func() {
		<-ctx.Done()
		mu.Lock()
		stopped = true
		close(stopping)
		mu.Unlock()
		// Drain hands the messages already pulled to the callback, which gives them
		// back at once, instead of leaving them to wait out AckWait.
		cc.Drain()
		select {
		case <-cc.Closed():
		case <-time.After(10 * time.Second):
		}
		inflight.Wait()
		close(work)
		close(out)
	}()
	return out, nil
}

// handle hands one message to the router and settles it with the broker.
func (s *subscriber) handle(ctx context.Context, m jetstream.Msg, out chan<- *message.Message, stopping <-chan struct{}) {
	wm := message.NewMessage(m.Headers().Get(HeaderReceiptID), m.Data())
	wm.Metadata.Set(mdTenant, strings.TrimPrefix(m.Subject(), ReceiptsPrefix))
	var delivered uint64 = 1
	if md, err := m.Metadata(); err == nil {
		wm.Metadata.Set(mdSeq, strconv.FormatUint(md.Sequence.Stream, 10))
		delivered = md.NumDelivered
		wm.Metadata.Set(mdDelivered, strconv.FormatUint(delivered, 10))
	}
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if r, err := s.cache.get(wm.Metadata.Get(mdSeq), m.Data()); err == nil {
		mctx = context.WithValue(mctx, recordKey{}, r) // decoded here, on a warm stack
	}
	wm.SetContext(mctx)
	select {
	case out <- wm:
	case <-stopping:
		_ = m.Nak()
		return
	}
	t := time.NewTimer(s.ackWait)
	defer t.Stop()
	// While the handler works on it (retries included), the message is marked in
	// progress, so the broker does not hand it to another lane meanwhile.
	alive := time.NewTicker(consumerAckWait / 3)
	defer alive.Stop()
	for {
		select {
		case <-alive.C:
			_ = m.InProgress()
			continue
		case <-wm.Acked():
			_ = m.Ack()
		case <-wm.Nacked():
			_ = m.NakWithDelay(s.q.backoff(int(min(delivered, 20))))
		case <-t.C:
			// given up holding it: the broker redelivers it after AckWait
		case <-stopping:
			s.settleOnStop(m, wm)
		}
		return
	}
}

// settleOnStop: the handler's context ended; it acks or nacks on its way out, and the
// broker redelivers anything left unsettled.
func (s *subscriber) settleOnStop(m jetstream.Msg, wm *message.Message) {
	select {
	case <-wm.Acked():
		_ = m.Ack()
	case <-wm.Nacked():
		_ = m.Nak()
	case <-time.After(time.Second):
	}
}

// Close is a no-op: the subscription ends with the router's context.
func (s *subscriber) Close() error { return nil }
