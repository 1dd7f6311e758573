package logservice

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/telemetry"
	"svc.dev/svc/pipeline"
)

// The append feed is the process's consumer on SVC_APPEND
// (docs/design/log-service.md, "One consumer per process"): its filter subjects are
// the tenants whose lease this process holds, and it hands each request to that
// tenant's sequencer, which acknowledges it once its batch is committed. The number of
// broker consumers does not depend on the number of tenants: one per process while it
// holds up to laneTenants tenants, one more per laneTenants active tenants beyond
// (the broker checks a consumer's filters pairwise at every update, so one consumer
// with a thousand filters cost half a second of broker CPU per update).
//
// SVC_APPEND is a work queue, so the broker refuses two consumers whose filters
// overlap: a tenant's requests reach only the process that holds its lease. A process
// that wins a lease its previous holder still has in its filter (the holder died, or
// lost the lease) takes the tenant out of that filter, after checking that the lease
// is its own.
//
// A consumer whose filter gains a subject does not go back for that subject's
// requests it already passed over, and redelivers the requests it had pending
// whatever its filter: so every change of the filter is followed by a reset of the
// consumer to the start of the stream. The requests still in the stream (a work queue
// holds only the unacknowledged) are then delivered again to the tenants in the
// filter: the ones a sequencer is working on come twice, and its idempotency window
// answers the second with the first's index.

// feedInbox is how many requests wait in one tenant's sequencer's inbox; the rest
// wait, in order, in its route's overflow.
const feedInbox = 1024

// laneTenants is how many tenants one consumer (a lane) of the feed carries at most.
const laneTenants = 64

// feedPlaceholder is the filter of a consumer whose process holds no tenant: a work
// queue refuses an unfiltered consumer beside others. It has one token more than any
// tenant's subject, so it never overlaps one.
func feedPlaceholder(name string) string { return pipeline.AppendPrefix + "_none." + name }

// appendFeed is the process's consumers on SVC_APPEND (its lanes) and the routes of
// its tenants.
type appendFeed struct {
	js   jetstream.JetStream
	name string
	log  *slog.Logger
	tel  *telemetry.Telemetry                          // counts the broker retries; nil: none
	owns func(ctx context.Context, tenant string) bool // this process holds tenant's lease
	lost func(tenant string)                           // another process holds tenant's lease

	mu      sync.Mutex
	stream  jetstream.Stream  // SVC_APPEND once looked up (appendStream)
	routes  map[string]*route // tenant → its sequencer's requests
	laneOf  map[string]int    // tenant → its lane
	lanes   []*lane
	gen     uint64        // changes of routes asked for
	applied uint64        // the last change the consumers reflect
	done    chan struct{} // closed (and replaced) when applied moves
	kick    chan struct{}

	unrouted atomic.Int64 // requests for a tenant no longer routed here (left to the reset)

	stopped chan struct{} // closed when run has returned, its lanes deleted
}

// lane is one consumer of the feed.
type lane struct {
	name    string
	tenants int  // routed to it
	dirty   bool // its filter changed since the broker was told
	cc      jetstream.ConsumeContext
}

// feedName is this data directory's consumer name, kept in <data>/append-consumer so
// that a restarted process takes its predecessor's consumer back instead of adding one.
func feedName(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "append-consumer")
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	var r [8]byte
	_, _ = rand.Read(r[:])
	name := "svc-append-" + hex.EncodeToString(r[:])
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return "", err
	}
	return name, os.WriteFile(path, []byte(name+"\n"), 0o644)
}

func newAppendFeed(js jetstream.JetStream, name string, log *slog.Logger, tel *telemetry.Telemetry) *appendFeed {
	return &appendFeed{js: js, name: name, log: log, tel: tel, routes: map[string]*route{}, laneOf: map[string]int{},
		done: make(chan struct{}), kick: make(chan struct{}, 1), stopped: make(chan struct{})}
}

// add routes tenant's requests to the channel it returns; the consumer's filter
// gains the tenant shortly after (wait for it with settle).
func (f *appendFeed) add(tenant string) (<-chan jetstream.Msg, uint64) {
	r := &route{ch: make(chan jetstream.Msg, feedInbox), stop: make(chan struct{})}
	return r.ch, f.change(func() {
		f.unroute(tenant) // a route left behind, if any
		f.routes[tenant] = r
		best := -1
		for i, l := range f.lanes {
			if l.tenants < laneTenants && (best < 0 || l.tenants < f.lanes[best].tenants) {
				best = i
			}
		}
		if best < 0 {
			best = len(f.lanes)
			f.lanes = append(f.lanes, &lane{name: fmt.Sprintf("%s-%d", f.name, best)})
		}
		f.laneOf[tenant] = best
		f.lanes[best].tenants++
		f.lanes[best].dirty = true
	})
}

// unroute forgets tenant's route; f.mu is held.
func (f *appendFeed) unroute(tenant string) {
	if i, ok := f.laneOf[tenant]; ok {
		f.lanes[i].tenants--
		f.lanes[i].dirty = true
		delete(f.laneOf, tenant)
	}
	if r := f.routes[tenant]; r != nil {
		close(r.stop)
		delete(f.routes, tenant)
	}
}

// remove stops routing tenant's requests here and waits (at most until ctx ends)
// until the consumer's filter no longer holds it: then its requests not acknowledged
// are the next holder's. Call it before the tenant's lease is released.
func (f *appendFeed) remove(ctx context.Context, tenant string) error {
	f.mu.Lock()
	_, ok := f.routes[tenant]
	f.mu.Unlock()
	if !ok {
		return nil
	}
	return f.settle(ctx, f.change(func() { f.unroute(tenant) }))
}

// change applies mutate to the routes and asks for the consumer to follow; it
// returns the change's number for settle.
func (f *appendFeed) change(mutate func()) uint64 {
	f.mu.Lock()
	mutate()
	f.gen++
	gen := f.gen
	f.mu.Unlock()
	select {
	case f.kick <- struct{}{}:
	default:
	}
	return gen
}

// settle waits until the consumer reflects change gen.
func (f *appendFeed) settle(ctx context.Context, gen uint64) error {
	for {
		f.mu.Lock()
		if f.applied >= gen {
			f.mu.Unlock()
			return nil
		}
		done := f.done
		f.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// dispatch hands a request to its tenant's sequencer.
func (f *appendFeed) dispatch(m jetstream.Msg) {
	tenant := strings.TrimPrefix(m.Subject(), pipeline.AppendPrefix)
	f.mu.Lock()
	r := f.routes[tenant]
	f.mu.Unlock()
	if r == nil {
		// Its sequencer stopped here: the reset that follows its removal from the
		// filter leaves the request to the next holder.
		f.unrouted.Add(1)
		return
	}
	r.put(m)
}

// route is one tenant's way to its sequencer: its inbox, and beyond it, in order, the
// requests that did not fit (a tenant's requests keep their order, as an import
// needs, and a tenant whose sequencer is behind never holds up its lane's others).
// The lane's MaxAckPending bounds what waits.
type route struct {
	ch   chan jetstream.Msg
	stop chan struct{} // closed when the route goes

	mu      sync.Mutex
	over    []jetstream.Msg
	pumping bool
}

// put queues m behind the tenant's earlier requests.
func (r *route) put(m jetstream.Msg) { r.putUpTo(m, -1) }

// putUpTo queues m as put does unless max requests already wait in the overflow
// (max < 0: no bound); false: m was dropped.
func (r *route) putUpTo(m jetstream.Msg, max int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if max >= 0 && len(r.over) >= max {
		return false
	}
	if len(r.over) == 0 {
		select {
		case r.ch <- m:
			return true
		default:
		}
	}
	r.over = append(r.over, m)
	if !r.pumping {
		r.pumping = true
		go r.pump()
	}
	return true
}

// pump moves the overflow into the inbox as the sequencer takes requests up; it runs
// only while there is overflow.
func (r *route) pump() {
	for {
		r.mu.Lock()
		if len(r.over) == 0 {
			r.pumping = false
			r.mu.Unlock()
			return
		}
		m := r.over[0]
		r.mu.Unlock()
		select {
		case r.ch <- m:
		case <-r.stop:
			r.mu.Lock()
			r.over, r.pumping = nil, false
			r.mu.Unlock()
			return
		}
		r.mu.Lock()
		r.over[0] = nil
		r.over = r.over[1:]
		r.mu.Unlock()
	}
}

// subjects is the filter the routes ask of lane i, sorted; f.mu is held.
func (f *appendFeed) subjects(i int) []string {
	var out []string
	for t, l := range f.laneOf {
		if l == i {
			out = append(out, pipeline.AppendSubject(t))
		}
	}
	if len(out) == 0 {
		out = append(out, feedPlaceholder(f.lanes[i].name))
	}
	slices.Sort(out)
	return out
}

func laneConfig(name string, subjects []string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:        name,
		FilterSubjects: subjects,
		AckPolicy:      jetstream.AckExplicitPolicy, // a work queue requires it
		AckWait:        5 * time.Second,
		MaxAckPending:  1 << 16,
		MaxDeliver:     -1,
		// The consumer of a process that died (kill -9) and never came back on its
		// data directory goes after this long; the tenants in its filter are taken
		// out of it as soon as another process wins their leases.
		InactiveThreshold: 10 * time.Minute,
	}
}

// apply makes the lanes' filters what the routes ask for, each changed one followed
// by a reset to the start of the stream (see above), and starts dispatching from new
// lanes.
func (f *appendFeed) apply(ctx context.Context) error {
	f.mu.Lock()
	gen := f.gen
	type job struct {
		l        *lane
		subjects []string
	}
	var jobs []job
	for i, l := range f.lanes {
		if l.dirty || l.cc == nil || closed(l.cc) {
			l.dirty = false
			jobs = append(jobs, job{l, f.subjects(i)})
		}
	}
	f.mu.Unlock()
	for k, j := range jobs {
		if err := f.applyLane(ctx, j.l, j.subjects); err != nil {
			f.mu.Lock()
			for _, left := range jobs[k:] { // this lane and those not tried yet
				left.l.dirty = true
			}
			f.mu.Unlock()
			return err
		}
	}
	f.mu.Lock()
	if gen > f.applied {
		f.applied = gen
		close(f.done)
		f.done = make(chan struct{})
	}
	f.mu.Unlock()
	return nil
}

// applyLane gives lane l the filter subjects, resets it, and starts its dispatch.
func (f *appendFeed) applyLane(ctx context.Context, l *lane, subjects []string) error {
	for attempt := 0; ; attempt++ {
		_, err := f.js.CreateOrUpdateConsumer(ctx, pipeline.AppendStream, laneConfig(l.name, subjects))
		var apiErr *jetstream.APIError
		if err == nil {
			break
		}
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.ErrorCode(10100) || attempt == 3 {
			return fmt.Errorf("append consumer %s: %w", l.name, err)
		}
		// Another consumer still has one of these tenants (its process died or lost
		// the lease): take them out of it, or give up the ones not ours.
		if subjects, err = f.untangle(ctx, l.name, subjects); err != nil {
			return err
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := f.js.ResetConsumerToSequence(cctx, pipeline.AppendStream, l.name, 1); err != nil {
		return fmt.Errorf("append consumer %s: reset: %w", l.name, err)
	}
	if l.cc != nil && !closed(l.cc) {
		return nil
	}
	c, err := f.js.Consumer(ctx, pipeline.AppendStream, l.name)
	if err != nil {
		return fmt.Errorf("append consumer %s: %w", l.name, err)
	}
	// PullExpiry 4 s, idle heartbeat 500 ms: when the consumer's leader node is lost,
	// the pull request it held is lost too, and the client re-issues one only after
	// two missed heartbeats; a longer heartbeat made the tenants wait for the
	// consumer's election in steps of 4 s (docs/design/cluster.md).
	cc, err := c.Consume(f.dispatch, jetstream.PullMaxMessages(4096), jetstream.PullExpiry(4*time.Second), jetstream.PullHeartbeat(500*time.Millisecond))
	if err != nil {
		return fmt.Errorf("append consumer %s: %w", l.name, err)
	}
	f.mu.Lock()
	l.cc = cc
	f.mu.Unlock()
	return nil
}

// untangle takes the tenants of subjects whose lease this process holds out of the
// other consumers' filters, and returns subjects without the ones another process
// holds (reported to lost).
func (f *appendFeed) untangle(ctx context.Context, self string, subjects []string) ([]string, error) {
	mine := map[string]bool{}
	for _, s := range subjects {
		mine[s] = true
	}
	drop := map[string]bool{}
	stream, err := f.js.Stream(ctx, pipeline.AppendStream)
	if err != nil {
		return nil, err
	}
	list := stream.ListConsumers(ctx)
	for info := range list.Info() {
		if info.Name == self {
			continue
		}
		cfg := info.Config
		var keep []string
		for _, s := range append([]string{cfg.FilterSubject}, cfg.FilterSubjects...) {
			switch {
			case s == "":
			case !mine[s]:
				keep = append(keep, s)
			case f.owns(ctx, strings.TrimPrefix(s, pipeline.AppendPrefix)):
				f.log.Info("taking a tenant out of the append consumer of its previous holder", "tenant", strings.TrimPrefix(s, pipeline.AppendPrefix), "consumer", info.Name)
			default:
				keep = append(keep, s)
				drop[s] = true
			}
		}
		if len(keep) == len(cfg.FilterSubjects)+btoi(cfg.FilterSubject != "") {
			continue
		}
		if len(keep) == 0 {
			keep = []string{feedPlaceholder(info.Name)}
		}
		cfg.FilterSubject, cfg.FilterSubjects = "", keep
		if _, err := f.js.UpdateConsumer(ctx, pipeline.AppendStream, cfg); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, fmt.Errorf("taking tenants out of consumer %s: %w", info.Name, err)
		}
	}
	if err := list.Err(); err != nil {
		return nil, fmt.Errorf("listing the consumers of %s: %w", pipeline.AppendStream, err)
	}
	if len(drop) == 0 {
		return subjects, nil
	}
	out := subjects[:0:0]
	for _, s := range subjects {
		if !drop[s] {
			out = append(out, s)
			continue
		}
		tenant := strings.TrimPrefix(s, pipeline.AppendPrefix)
		f.mu.Lock()
		f.unroute(tenant)
		f.mu.Unlock()
		go f.lost(tenant)
	}
	if len(out) == 0 {
		out = append(out, feedPlaceholder(self))
	}
	return out, nil
}

// appendStream is SVC_APPEND, looked up once (its info request) for the process.
func (f *appendFeed) appendStream(ctx context.Context) (jetstream.Stream, error) {
	f.mu.Lock()
	stream := f.stream
	f.mu.Unlock()
	if stream != nil {
		return stream, nil
	}
	stream, err := f.js.Stream(ctx, pipeline.AppendStream)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.stream = stream
	f.mu.Unlock()
	return stream, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// run keeps the lanes following the routes and dispatching, and takes the direct
// copies of requests (direct.go), until ctx ends; then it
// deletes them (a clean stop: the requests not acknowledged stay in the stream for
// the tenants' next holders). It first deletes the lanes a predecessor on this data
// directory left (killed): their requests go back to the work queue.
func (f *appendFeed) run(ctx context.Context) error {
	f.dropOld(ctx)
	if stop, err := f.listenDirect(); err != nil {
		f.log.Warn("not listening for direct copies of append requests; they wait for SVC_APPEND", "err", err)
	} else {
		defer stop()
	}
	defer func() {
		defer close(f.stopped)
		f.mu.Lock()
		lanes := slices.Clone(f.lanes)
		f.mu.Unlock()
		dctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, l := range lanes {
			if l.cc != nil {
				l.cc.Stop()
			}
			_ = f.js.DeleteConsumer(dctx, pipeline.AppendStream, l.name)
		}
	}()
	check := time.NewTicker(2 * time.Second)
	defer check.Stop()
	wait := 100 * time.Millisecond
	for ctx.Err() == nil {
		if err := f.apply(ctx); err != nil && ctx.Err() == nil {
			f.log.Warn("the append consumer does not follow this process's tenants yet; retrying", "err", err, "in", wait)
			f.tel.BrokerRetry("append consumer")
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			wait = min(2*wait, 5*time.Second)
			continue
		}
		wait = 100 * time.Millisecond
		select {
		case <-ctx.Done():
		case <-f.kick:
			time.Sleep(5 * time.Millisecond) // one update for a burst of starts
		case <-check.C:
			// The filters as the broker holds them: another process may have taken a
			// tenant out of one (racing an update of ours), or the broker lost one.
			f.checkDrift(ctx)
		}
	}
	return nil
}

// dropOld deletes this data directory's lanes left on the broker.
func (f *appendFeed) dropOld(ctx context.Context) {
	stream, err := f.js.Stream(ctx, pipeline.AppendStream)
	if err != nil {
		return
	}
	names := stream.ListConsumers(ctx)
	for info := range names.Info() {
		if strings.HasPrefix(info.Name, f.name+"-") {
			_ = f.js.DeleteConsumer(ctx, pipeline.AppendStream, info.Name)
		}
	}
}

// checkDrift marks the lanes whose consumer on the broker differs from what the
// routes ask.
func (f *appendFeed) checkDrift(ctx context.Context) {
	f.mu.Lock()
	want := make([][]string, len(f.lanes))
	lanes := slices.Clone(f.lanes)
	for i := range f.lanes {
		want[i] = f.subjects(i)
	}
	f.mu.Unlock()
	for i, l := range lanes {
		if l.cc != nil && !closed(l.cc) && !f.drifted(ctx, l.name, want[i]) {
			continue
		}
		f.mu.Lock()
		l.dirty = true
		f.mu.Unlock()
	}
}

// drifted reports whether consumer name on the broker has another filter than want.
func (f *appendFeed) drifted(ctx context.Context, name string, want []string) bool {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := f.js.Consumer(cctx, pipeline.AppendStream, name)
	if err != nil {
		return true
	}
	cfg := c.CachedInfo().Config
	got := append([]string{}, cfg.FilterSubjects...)
	if cfg.FilterSubject != "" { // the broker keeps a single filter there
		got = append(got, cfg.FilterSubject)
	}
	slices.Sort(got)
	return !slices.Equal(got, want)
}

func closed(cc jetstream.ConsumeContext) bool {
	select {
	case <-cc.Closed():
		return true
	default:
		return false
	}
}
