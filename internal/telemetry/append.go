package telemetry

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"svc.dev/svc/pipeline"
)

// Refusal reasons (the label "reason" of svc.append.refusals).
const (
	ReasonQuota        = "quota"        // the tenant's monthly allowance is used up (429)
	ReasonRateLimited  = "rate_limited" // the sequencer's per-tenant rate (429)
	ReasonTokenRate    = "token_rate"   // the HTTP front's per-token rate (429)
	ReasonDisabled     = "disabled"     // the tenant is disabled (403)
	ReasonInvalid      = "invalid"      // a malformed append (400)
	ReasonTooLarge     = "too_large"    // over the size limit (413)
	ReasonUnauthorized = "unauthorized" // missing or wrong token (401)
	ReasonUnavailable  = "unavailable"  // no answer from the sequencer, broker or signer (503)
)

// ReasonOf names the refusal err (a pipeline refusal sentinel) as a reason label.
func ReasonOf(err error) string {
	switch {
	case errors.Is(err, pipeline.ErrQuota):
		return ReasonQuota
	case errors.Is(err, pipeline.ErrRateLimited):
		return ReasonRateLimited
	case errors.Is(err, pipeline.ErrDisabled):
		return ReasonDisabled
	case errors.Is(err, pipeline.ErrInvalid):
		return ReasonInvalid
	case errors.Is(err, pipeline.ErrTooLarge):
		return ReasonTooLarge
	default:
		return ReasonUnavailable
	}
}

// Refused counts one refused append.
func (t *Telemetry) Refused(reason string) {
	if t == nil {
		return
	}
	o, ok := t.reasons.Load(reason)
	if !ok {
		o, _ = t.reasons.LoadOrStore(reason, metric.WithAttributeSet(attrs("reason", reason)))
	}
	t.inst.refusals.Add(bg, 1, o.(metric.AddOption))
}

// BrokerRetry counts one failure of a broker-facing loop (what: the subject it
// follows, or "sequencer <tenant>") that retries instead of stopping the process.
func (t *Telemetry) BrokerRetry(what string) {
	if t == nil {
		return
	}
	t.inst.brokerRetries.Add(bg, 1, metric.WithAttributeSet(attrs("loop", what)))
}

// ToolDefinitionChanged counts a tool whose definition the upstream changed
// (svc.gateway.tool_definitions.changes): svc gateway's gateway.Options.OnToolChanged.
func (t *Telemetry) ToolDefinitionChanged(upstream, _ string) {
	if t == nil {
		return
	}
	t.inst.toolChanges.Add(bg, 1, metric.WithAttributeSet(attrs("upstream", upstream)))
}

// LeaseLost counts a tenant whose sequencer this process lost (svc.sequencer.leases.lost).
func (t *Telemetry) LeaseLost(tenant string) {
	if t == nil {
		return
	}
	t.inst.leasesLost.Add(bg, 1, metric.WithAttributeSet(attrs("tenant", tenant)))
}

// StartRefused counts a tenant's start that the broker or the disk refused; no tenant
// label, so that many refused tenants do not make many series (/health names them).
func (t *Telemetry) StartRefused() {
	if t == nil {
		return
	}
	t.inst.startRefused.Add(bg, 1)
}

// SequencerHalted counts a tenant whose sequencer stopped appending because the log
// of record is shorter than its tree (svc.sequencer.halted).
func (t *Telemetry) SequencerHalted(tenant string) {
	if t == nil {
		return
	}
	t.inst.halted.Add(bg, 1, metric.WithAttributeSet(attrs("tenant", tenant)))
}

// Publish starts the span "broker publish" for an append sent to tenant's
// sequencer, when ctx carries a sampled span; end it with the outcome.
func (t *Telemetry) Publish(ctx context.Context, tenant string) (context.Context, func(error)) {
	if t == nil || t.tracers == nil || !trace.SpanContextFromContext(ctx).IsSampled() {
		return ctx, func(error) {}
	}
	ctx, span := t.tracer.Start(ctx, "broker publish", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", pipeline.AppendSubject(tenant)), attribute.String("svc.tenant", tenant)))
	return ctx, func(err error) {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// InjectNATS puts ctx's trace context on an append request's headers
// (pipeline.ClientConfig.Header); nothing without a sampled span or on a nil t.
func (t *Telemetry) InjectNATS(ctx context.Context, h nats.Header) {
	if t == nil || t.tracers == nil || !trace.SpanContextFromContext(ctx).IsSampled() {
		return
	}
	t.prop.Inject(ctx, natsCarrier(h))
}

// natsCarrier carries the W3C headers on a NATS message under their exact names.
type natsCarrier nats.Header

func (c natsCarrier) Get(k string) string {
	if v := c[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c natsCarrier) Set(k, v string) { c[k] = []string{v} }
func (c natsCarrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// BatchObs observes one sequencer batch from its start; End it once.
type BatchObs struct {
	t        *Telemetry
	start    time.Time
	msgs     []jetstream.Msg
	requests int
	spans    []trace.Span
}

// Batch starts observing a batch of the sequencer of tenant: requests append requests
// (a bundle message holds several) in msgs, and a "sequencer commit" span for every
// message that carries a sampled trace context.
func (t *Telemetry) Batch(tenant string, msgs []jetstream.Msg, requests int) BatchObs {
	if t == nil {
		return BatchObs{}
	}
	b := BatchObs{t: t, start: time.Now(), msgs: msgs, requests: requests}
	if t.tracers != nil {
		for _, m := range msgs {
			h := m.Headers()
			if h.Get("traceparent") == "" {
				continue
			}
			ctx := t.prop.Extract(bg, natsCarrier(h))
			if !trace.SpanContextFromContext(ctx).IsSampled() {
				continue
			}
			_, span := t.tracer.Start(ctx, "sequencer commit", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(b.start),
				trace.WithAttributes(attribute.String("svc.tenant", tenant), attribute.Int("svc.batch.requests", len(msgs))))
			b.spans = append(b.spans, span)
		}
	}
	return b
}

// End records the batch: its size, its duration, the leaves it committed and how
// long its oldest request waited. A batch that failed (err) counts no leaves: its
// requests were answered 503 and the sequencer stops.
func (b BatchObs) End(leaves int, err error) {
	t := b.t
	if t == nil {
		return
	}
	now := time.Now()
	t.inst.batchSize.Record(bg, int64(b.requests))
	t.inst.commitDuration.Record(bg, now.Sub(b.start).Seconds())
	if err != nil {
		leaves = 0
	}
	if leaves > 0 {
		t.inst.leaves.Add(bg, int64(leaves))
	}
	if len(b.msgs) > 0 {
		if md, err := b.msgs[0].Metadata(); err == nil {
			t.inst.wait.Record(bg, max(now.Sub(md.Timestamp), 0).Seconds())
		}
	}
	for _, s := range b.spans {
		s.SetAttributes(attribute.Int("svc.batch.leaves", leaves))
		if err != nil {
			s.SetStatus(codes.Error, err.Error())
		}
		s.End(trace.WithTimestamp(now))
	}
}
