package exporters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/pipeline/consume"
	"svc.dev/svc/receipt"
)

// RouterConfig configures the consumers of SVC_RECEIPTS for one tenant. Zero fields
// take the defaults.
type RouterConfig struct {
	// Lanes is how many receipts each exporter has in hand at once (each in its own
	// handler call); their records go to the collector together, up to Queue.Batch a
	// request. 1 ≤ Lanes ≤ 256, default 64.
	Lanes int
	// Linger is how long a record waits for others to share its request; default
	// 500 µs.
	Linger time.Duration
	// Retries is how often a transient failure (timeout, 5xx, 408, 429, a collector
	// that does not answer) is retried in hand, with backoff from Queue.MinBackoff to
	// Queue.MaxBackoff, before the message goes back to the stream to be redelivered
	// after the same backoff. Default 5. Such a receipt is never dropped.
	Retries int
	// Timeout bounds one delivery attempt; default DefaultTimeout.
	Timeout time.Duration
	// PerSecond throttles each exporter to this many deliveries a second; 0: none.
	PerSecond int
	// Queue.MinBackoff and Queue.MaxBackoff bound the retry backoff.
	Queue QueueConfig
	// Replicas of SVC_RECEIPTS, SVC_DEAD and the status bucket: 1 on one node (the
	// default), 3 in a cluster. It must match what the sink created, else the router
	// would scale the streams down again.
	Replicas int
}

func (c RouterConfig) withDefaults() (RouterConfig, error) {
	if c.Lanes == 0 {
		c.Lanes = 64
	}
	if c.Lanes < 1 || c.Lanes > 256 {
		return c, fmt.Errorf("router lanes %d: want 1 to 256", c.Lanes)
	}
	if c.Linger <= 0 {
		c.Linger = 500 * time.Microsecond
	}
	if c.Retries == 0 {
		c.Retries = 5
	}
	if c.Retries < 0 {
		return c, fmt.Errorf("router retries %d: want 0 or more", c.Retries)
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.PerSecond < 0 {
		return c, fmt.Errorf("router throttle %d/s: want 0 (none) or more", c.PerSecond)
	}
	c.Queue = c.Queue.withDefaults()
	return c, nil
}

// Router runs the exporters of one tenant as handlers on a Watermill router over
// JetStream: each exporter reads SVC_RECEIPTS as the durable consumer
// ConsumerName(exporter, tenant), with middleware for throttling, metrics, dead
// letters, retry with backoff and a per-attempt timeout, and acknowledges a receipt
// only after its collector accepted it or it was kept in SVC_DEAD.
type Router struct {
	r      *message.Router
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	stats  *RouterStats
}

// consumerAckWait is how long the broker waits for a settled message before it
// redelivers it; a subscriber marks what it holds in progress three times as often.
const consumerAckWait = 30 * time.Second

// message metadata the subscriber sets
const (
	mdTenant    = "svc_tenant"
	mdSeq       = "svc_stream_seq"
	mdDelivered = "svc_delivered"
)

// NewRouter ensures SVC_RECEIPTS, SVC_DEAD and the consumers and starts the router.
func NewRouter(ctx context.Context, nc *nats.Conn, tenant string, exps []Exporter, cfg RouterConfig, log *lineWriter, count *counters) (*Router, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if err := EnsureReceiptStream(ctx, js, cfg.Replicas); err != nil {
		return nil, err
	}
	if err := consume.EnsureDeadStream(ctx, js, cfg.Replicas); err != nil {
		return nil, err
	}
	r, err := consume.NewRouter()
	if err != nil {
		return nil, err
	}
	rt := &Router{r: r, done: make(chan struct{}), stats: &RouterStats{}}
	st := newStatusBoard(js, tenant, cfg.Replicas)
	cache := &decodeCache{readers: len(exps), m: map[string]*cachedRecord{}}
	for _, e := range exps {
		cons, err := durableConsumer(ctx, js, tenant, e.Name(), cfg)
		if err != nil {
			return nil, err
		}
		sub := &subscriber{consumer: cons, q: cfg.Queue, ackWait: 10 * time.Minute, lanes: cfg.Lanes, cache: cache}
		b := newBatcher(e, cfg.Queue.Batch, cfg.Linger, cfg.Timeout)
		consume.Handle(r, e.Name()+"-"+tenant, ReceiptsSubject(tenant), sub, exportHandler(b), consume.Chain{
			PerSecond:   cfg.PerSecond,
			Measure:     measure(rt.stats, e.Name(), count),
			DeadLetters: deadLetterMiddleware(js, e.Name(), tenant, log, st),
			Retry: consume.Retry{Retries: cfg.Retries, MinBackoff: cfg.Queue.MinBackoff, MaxBackoff: cfg.Queue.MaxBackoff,
				Permanent: ErrPermanent, Failed: func(err error) { st.failed(e.Name(), err) }},
			Timeout: cfg.Timeout,
		})
	}
	rt.ctx, rt.cancel = context.WithCancel(context.Background())
	go func() {
		defer close(rt.done)
		_ = r.Run(rt.ctx)
	}()
	select {
	case <-r.Running():
	case <-rt.done:
		return nil, errors.New("the export router stopped at start")
	case <-ctx.Done():
		rt.Close()
		return nil, ctx.Err()
	}
	return rt, nil
}

// Stats reports what the router did.
func (rt *Router) Stats() *RouterStats { return rt.stats }

// Close stops the handlers; messages in hand and not acknowledged are redelivered to
// the next consumer of the same name.
func (rt *Router) Close() error {
	rt.cancel()
	err := rt.r.Close()
	<-rt.done
	return err
}

// exportHandler delivers one receipt through b. A message that does not hold a
// readable bundle, or a record the collector refuses for good, is a permanent error.
func exportHandler(bt *batcher) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		r, ok := msg.Context().Value(recordKey{}).(*Record)
		if !ok {
			var err error
			if r, err = decodeRecord(msg.Payload); err != nil {
				return err
			}
		}
		return bt.send(msg.Context(), r)
	}
}

// recordKey carries the record the subscriber decoded in a message's context.
type recordKey struct{}

// decodeRecord reads a stored bundle; what does not decode is a permanent error.
func decodeRecord(data []byte) (*Record, error) {
	var b receipt.Bundle
	if err := json.Unmarshal(data, &b); err != nil {
		return nil, fmt.Errorf("%w: unreadable message: %v", ErrPermanent, err)
	}
	r, err := FromBundle(&b)
	if err != nil {
		return nil, fmt.Errorf("%w: unreadable bundle: %v", ErrPermanent, err)
	}
	return r, nil
}

// durableConsumer makes (or finds) the durable consumer of exporter for tenant.
func durableConsumer(ctx context.Context, js jetstream.JetStream, tenant, exporter string, cfg RouterConfig) (jetstream.Consumer, error) {
	c, err := js.CreateOrUpdateConsumer(ctx, ReceiptsStream, jetstream.ConsumerConfig{
		Durable:       ConsumerName(exporter, tenant),
		Description:   "exports " + tenant + "'s receipts to " + exporter,
		FilterSubject: ReceiptsSubject(tenant),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       consumerAckWait,
		MaxDeliver:    -1,
		MaxAckPending: 4 * cfg.Lanes * cfg.Queue.Batch,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", ConsumerName(exporter, tenant), err)
	}
	return c, nil
}

// RouterStats counts deliveries across a router's exporters, by exporter name.
type RouterStats = consume.Stats[HandlerStats]

// HandlerStats are one exporter's counts.
type HandlerStats struct {
	Delivered uint64        // accepted by the collector
	Dead      uint64        // kept in SVC_DEAD
	Failed    uint64        // attempts that failed (each retry counts)
	Busy      time.Duration // time spent in the handler
}

// measure counts each delivery's outcome and the time spent in it, by exporter:
// accepted, kept as a dead letter (the dead-letter middleware below it marks the
// message and returns nil), or failed (the message goes back to the stream).
func measure(stats *RouterStats, exporter string, count *counters) message.HandlerMiddleware {
	return consume.Measure(func(msg *message.Message, took time.Duration, err error) {
		dead := msg.Metadata.Get(mdDead) != ""
		stats.Add(exporter, func(s *HandlerStats) {
			s.Busy += took
			switch {
			case err != nil:
				s.Failed++
			case dead:
				s.Dead++
			default:
				s.Delivered++
			}
		})
		if count != nil {
			switch {
			case err == nil && dead:
				count.dropped.Add(1)
			case err == nil:
				count.exported.Add(1)
			}
		}
	})
}

// decodeCache lets the exporters of one router decode each stored receipt once: the
// first to read a sequence decodes it, the others take the same (read-only) record,
// and the entry goes once every exporter took it. It holds at most 4096 entries; past
// that (an exporter far behind the others) each decodes for itself.
type decodeCache struct {
	readers int
	mu      sync.Mutex
	m       map[string]*cachedRecord
}

type cachedRecord struct {
	rec   *Record
	taken int
}

func (c *decodeCache) get(seq string, data []byte) (*Record, error) {
	if c == nil || c.readers < 2 || seq == "" {
		return decodeRecord(data)
	}
	c.mu.Lock()
	if e, ok := c.m[seq]; ok {
		e.taken++
		if e.taken >= c.readers {
			delete(c.m, seq)
		}
		c.mu.Unlock()
		return e.rec, nil
	}
	c.mu.Unlock()
	r, err := decodeRecord(data)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.m) < 4096 {
		c.m[seq] = &cachedRecord{rec: r, taken: 1}
	}
	c.mu.Unlock()
	return r, nil
}
