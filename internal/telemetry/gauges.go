package telemetry

import (
	"context"
	"errors"
	"slices"
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
	seen      time.Time // when this process applied it
	idleLag   time.Duration
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
	appendPrefix            = "svc.append."
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
	p.js, p.subject, p.applied, p.appliedAt, p.seen = js, subject, seq, stored, time.Now()
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
	g := gauges{cpAge: cpAge, cpLag: cpLag, wLag: wLag, wAge: wAge, pLag: pLag, pPos: pPos, seqPending: seqPending, backlog: backlog}
	_, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		t.observe(ctx, o, g)
		return nil
	}, cpAge, cpLag, wLag, wAge, pLag, pPos, seqPending, backlog)
	return err
}

// gauges are the observable instruments registerGauges made.
type gauges struct {
	cpAge, wAge, pLag                      metric.Float64ObservableGauge
	cpLag, wLag, pPos, seqPending, backlog metric.Int64ObservableGauge
}

// ActiveWindow bounds the gauges' label sets by activity: a tenant is reported under
// its own label while its latest checkpoint is younger than this or leaves wait for
// one, and a per-tenant projection while it applied a batch within it (or, for the
// sequencer's backlog, while requests wait). The others are summed up or maximised
// under the label value Idle, so a scrape's size follows the active tenants, not
// all of them.
const ActiveWindow = 15 * time.Minute

// activeWindow is ActiveWindow (tests shorten it).
var activeWindow = ActiveWindow

// Idle is the label value ("tenant" or "consumer") of the idle tenants' aggregate.
const Idle = "(idle)"

// idleChecks bounds the broker calls a scrape spends on idle projections' lag; the
// others keep the lag of their last check, in turn.
const idleChecks = 32

// observe reports every gauge from the state and the broker.
func (t *Telemetry) observe(ctx context.Context, o metric.Observer, g gauges) {
	now := time.Now()
	t.state.mu.Lock()
	active := map[string]bool{}
	var idleAge float64
	for tenant, c := range t.state.checkpoints {
		age := now.Sub(c.signedAt)
		if age < activeWindow || (c.tree != nil && c.tree() > c.size) {
			active[tenant] = true
			set := metric.WithAttributeSet(attrs("tenant", tenant))
			o.ObserveFloat64(g.cpAge, age.Seconds(), set)
			if c.tree != nil {
				o.ObserveInt64(g.cpLag, int64(c.tree()-min(c.size, c.tree())), set)
			}
		} else {
			idleAge = max(idleAge, age.Seconds())
		}
	}
	if len(t.state.checkpoints) > len(active) {
		set := metric.WithAttributeSet(attrs("tenant", Idle))
		o.ObserveFloat64(g.cpAge, idleAge, set)
		o.ObserveInt64(g.cpLag, 0, set)
	}
	t.observeWitnesses(o, g, now, active)
	ps := make(map[string]*projectionState, len(t.state.projections))
	for k, v := range t.state.projections {
		ps[k] = v
	}
	brokers := t.state.brokers
	t.state.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	t.observeProjections(ctx, o, g, now, ps)
	for _, b := range brokers {
		var idle int64
		seen := map[string]bool{}
		observeConsumers(ctx, b.js, appendStream, func(name string, n uint64) {
			if tenant, ok := strings.CutPrefix(name, sequencerConsumerPrefix); ok {
				seen[tenant] = true
				if n > 0 || active[tenant] {
					o.ObserveInt64(g.seqPending, int64(n), metric.WithAttributeSet(attrs("tenant", tenant)))
				} else {
					idle++
				}
			}
		})
		// The hosted log's tenants share their process's consumers (no seq-<tenant>):
		// a work queue keeps a request until it is answered and acknowledged, so the
		// requests on a tenant's subject are its backlog.
		waiting := appendWaiting(ctx, b.js)
		for tenant := range active {
			if !seen[tenant] {
				o.ObserveInt64(g.seqPending, int64(waiting[tenant]), metric.WithAttributeSet(attrs("tenant", tenant)))
			}
		}
		for tenant, n := range waiting {
			if !seen[tenant] && !active[tenant] {
				o.ObserveInt64(g.seqPending, int64(n), metric.WithAttributeSet(attrs("tenant", tenant)))
			}
		}
		if idle > 0 {
			o.ObserveInt64(g.seqPending, 0, metric.WithAttributeSet(attrs("tenant", Idle)))
		}
		observeConsumers(ctx, b.js, receiptsStream, func(name string, n uint64) {
			rest, ok := strings.CutPrefix(name, exportConsumerPrefix)
			if exporter, tenant, ok2 := strings.Cut(rest, "-"); ok && ok2 {
				o.ObserveInt64(g.backlog, int64(n), metric.WithAttributeSet(attrs("exporter", exporter, "tenant", tenant)))
			}
		})
	}
}

// observeWitnesses reports each active tenant's witness gauges, and per witness the
// worst of the idle tenants'; t.state.mu is held.
func (t *Telemetry) observeWitnesses(o metric.Observer, g gauges, now time.Time, active map[string]bool) {
	type worst struct {
		age  float64
		lag  int64
		seen bool
	}
	idle := map[string]*worst{}
	for k, w := range t.state.witnesses {
		age := now.Sub(w.at).Seconds()
		size := t.state.checkpoints[k[0]].size
		lag := int64(size - min(w.size, size))
		if active[k[0]] {
			set := metric.WithAttributeSet(attrs("tenant", k[0], "witness", k[1]))
			o.ObserveFloat64(g.wAge, age, set)
			o.ObserveInt64(g.wLag, lag, set)
			continue
		}
		if idle[k[1]] == nil {
			idle[k[1]] = &worst{}
		}
		x := idle[k[1]]
		x.age, x.lag, x.seen = max(x.age, age), max(x.lag, lag), true
	}
	for witness, x := range idle {
		set := metric.WithAttributeSet(attrs("tenant", Idle, "witness", witness))
		o.ObserveFloat64(g.wAge, x.age, set)
		o.ObserveInt64(g.wLag, x.lag, set)
	}
}

// observeProjections reports the projections that follow all tenants (subject ending
// in ">") and the per-tenant ones active within ActiveWindow by name; the idle
// per-tenant ones as one series (consumer Idle) whose lag is the largest last
// checked, idleChecks of them checked per scrape in turn.
func (t *Telemetry) observeProjections(ctx context.Context, o metric.Observer, g gauges, now time.Time, ps map[string]*projectionState) {
	var idle []string
	for name, p := range ps {
		t.state.mu.Lock()
		cp := *p
		t.state.mu.Unlock()
		if !strings.HasSuffix(cp.subject, ">") && now.Sub(cp.seen) >= activeWindow {
			idle = append(idle, name)
			continue
		}
		set := metric.WithAttributeSet(attrs("consumer", name))
		o.ObserveInt64(g.pPos, int64(cp.applied), set)
		if lag, ok := projectionLag(ctx, cp); ok {
			o.ObserveFloat64(g.pLag, lag.Seconds(), set)
		}
	}
	if len(idle) == 0 {
		return
	}
	slices.Sort(idle)
	var worst time.Duration
	for i := range idle {
		p := ps[idle[i]]
		if (i+int(t.state.idleTurn.Load()))%len(idle) < idleChecks {
			t.state.mu.Lock()
			cp := *p
			t.state.mu.Unlock()
			if lag, ok := projectionLag(ctx, cp); ok {
				t.state.mu.Lock()
				p.idleLag = lag
				t.state.mu.Unlock()
			}
		}
		t.state.mu.Lock()
		worst = max(worst, p.idleLag)
		t.state.mu.Unlock()
	}
	t.state.idleTurn.Add(idleChecks)
	o.ObserveFloat64(g.pLag, worst.Seconds(), metric.WithAttributeSet(attrs("consumer", Idle)))
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

// appendWaiting is how many requests SVC_APPEND holds per tenant (one stream-info
// request for the subjects that hold any).
func appendWaiting(ctx context.Context, js jetstream.JetStream) map[string]uint64 {
	s, err := js.Stream(ctx, appendStream)
	if err != nil {
		return nil
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(appendPrefix+"*"))
	if err != nil {
		return nil
	}
	out := make(map[string]uint64, len(info.State.Subjects))
	for subj, n := range info.State.Subjects {
		out[strings.TrimPrefix(subj, appendPrefix)] = n
	}
	return out
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
