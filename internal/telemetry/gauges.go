package telemetry

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"
)

type checkpointState struct {
	size     uint64
	signedAt time.Time
	tree     func() uint64 // the log's current size
}

type witnessState struct {
	size uint64
	at   time.Time
}

type projectionState struct {
	js        jetstream.JetStream
	subject   string
	applied   uint64    // stream sequence of the last batch applied
	appliedAt time.Time // when the broker stored it
}

// brokerSource is a broker whose consumers the gauges read.
type brokerSource struct {
	js jetstream.JetStream
}

// Names of the consumers the gauges read from the broker (kept in step with
// internal/sequencer and exporters.ConsumerName; telemetry_test checks them).
const (
	sequencerConsumerPrefix = "seq-"
	exportConsumerPrefix    = "svc-export-"
	receiptsStream          = "SVC_RECEIPTS"
	appendStream            = "SVC_APPEND"
	leavesStream            = "SVC_LEAVES"
)

// Checkpoint records that tenant's checkpoint of size was signed at signedAt (or,
// on start, loaded); tree reports the log's current size.
func (t *Telemetry) Checkpoint(tenant string, size uint64, signedAt time.Time, tree func() uint64) {
	if t == nil {
		return
	}
	t.state.mu.Lock()
	t.state.checkpoints[tenant] = checkpointState{size: size, signedAt: signedAt, tree: tree}
	t.state.mu.Unlock()
}

// Witnessed records that witness cosigned tenant's checkpoint of size.
func (t *Telemetry) Witnessed(tenant, witness string, size uint64, at time.Time) {
	if t == nil {
		return
	}
	t.state.mu.Lock()
	t.state.witnesses[[2]string{tenant, witness}] = witnessState{size: size, at: at}
	t.state.mu.Unlock()
}

// Applied records that the projection named by ctx (WithConsumer; default: the
// subject) applied the batch at stream sequence seq, stored at stored.
func (t *Telemetry) Applied(ctx context.Context, js jetstream.JetStream, subject string, seq uint64, stored time.Time) {
	if t == nil {
		return
	}
	name, _ := ctx.Value(consumerKey{}).(string)
	if name == "" {
		name = subject
	}
	t.state.mu.Lock()
	p := t.state.projections[name]
	if p == nil {
		p = &projectionState{}
		t.state.projections[name] = p
	}
	p.js, p.subject, p.applied, p.appliedAt = js, subject, seq, stored
	t.state.mu.Unlock()
}

type consumerKey struct{}

// WithConsumer names the projection that follows the stream under ctx (the label
// "consumer" of svc.projection.lag).
func WithConsumer(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, consumerKey{}, name)
}

// WatchBroker has the gauges read the sequencers' and exporters' consumers on js.
// One broker per process: a second call replaces the first.
func (t *Telemetry) WatchBroker(js jetstream.JetStream) {
	if t == nil {
		return
	}
	t.state.mu.Lock()
	t.state.brokers = []brokerSource{{js: js}}
	t.state.mu.Unlock()
}

func (t *Telemetry) registerGauges(m metric.Meter) error {
	var errs []error
	gauge := func(name, unit, desc string) metric.Float64ObservableGauge {
		g, err := m.Float64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	igauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := m.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	cpAge := gauge("svc.checkpoint.age", "s", "Seconds since the tenant's latest checkpoint was signed.")
	cpLag := igauge("svc.checkpoint.lag", "{leaf}", "Leaves appended to the tenant's log since its latest checkpoint.")
	wLag := igauge("svc.witness.lag", "{leaf}", "Leaves between the tenant's latest checkpoint and the one the C2SP witness last cosigned.")
	wAge := gauge("svc.witness.age", "s", "Seconds since the C2SP witness last cosigned a checkpoint of the tenant.")
	pLag := gauge("svc.projection.lag", "s", "How far a projection is behind: the broker's storage time of the newest batch on its subject minus that of the last batch it applied; 0 when caught up.")
	pPos := igauge("svc.projection.position", "{sequence}", "SVC_LEAVES stream sequence of the last batch the projection applied.")
	seqPending := igauge("svc.sequencer.pending", "{request}", "Append requests on SVC_APPEND waiting for the tenant's sequencer (not yet delivered, or delivered and unanswered).")
	backlog := igauge("svc.export.backlog", "{receipt}", "Receipts on SVC_RECEIPTS the exporter has not yet delivered for the tenant.")
	if err := errors.Join(errs...); err != nil {
		return err
	}
	_, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		now := time.Now()
		t.state.mu.Lock()
		cps := make(map[string]checkpointState, len(t.state.checkpoints))
		for k, v := range t.state.checkpoints {
			cps[k] = v
		}
		ws := make(map[[2]string]witnessState, len(t.state.witnesses))
		for k, v := range t.state.witnesses {
			ws[k] = v
		}
		ps := make(map[string]projectionState, len(t.state.projections))
		for k, v := range t.state.projections {
			ps[k] = *v
		}
		brokers := t.state.brokers
		t.state.mu.Unlock()
		for tenant, c := range cps {
			set := metric.WithAttributeSet(attrs("tenant", tenant))
			o.ObserveFloat64(cpAge, now.Sub(c.signedAt).Seconds(), set)
			if c.tree != nil {
				o.ObserveInt64(cpLag, int64(c.tree()-min(c.size, c.tree())), set)
			}
		}
		for k, w := range ws {
			set := metric.WithAttributeSet(attrs("tenant", k[0], "witness", k[1]))
			o.ObserveFloat64(wAge, now.Sub(w.at).Seconds(), set)
			o.ObserveInt64(wLag, int64(cps[k[0]].size-min(w.size, cps[k[0]].size)), set)
		}
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		for name, p := range ps {
			set := metric.WithAttributeSet(attrs("consumer", name))
			o.ObserveInt64(pPos, int64(p.applied), set)
			if lag, ok := projectionLag(ctx, p); ok {
				o.ObserveFloat64(pLag, lag.Seconds(), set)
			}
		}
		for _, b := range brokers {
			observeConsumers(ctx, b.js, appendStream, func(name string, n uint64) {
				if tenant, ok := strings.CutPrefix(name, sequencerConsumerPrefix); ok {
					o.ObserveInt64(seqPending, int64(n), metric.WithAttributeSet(attrs("tenant", tenant)))
				}
			})
			observeConsumers(ctx, b.js, receiptsStream, func(name string, n uint64) {
				rest, ok := strings.CutPrefix(name, exportConsumerPrefix)
				if exporter, tenant, ok2 := strings.Cut(rest, "-"); ok && ok2 {
					o.ObserveInt64(backlog, int64(n), metric.WithAttributeSet(attrs("exporter", exporter, "tenant", tenant)))
				}
			})
		}
		return nil
	}, cpAge, cpLag, wLag, wAge, pLag, pPos, seqPending, backlog)
	return err
}

// projectionLag compares the newest batch on p's subject with the last one applied.
func projectionLag(ctx context.Context, p projectionState) (time.Duration, bool) {
	stream, err := p.js.Stream(ctx, leavesStream)
	if err != nil {
		return 0, false
	}
	var lastSeq uint64
	var lastTime time.Time
	if strings.HasSuffix(p.subject, ">") {
		info, err := stream.Info(ctx)
		if err != nil {
			return 0, false
		}
		lastSeq, lastTime = info.State.LastSeq, info.State.LastTime
	} else {
		m, err := stream.GetLastMsgForSubject(ctx, p.subject)
		if err != nil {
			return 0, false
		}
		lastSeq, lastTime = m.Sequence, m.Time
	}
	if lastSeq <= p.applied {
		return 0, true
	}
	return max(lastTime.Sub(p.appliedAt), 0), true
}

// observeConsumers reports each consumer of stream with what it has yet to finish
// (pending plus delivered-unacknowledged). A missing stream reports nothing.
func observeConsumers(ctx context.Context, js jetstream.JetStream, stream string, f func(name string, n uint64)) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return
	}
	l := s.ListConsumers(ctx)
	for info := range l.Info() {
		f(info.Name, info.NumPending+uint64(info.NumAckPending))
	}
}

// ForgetTenant stops reporting tenant's checkpoint and witness gauges: this process no
// longer runs the tenant's checkpointer (its sequencer moved to another process), so
// the last values would go stale here while the new holder reports the live ones.
func (t *Telemetry) ForgetTenant(tenant string) {
	if t == nil {
		return
	}
	t.state.mu.Lock()
	delete(t.state.checkpoints, tenant)
	for k := range t.state.witnesses {
		if k[0] == tenant {
			delete(t.state.witnesses, k)
		}
	}
	t.state.mu.Unlock()
}

// ForgetProjection stops reporting the projection named name (WithConsumer, or its
// subject): it stopped following the stream (a hosted replica tree whose process took
// the tenant's sequencer over).
func (t *Telemetry) ForgetProjection(name string) {
	if t == nil {
		return
	}
	t.state.mu.Lock()
	delete(t.state.projections, name)
	t.state.mu.Unlock()
}
