package exporters

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/client"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/pipeline/consume"
	"svc.dev/svc/receipt"
)

// The receipt stream: every receipt an issuer connected to the pipeline writes is
// published here, and the exporters read it as durable consumers.
const (
	ReceiptsStream = "SVC_RECEIPTS"
	ReceiptsPrefix = "svc.receipts."
	// HeaderReceiptID names the receipt a message carries (also its Nats-Msg-Id, so a
	// publisher's retry within the duplicate window is stored once); its dead letter
	// keeps it (the header is the consumer kit's).
	HeaderReceiptID = consume.HeaderReceiptID
)

// ReceiptsSubject is the subject tenant's receipts are published on.
func ReceiptsSubject(tenant string) string { return ReceiptsPrefix + tenant }

// ConsumerName is the durable consumer of exporter for tenant. Every process that
// exports tenant's receipts to the same collector shares it, so each receipt goes to
// one of them.
func ConsumerName(exporter, tenant string) string { return "svc-export-" + exporter + "-" + tenant }

// ReceiptStreamConfig is SVC_RECEIPTS: file storage (it is what a collector outage
// is waited out from), receipts kept seven days, a ten-minute duplicate window keyed
// by receipt id. Each message is a receipt bundle as JSON.
func ReceiptStreamConfig(replicas int) jetstream.StreamConfig {
	sc := pipeline.RecordStream(ReceiptsStream, ReceiptsPrefix, "receipt bundles, one message per receipt, for the exporters", replicas)
	sc.MaxAge = 7 * 24 * time.Hour
	sc.Duplicates = 10 * time.Minute
	sc.Discard = jetstream.DiscardOld
	sc.MaxMsgSize = receipt.MaxBundleSize
	return sc
}

// EnsureReceiptStream creates or updates SVC_RECEIPTS; safe to call from every
// process at start.
func EnsureReceiptStream(ctx context.Context, js jetstream.JetStream, replicas int) error {
	return pipeline.EnsureStream(ctx, js, ReceiptStreamConfig(replicas))
}

// StreamOptions configure a StreamSink.
type StreamOptions struct {
	Stderr   io.Writer
	Queue    QueueConfig // Size bounds the publish queue; MinBackoff and MaxBackoff the retries
	Replicas int
	// Router tunes the consumers (lanes, retries, timeout, throttle).
	Router RouterConfig
}

// StreamSink is the Sink of an issuer connected to the pipeline. Export queues the
// bundle in memory (bounded, never waiting); one goroutine publishes it to
// svc.receipts.<tenant> and retries while the broker does not answer. Each exporter
// runs on a Router as the durable consumer ConsumerName(exporter, tenant) and
// acknowledges a message only after the collector accepted it (or refused it for good,
// and it was kept in SVC_DEAD), so a collector outage delays delivery and loses
// nothing: the messages wait in the stream, also across a restart. With no exporters
// it only publishes (consumers run elsewhere).
type StreamSink struct {
	js     jetstream.JetStream
	tenant string
	cfg    QueueConfig
	log    *lineWriter
	count  counters

	mu     sync.RWMutex
	closed bool
	ch     chan *receipt.Bundle
	pubCtx context.Context
	pubEnd context.CancelFunc
	pubWG  sync.WaitGroup

	router *Router // nil without exporters
	events *Queue  // tool definition changes (EventSink), in memory; nil without exporters
}

// NewStreamSink ensures the stream and the consumers and starts them. tenant ""
// means client.DefaultTenant.
func NewStreamSink(ctx context.Context, nc *nats.Conn, tenant string, exps []Exporter, opts StreamOptions) (*StreamSink, error) {
	if tenant == "" {
		tenant = client.DefaultTenant
	}
	if !client.ValidTenant(tenant) {
		return nil, fmt.Errorf("tenant %q: use 1 to 63 of a-z, 0-9, - and _", tenant)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if err := EnsureReceiptStream(ctx, js, opts.Replicas); err != nil {
		return nil, err
	}
	cfg := opts.Queue.withDefaults()
	s := &StreamSink{js: js, tenant: tenant, cfg: cfg, log: newLineWriter(opts.Stderr), ch: make(chan *receipt.Bundle, cfg.Size)}
	s.pubCtx, s.pubEnd = context.WithCancel(context.Background())
	if len(exps) > 0 {
		rc := opts.Router
		rc.Queue = cfg
		rc.Replicas = opts.Replicas
		if s.router, err = NewRouter(ctx, nc, tenant, exps, rc, s.log, &s.count); err != nil {
			return nil, err
		}
		s.events = NewQueue(exps, cfg, opts.Stderr)
	}
	s.pubWG.Add(1)
	go s.publishLoop()
	return s, nil
}

// Export queues b for publishing without waiting.
func (s *StreamSink) Export(_ context.Context, b *receipt.Bundle) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		s.drop("publish", receiptIDOf(b), "the exporter is closed")
		return
	}
	select {
	case s.ch <- b:
	default:
		s.drop("publish", receiptIDOf(b), "publish queue full")
	}
}

// ExportToolChange queues a tool definition change for every exporter in memory
// (EventSink): it is not a receipt, and the log holds its evidence.
func (s *StreamSink) ExportToolChange(ctx context.Context, c ToolChange) {
	if s.events != nil {
		s.events.ExportToolChange(ctx, c)
	}
}

// HandlerStats are the router's counts by exporter (delivered, kept as dead letters,
// failed attempts, time in the handler); empty without exporters.
func (s *StreamSink) HandlerStats() map[string]HandlerStats {
	if s.router == nil {
		return map[string]HandlerStats{}
	}
	return s.router.Stats().Snapshot()
}

// Stats counts exports: Exported counts collector acceptances by this process's
// consumers; Dropped counts receipts never published plus records a collector refused
// for good.
func (s *StreamSink) Stats() Stats { return s.count.stats() }

// Close publishes what is queued until ctx ends (dropping the rest with a line each),
// then stops the consumers; messages they had not acknowledged are redelivered to the
// next consumer of the same name.
func (s *StreamSink) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.ch)
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.pubWG.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		s.pubEnd()
		<-done
		err = ctx.Err()
	}
	if s.router != nil {
		if rerr := s.router.Close(); rerr != nil && err == nil {
			err = rerr
		}
	}
	if s.events != nil {
		if qerr := s.events.Close(ctx); qerr != nil && err == nil {
			err = qerr
		}
	}
	return err
}

func (s *StreamSink) drop(what, id, why string) {
	s.count.dropped.Add(1)
	s.log.printf("svc: export of receipt %s dropped (%s to %s): %s", id, what, ReceiptsStream, why)
}

// publishLoop publishes in batches: every message of a batch is sent asynchronously,
// then each acknowledgement is awaited; one that failed is retried on its own with
// backoff until MaxAge.
func (s *StreamSink) publishLoop() {
	defer s.pubWG.Done()
	for b := range s.ch {
		batch := []*receipt.Bundle{b}
	fill:
		for len(batch) < s.cfg.Batch {
			select {
			case b, ok := <-s.ch:
				if !ok {
					break fill
				}
				batch = append(batch, b)
			default:
				break fill
			}
		}
		type pending struct {
			id  string
			m   *nats.Msg
			ack jetstream.PubAckFuture
		}
		var sent []pending
		for _, b := range batch {
			if s.pubCtx.Err() != nil {
				s.drop("publish", receiptIDOf(b), "the exporter was closed before the broker stored it")
				continue
			}
			id, m, err := s.message(b)
			if err != nil {
				s.drop("publish", id, err.Error())
				continue
			}
			ack, err := s.js.PublishMsgAsync(m, jetstream.WithMsgID(id), jetstream.WithExpectStream(ReceiptsStream))
			if err != nil {
				ack = nil // retried below
			}
			sent = append(sent, pending{id, m, ack})
		}
		for _, p := range sent {
			if p.ack != nil {
				t := time.NewTimer(5 * time.Second)
				select {
				case <-p.ack.Ok():
					t.Stop()
					continue
				case <-p.ack.Err():
				case <-t.C:
				case <-s.pubCtx.Done():
				}
				t.Stop()
			}
			s.publishOne(p.id, p.m)
		}
	}
}

func (s *StreamSink) message(b *receipt.Bundle) (string, *nats.Msg, error) {
	r, err := FromBundle(b)
	if err != nil {
		return "(unreadable bundle)", nil, err
	}
	data, err := json.Marshal(b)
	if err != nil {
		return r.ReceiptID, nil, err
	}
	m := nats.NewMsg(ReceiptsSubject(s.tenant))
	m.Header.Set(HeaderReceiptID, r.ReceiptID)
	m.Data = data
	return r.ReceiptID, m, nil
}

// publishOne publishes synchronously with retries; the receipt id as Nats-Msg-Id makes
// a retry of a message the broker did store harmless.
func (s *StreamSink) publishOne(id string, m *nats.Msg) {
	start := time.Now()
	for try := 0; ; try++ {
		pctx, cancel := context.WithTimeout(s.pubCtx, 5*time.Second)
		_, err := s.js.PublishMsg(pctx, m, jetstream.WithMsgID(id), jetstream.WithExpectStream(ReceiptsStream))
		cancel()
		if err == nil {
			return
		}
		var ae *jetstream.APIError
		refused := errors.Is(err, nats.ErrMaxPayload) || errors.As(err, &ae) && ae.Code >= 400 && ae.Code < 500
		if s.pubCtx.Err() != nil || refused || time.Since(start) >= s.cfg.MaxAge {
			s.drop("publish", id, err.Error())
			return
		}
		sleepCtx(s.pubCtx, s.cfg.backoff(try))
	}
}
