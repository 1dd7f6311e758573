package logservice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/client"
	"svc.dev/svc/internal/logserver"
	"svc.dev/svc/internal/projections"
	"svc.dev/svc/internal/sequencer"
	"svc.dev/svc/internal/store"
	"svc.dev/svc/internal/telemetry"
	"svc.dev/svc/internal/tenancy"
	"svc.dev/svc/merkle"
	"svc.dev/svc/pipeline"
)

// Hosted configures the database-backed server: tenants, tokens and plans come from
// SVC_ADMIN (internal/tenancy), usage, audit and checkpoints live in PostgreSQL
// (internal/store), and any number of processes on one broker and one database serve
// the same tenants.
type Hosted struct {
	Store *store.Store // required
	// Now is the quota's clock; default time.Now (tests inject one).
	Now func() time.Time
	// LeaseTTL is how long a process holds a tenant's sequencer without renewing;
	// default DefaultLeaseTTL. The holder renews every LeaseTTL/3; a standby takes the
	// tenant over at once when the holder releases it on a clean stop, and within
	// about LeaseTTL + LeaseTTL/4 of the holder's death (docs/design/cluster.md).
	// Only an active tenant has a lease (docs/design/log-service.md).
	LeaseTTL time.Duration
	// BucketElection bounds how long a holder whose lease renewals go unanswered (the
	// lease bucket electing its leader after a node's crash) goes on committing past
	// its lease: from the first unanswered renewal, while the bucket's replicas still
	// show the lease as its own; default DefaultBucketElection. It must outlast the
	// bucket's longest election, so that the election costs no commits; a standby
	// waits a LeaseTTL after the bucket's return before it takes a lease that ran out
	// meanwhile (docs/design/cluster.md, "Leadership protocol").
	BucketElection time.Duration
	// QuietPeriod is how long a tenant stays active after its last request to this
	// process and its sequencer's last batch: then its sequencer (or read-only tree),
	// its consumer on SVC_APPEND, its lease and its checkpointer stop, and it costs no
	// goroutine, consumer, lease write or CPU until its next request starts it again
	// (an append waits for that start: tens of milliseconds). Default
	// max(DefaultQuietPeriod, 2 × CheckpointEvery): longer than the checkpoint
	// interval, so the last appends of a burst are checkpointed before the stop.
	QuietPeriod time.Duration
	// MaxActive caps the tenants active in this process at once (sequencers and
	// read-only trees: goroutines, memory, lease renewals); starting one more first
	// stops the least recently used, when that one has been idle for 3 s (a soft cap:
	// no request in flight loses its sequencer). Broker consumers follow it, not the
	// number of tenants: one on SVC_APPEND per 64 active tenants (feed.go). Default
	// DefaultMaxActive.
	MaxActive int
	// LogOfLogsEvery is how often the log of logs (logoflogs.go) takes the tenants'
	// latest checkpoints and sends its own to the witnesses; 0: no log of logs.
	LogOfLogsEvery time.Duration
}

// DefaultMaxActive is the default of Hosted.MaxActive.
const DefaultMaxActive = 250

// DefaultQuietPeriod is the least default of Hosted.QuietPeriod.
const DefaultQuietPeriod = 10 * time.Minute

// hostedState is what the hosted mode adds to a Service.
type hostedState struct {
	cfg   Hosted
	tel   *telemetry.Telemetry // Config.Telemetry
	view  *tenancy.View
	quota *tenancy.Quota
	admin *tenancy.Admin
	kv    jetstream.KeyValue
	js    jetstream.JetStream
	id    string // this process, in leases
	// bundles serves the tenants' entry bundles from SVC_LEAVES (bundles.go).
	bundles bundleSource
	// runCtx is the service's run context: a tenant handed over keeps its read-only
	// tree until the process stops.
	runCtx context.Context

	feed    *appendFeed        // the process's consumers on SVC_APPEND (feed.go)
	members jetstream.KeyValue // live processes and how many tenants each holds
	left    sync.Once          // leave: once per process stop, whoever asks first

	mu      sync.Mutex
	started map[string]bool        // tenants the view reported (served on their first request)
	held    map[string]*holding    // active tenants whose sequencer runs here
	follows map[string]*following  // active tenants served from a read-only tree
	locks   map[string]*sync.Mutex // per tenant: a start and a stop never overlap
	// stopping: the holdings being stopped (taken from held, their stop not done), so
	// that a start waiting for the tenant's lock can hurry the stop (hurry).
	stopping map[string]*holding
	refused  map[string]string // tenants whose last start failed, with why
	used     sync.Map          // tenant → *atomic.Int64: unix ns of its last request here
	halted   map[string]error  // tenants whose sequencer found the log of record shorter (sequencer.ErrShorterLog)

	roomWanted chan struct{}    // a start found MaxActive tenants active (the reaper makes room)
	leaves     jetstream.Stream // SVC_LEAVES once looked up (leavesStream); under mu

	checkpoints *checkpointRuns // the held tenants' checkpoints (checkpointruns.go)
	leases      *leaseRuns      // the held tenants' lease renewals (leaseruns.go)
}

// leavesStream is SVC_LEAVES, looked up once for all the tenants' sequencers (a
// start then costs no stream info request); nil when the lookup fails (the
// sequencer then tries itself, and reports the broker's error).
func (st *hostedState) leavesStream(ctx context.Context) jetstream.Stream {
	st.mu.Lock()
	s := st.leaves
	st.mu.Unlock()
	if s != nil {
		return s
	}
	s, err := st.js.Stream(ctx, pipeline.LeavesStream)
	if err != nil {
		return nil
	}
	st.mu.Lock()
	st.leaves = s
	st.mu.Unlock()
	return s
}

// withDefaults fills in h's unset fields and checks them.
func (h *Hosted) withDefaults(checkpointEvery time.Duration) error {
	if h.Store == nil {
		return errors.New("logservice: hosted mode needs a store")
	}
	if h.LeaseTTL <= 0 {
		h.LeaseTTL = DefaultLeaseTTL
	}
	if h.LeaseTTL < 100*time.Millisecond {
		return fmt.Errorf("logservice: lease TTL %v is below 100 ms", h.LeaseTTL)
	}
	if h.BucketElection <= 0 {
		h.BucketElection = DefaultBucketElection
	}
	if h.MaxActive <= 0 {
		h.MaxActive = DefaultMaxActive
	}
	if h.QuietPeriod <= 0 {
		h.QuietPeriod = max(DefaultQuietPeriod, 2*checkpointEvery)
	}
	return nil
}

// startHosted starts the hosted mode: its buckets, append feed, administrative view,
// quota and HTTP front, and the loops that follow them until runCtx ends.
func (s *Service) startHosted(ctx, runCtx context.Context, js jetstream.JetStream) error {
	h := s.cfg.Hosted
	if err := h.withDefaults(s.cfg.CheckpointEvery); err != nil {
		return err
	}
	host, _ := os.Hostname()
	st := &hostedState{cfg: *h, tel: s.cfg.Telemetry, js: js, started: map[string]bool{}, held: map[string]*holding{}, follows: map[string]*following{}, stopping: map[string]*holding{},
		locks: map[string]*sync.Mutex{}, refused: map[string]string{}, roomWanted: make(chan struct{}, 1), checkpoints: newCheckpointRuns(), id: fmt.Sprintf("%s/%d/%d", host, os.Getpid(), time.Now().UnixNano())}
	st.leases = newLeaseRuns(st, s.cfg.Logger)
	s.hosted = st
	var err error
	// Every broker-facing step of the start retries while the cluster elects or
	// lacks a quorum (Retry); the process never exits for it.
	if err := s.openBuckets(ctx, st); err != nil {
		return err
	}
	st.runCtx = runCtx
	name, err := feedName(s.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("append consumer name: %w", err)
	}
	st.feed = newAppendFeed(js, name, s.cfg.Logger, s.cfg.Telemetry)
	st.feed.owns = func(ctx context.Context, tenant string) bool {
		e, err := st.kv.Get(ctx, tenant)
		return err == nil && string(e.Value()) == st.id
	}
	st.feed.lost = func(tenant string) {
		s.loseTenant(tenant, fmt.Errorf("%w of %s: another process's append consumer has it", errLeaseLost, tenant))
	}
	s.goRun("append consumer", func() error { return st.feed.run(runCtx) })
	if err := st.reclaim(ctx, s.cfg.DataDir, s.cfg.Logger); err != nil {
		return err
	}
	st.quota = &tenancy.Quota{JS: js, Now: h.Now}
	st.view = tenancy.NewView(js, s.cfg.Logger, st.known)
	st.view.Telemetry = s.cfg.Telemetry
	var snaps jetstream.ObjectStore
	if err := s.Retry(ctx, "admin snapshot bucket", func(ctx context.Context) (err error) {
		snaps, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: tenancy.SnapshotBucket, Replicas: max(s.cfg.Replicas, 1), Description: "the fold of SVC_ADMIN with its stream position"})
		return err
	}); err != nil {
		return fmt.Errorf("admin snapshot bucket: %w", err)
	}
	st.view.WriteSnapshots(snaps)
	st.quota.View = st.view
	st.admin = &tenancy.Admin{JS: js, View: st.view}
	if s.client, err = pipeline.NewClient(s.nc, pipeline.ClientConfig{Bundle: pipeline.DefaultBundle, Retries: -1, Timeout: s.cfg.AppendTimeout, ResendAfter: frontResend, Header: s.cfg.Telemetry.InjectNATS}); err != nil {
		return err
	}
	if s.http, err = logserver.New(logserver.Config{Append: s.client, Checkpoints: true, TrustProxy: s.cfg.TrustProxy, Logger: s.cfg.Logger, Dynamic: true, Telemetry: s.cfg.Telemetry,
		Lookup: s.lookup, Authorize: st.authorize, PublicEntries: st.publicEntries, Touch: st.touch, Problems: st.problems, Signer: s.cfg.Signer,
		Broker: s.brokerState, Alarm: st.alarm}); err != nil {
		return err
	}
	s.goRun("database projections", func() error { return s.runProjections(runCtx, js) })
	s.goRun("balance", func() error { return s.balance(runCtx) })
	s.goRun("quiet tenants", func() error { return s.reap(runCtx) })
	s.goRun("checkpoints", func() error { return st.checkpoints.run(runCtx) })
	s.goRun("lease renewals", func() error { return st.leases.run(runCtx) })
	s.startLogOfLogs(runCtx) // logoflogs.go
	// The view follows SVC_ADMIN until runCtx ends; a retry before it follows
	// (stream lookup, snapshot read) starts over, and the snapshot's fold is idempotent.
	if err := s.Retry(ctx, "administrative events", func(context.Context) error { return st.view.Start(runCtx, s.errs) }); err != nil {
		return err
	}
	return s.wakeOnAppend(runCtx)
}

// openBuckets opens (creating them if needed) the lease and process buckets of st,
// retrying while the cluster elects or lacks a quorum.
func (s *Service) openBuckets(ctx context.Context, st *hostedState) error {
	h, js := &st.cfg, st.js
	if err := s.Retry(ctx, "lease bucket", func(ctx context.Context) error {
		storage, err := leaseStorage(ctx, js)
		if err != nil {
			return err
		}
		st.kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: LeaseBucket, TTL: h.LeaseTTL, Replicas: max(s.cfg.Replicas, 1), Storage: storage,
			Description: "which process runs each tenant's sequencer"})
		return err
	}); err != nil {
		return fmt.Errorf("lease bucket: %w", err)
	}
	if err := s.Retry(ctx, "process bucket", func(ctx context.Context) (err error) {
		st.members, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: MembersBucket, TTL: h.LeaseTTL, Replicas: max(s.cfg.Replicas, 1), Description: "live log processes and how many tenants each sequences"})
		return err
	}); err != nil {
		return fmt.Errorf("process bucket: %w", err)
	}
	return nil
}

// runProjections keeps the database's projections following the streams. A database
// that stops answering is retried with backoff and never stops the process: appends do
// not need PostgreSQL, and the projections resume from their saved positions.
func (s *Service) runProjections(ctx context.Context, js jetstream.JetStream) error {
	wait := time.Second
	for {
		err := s.hosted.cfg.Store.Run(ctx, js)
		if ctx.Err() != nil {
			return nil
		}
		s.cfg.Logger.Warn("database projections stopped; retrying", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// authorize reports whether token is a live token of tenant id: from the view, or,
// for a token it does not know (maybe one another process created a moment ago),
// after catching the view up with the tenant's newest event (one broker round trip,
// shared by the rechecks of id waiting at the time), within the address's budget
// mayAsk. It is the HTTP front's Config.Authorize (before a tenant is looked up or
// started) and each hosted tenant's Authorize.
func (st *hostedState) authorize(id, token string, mayAsk func() bool) bool {
	if st.view.Authorized(id, token) {
		return true
	}
	if token == "" || !client.ValidTenant(id) || !mayAsk() {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return st.catchUp(ctx, id) && st.view.Authorized(id, token)
}

// publicEntries says whether tenant id opted its log public (Tenant.Public), from the
// view, without starting it.
func (st *hostedState) publicEntries(id string) bool {
	t, ok := st.view.Tenant(id)
	return ok && t.Public
}

// catchUp waits until the view applied the newest administrative event of tenant
// id; false when there is none or the wait fails.
func (st *hostedState) catchUp(ctx context.Context, id string) bool {
	return st.view.CatchUp(ctx, st.js, id) == nil
}

// serveHosted starts tenant t here: as the holder of its sequencer when this process
// wins the lease, else from a read-only tree that follows the log of record, taking
// the sequencer over when the holder releases it or dies. The caller holds t's lock.
func (s *Service) serveHosted(ctx context.Context, t tenancy.Tenant) error {
	st := s.hosted
	sent := time.Now()
	if rev, err := st.kv.Create(ctx, t.ID, []byte(st.id)); err == nil {
		return s.holdTenant(ctx, st.runCtx, t, rev, sent)
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("sequencer lease: %w", err)
	}
	return s.follow(ctx, t, nil)
}

// holding is a tenant whose sequencer and checkpointer run here.
type holding struct {
	t         tenancy.Tenant
	seq       *sequencer.Sequencer
	cp        *projections.Checkpointer // nil until startCheckpoints
	stopWork  context.CancelFunc        // the sequencer and the checkpointer
	work      sync.WaitGroup
	stopLease context.CancelFunc // the renewal; it releases the lease when stopped
	lease     chan struct{}      // closed when the renewal returned
	rev       uint64             // the lease's revision when it was won (0: unknown)
	// hurry is closed (once, hurryOnce) when a start of the tenant waits for its stop:
	// the stop then cuts its last checkpoint short (lastCheckpoint).
	hurry     chan struct{}
	hurryOnce sync.Once
	// validUntil (Unix ns): the sequencer commits only before it: holdAfter past the
	// sending of the last renewal, so a holder cut off commits nothing once another
	// process could take the lease, and goes on the moment it renews again; or, while
	// the lease bucket elects its leader and no replica that answers shows another holder,
	// further (leaseRuns.electing).
	validUntil atomic.Int64
}

// hold is the sequencer's Hold: it waits while the lease is not known to be ours.
func (h *holding) hold(ctx context.Context) error {
	for time.Now().UnixNano() >= h.validUntil.Load() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// holdTenant runs the tenant's sequencer and checkpointer here, renewing the lease
// (which the caller won, at revision rev when known, else 0, by a request sent at
// sent; zero when unknown: commits then wait for the first renewal, made as soon as
// the sequencer is ready, since the lease may have been won long enough ago to be
// taken). On failure everything it started is stopped and the lease released. The
// caller holds t's lock.
func (s *Service) holdTenant(ctx, runCtx context.Context, t tenancy.Tenant, rev uint64, sent time.Time) (err error) {
	st := s.hosted
	dir := filepath.Join(s.cfg.DataDir, "tenants", t.ID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		st.release(t.ID, 0)
		return err
	}
	h := &holding{t: t, lease: make(chan struct{}), rev: rev, hurry: make(chan struct{})}
	if !sent.IsZero() {
		h.validUntil.Store(sent.Add(st.holdAfter()).UnixNano()) // as after a renewal sent then
	}
	reqs, _ := st.feed.add(t.ID)
	seq, err := sequencer.New(sequencer.Config{Tenant: t.ID, LogID: t.LogID, Conn: s.nc, Dir: dir, Signer: s.cfg.Signer, Logger: s.cfg.Logger, Admit: st.quota, Hold: h.hold, Requests: reqs, Telemetry: s.cfg.Telemetry,
		Leaves: st.leavesStream(ctx)})
	if err != nil {
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = st.feed.remove(fctx, t.ID)
		st.release(t.ID, 0)
		return err
	}
	workCtx, stopWork := context.WithCancel(runCtx)
	leaseCtx, stopLease := context.WithCancel(runCtx)
	h.seq, h.stopWork, h.stopLease = seq, stopWork, stopLease
	renewing := false
	defer func() {
		if err != nil {
			s.unhold(h, renewing, false)
		}
	}()
	s.mu.Lock()
	s.seqs[t.ID] = seq
	s.mu.Unlock()
	failed := make(chan error, 1)
	s.wg.Add(1)
	h.work.Add(1)
	go func() {
		defer s.wg.Done()
		defer h.work.Done()
		s.sequence(workCtx, h, failed)
	}()
	select {
	case <-seq.Ready():
	case err := <-failed:
		if !errors.Is(err, sequencer.ErrShorterLog) {
			return err
		}
		// Halted as it recovered: hold the lease all the same (below), so that no
		// other process sequences the shorter log; the tree serves reads.
	case <-ctx.Done():
		return ctx.Err()
	}
	renewing = true
	st.leases.add(leaseCtx, h, func(err error) { s.loseTenant(t.ID, err) })
	if err := s.http.AddTenant(s.hostedFront(t.ID, seq.Tree())); err != nil {
		return err
	}
	if err := s.startCheckpoints(workCtx, h); err != nil {
		return err
	}
	// Registered last: stepDown may stop it only once everything above runs.
	st.mu.Lock()
	st.held[t.ID] = h
	delete(st.refused, t.ID)
	st.mu.Unlock()
	return nil
}

// startCheckpoints loads and runs the checkpointer of h's tenant (until workCtx ends).
func (s *Service) startCheckpoints(workCtx context.Context, h *holding) error {
	t, seq := h.t, h.seq
	cp := &projections.Checkpointer{Dir: s.cfg.CheckpointDir, Tenant: t.ID, LogID: t.LogID, Tree: seq.Tree(), Signer: s.cfg.Signer,
		Every: s.cfg.CheckpointEvery, Heartbeat: s.cfg.CheckpointHeartbeat, First: s.cfg.CheckpointFirst, Logger: s.cfg.Logger, DB: s.hosted.cfg.Store, Telemetry: s.cfg.Telemetry}
	if err := s.withNotes(cp, t.LogID, t.ID, seq.Tree()); err != nil { // C2SP checkpoints (c2sp.go)
		return err
	}
	if err := cp.Load(); err != nil {
		return err
	}
	s.mu.Lock()
	s.cps[t.ID] = cp
	s.mu.Unlock()
	h.cp = cp
	h.work.Add(1)
	s.hosted.checkpoints.add(workCtx, cp, h.work.Done)
	return nil
}

// sequence runs h's sequencer until workCtx ends. A failure before it is ready goes
// to failed (the start fails); after, a fenced sequencer steps down to a standby and
// any other failure (a broker limit, a full disk) stops the tenant with that error,
// which its next request sees as 503 until a start succeeds: the process goes on.
func (s *Service) sequence(workCtx context.Context, h *holding, failed chan<- error) {
	err := h.seq.Run(workCtx)
	if err == nil {
		return
	}
	if errors.Is(err, sequencer.ErrShorterLog) {
		// Neither this sequencer nor another may append to the shorter log: the
		// lease stays here (renewed), the tree serves reads and the alarm is raised.
		s.hosted.halt(h.t.ID, err, s.cfg.Logger)
		// Its requests stay in SVC_APPEND, taken up by nobody.
		go func() {
			ctx, cancel := context.WithTimeout(s.hosted.runCtx, 5*time.Second)
			defer cancel()
			_ = s.hosted.feed.remove(ctx, h.t.ID)
		}()
	}
	select {
	case <-h.seq.Ready():
	default:
		failed <- err
		return
	}
	switch {
	case errors.Is(err, sequencer.ErrShorterLog):
	case errors.Is(err, sequencer.ErrFenced):
		// Another process committed: this one steps down to a standby (in a
		// goroutine of its own, since stepping down waits for this one).
		go s.loseTenant(h.t.ID, err)
	default:
		go s.quiesce(h.t.ID, err)
	}
}

// unhold stops what holdTenant started for h and releases the lease: a start that
// failed part way, or a tenant stopped (last: a clean stop, whose last checkpoint is
// published before the lease goes). renewing says whether the lease's renewal runs.
func (s *Service) unhold(h *holding, renewing, last bool) {
	// Out of the front first: a request from now on asks for a start (lookup), which
	// hurries this stop, instead of waiting in SVC_APPEND for a sequencer that stops.
	s.http.RemoveTenant(h.t.ID)
	h.stopWork()
	h.work.Wait()
	if last {
		s.lastCheckpoint(h)
	}
	s.mu.Lock()
	delete(s.seqs, h.t.ID)
	delete(s.cps, h.t.ID)
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.hosted.feed.remove(ctx, h.t.ID) // before the lease goes: then the requests are the next holder's
	_ = h.seq.Close()
	h.stopLease()
	if renewing {
		<-h.lease
	} else {
		s.hosted.release(h.t.ID, 0)
	}
}

// stepDown hands a tenant this process holds to another: it serves the tenant from
// a read-only tree, stops the sequencer and the checkpointer, then releases the lease
// (which wakes the standbys' watches). Only then may another process sequence, and
// the fence would refuse this one's commit anyway.
func (s *Service) stepDown(ctx context.Context, tenant, why string) error {
	l := s.hosted.lock(tenant)
	l.Lock()
	defer l.Unlock()
	h := s.hosted.take(tenant)
	if h == nil {
		return nil
	}
	defer s.hosted.stopped(tenant, h)
	return s.handOver(ctx, h, why, true)
}

// take removes tenant from what this process holds and returns its holding: nil
// when it holds none, or another step-down took it first. The holding is stopping
// until the caller's stop calls stopped.
func (st *hostedState) take(tenant string) *holding {
	st.mu.Lock()
	defer st.mu.Unlock()
	h := st.held[tenant]
	delete(st.held, tenant)
	if h != nil {
		st.stopping[tenant] = h
	}
	return h
}

// stopped ends what take began: h's stop is done.
func (st *hostedState) stopped(tenant string, h *holding) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.stopping[tenant] == h {
		delete(st.stopping, tenant)
	}
}

// hurry asks the stop of tenant under way, if any, to cut its optional waits short
// (its last checkpoint: the start that follows publishes it), since a start waits
// for it. The stop's broker work that a start needs done (the append consumer's
// filter, the lease) is bounded as before.
func (st *hostedState) hurry(tenant string) {
	st.mu.Lock()
	h := st.stopping[tenant]
	st.mu.Unlock()
	if h != nil {
		h.hurryOnce.Do(func() { close(h.hurry) })
	}
}

// handOver is stepDown's work, for the one caller that took the holding h; last: a
// clean step-down, whose last checkpoint is published before the lease goes.
func (s *Service) handOver(ctx context.Context, h *holding, why string, last bool) error {
	tenant := h.t.ID
	s.cfg.Logger.Info("stepping down to a standby", "tenant", tenant, "why", why)
	ferr := s.follow(ctx, h.t, h.lease)
	if ferr != nil {
		// No read-only tree (the broker is slow or refuses): the tenant stops here
		// all the same, and its next request starts it again.
		s.http.RemoveTenant(tenant)
		ferr = fmt.Errorf("serving it read-only: %w", ferr)
	}
	h.stopWork()
	h.work.Wait()
	if last {
		s.lastCheckpoint(h)
	}
	s.mu.Lock()
	seq := s.seqs[tenant]
	delete(s.seqs, tenant)
	delete(s.cps, tenant)
	s.mu.Unlock()
	s.cfg.Telemetry.ForgetTenant(tenant)
	// The tree store is closed before the lease goes: this process's own standby may
	// take the tenant back and open it again.
	var err error
	if seq != nil {
		err = seq.Close()
	}
	fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = s.hosted.feed.remove(fctx, tenant) // before the lease goes: then the requests are the next holder's
	cancel()
	h.stopLease()
	<-h.lease
	return errors.Join(ferr, err)
}

// halt records that tenant's sequencer stopped on a log of record shorter than its
// tree: an error line, svc.sequencer.halted, and /health answers 503 naming it until
// the process restarts (after an operator checked the broker's stores).
func (st *hostedState) halt(tenant string, err error, log *slog.Logger) {
	log.Error("sequencer stopped appending: the log of record lost acknowledged leaves; check the NATS nodes' stores (a node restarted with a truncated or corrupted file) before restarting this process", "tenant", tenant, "err", err)
	st.tel.SequencerHalted(tenant)
	st.mu.Lock()
	if st.halted == nil {
		st.halted = map[string]error{}
	}
	st.halted[tenant] = err
	st.mu.Unlock()
}

// alarm is /health's view of halted tenants (nil: none).
func (st *hostedState) alarm() error {
	st.mu.Lock()
	defer st.mu.Unlock()
	var errs []error
	for tenant, err := range st.halted {
		errs = append(errs, fmt.Errorf("tenant %s: %w", tenant, err))
	}
	return errors.Join(errs...)
}

// isHeld reports whether this process runs tenant's sequencer.
func (s *Service) isHeld(tenant string) bool {
	st := s.hosted
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.held[tenant] != nil
}

// loseTenant steps down from a tenant whose lease was lost or whose sequencer was
// fenced out: the process goes on serving its other tenants and this one read-only,
// as a standby that takes the lease again when it is free. When even that fails (the
// broker is slow or unreachable) the tenant stops here and /health lists it; the
// process goes on, and the tenant's next request starts it again.
//
// A sequencer fenced out and its lease lost may both report one loss: the first
// takes the holding and reports it (log line, svc.sequencer.leases.lost), the second
// finds nothing to step down from.
func (s *Service) loseTenant(tenant string, cause error) {
	l := s.hosted.lock(tenant)
	l.Lock()
	defer l.Unlock()
	h := s.hosted.take(tenant)
	if h == nil {
		return
	}
	defer s.hosted.stopped(tenant, h)
	// Stop appending first: the lease runs out a third of its TTL after renewals
	// stopped, and another process may then take the tenant. Following the log
	// read-only (handOver) needs the broker, which a cut-off holder cannot reach.
	h.stopWork()
	h.work.Wait()
	s.cfg.Logger.Warn("lost a tenant's sequencer; stopped it, serving the tenant read-only as a standby", "tenant", tenant, "err", cause)
	s.cfg.Telemetry.LeaseLost(tenant)
	if err := s.handOver(s.hosted.runCtx, h, cause.Error(), false); err != nil && s.hosted.runCtx.Err() == nil {
		s.hosted.refuse(tenant, fmt.Errorf("%w; stepping down: %w", cause, err), s.cfg.Logger)
	}
}

// hostedFront is the HTTP front's view of a hosted tenant: tokens from the folded
// view, checkpoints, usage and audit from PostgreSQL (usage's appends from the
// sequencer's exact count when this process holds it).
func (s *Service) hostedFront(id string, tree *merkle.Tree) *logserver.Tenant {
	st := s.hosted
	db := st.cfg.Store
	t, _ := st.view.Tenant(id)
	return &logserver.Tenant{
		ID: id, LogID: t.LogID, Tree: tree, Signer: s.cfg.Signer, Keys: s.cfg.Keys,
		Authorize:      func(token string, mayAsk func() bool) bool { return st.authorize(id, token, mayAsk) },
		CheckpointNote: s.hostedNote(id), // c2sp.go
		Public:         func() bool { cur, _ := st.view.Tenant(id); return cur.Public },
		Entries:        st.bundles.of(st.js, id, tree), // bundles.go
		Checkpoints: func(since uint64) ([]logserver.Checkpoint, error) {
			cps, err := db.CheckpointsSince(context.Background(), id, since, 10000)
			if err != nil {
				return nil, err
			}
			out := []logserver.Checkpoint{}
			for _, c := range cps {
				out = append(out, logserver.Checkpoint{TreeSize: c.TreeSize, RootHash: c.RootHash, SignedAt: c.SignedAt, TreeHead: c.Envelope})
			}
			return out, nil
		},
		Audit: func(limit int) ([]client.AuditEntry, error) {
			evs, err := db.Audit(context.Background(), id, limit)
			if err != nil {
				return nil, err
			}
			out := []client.AuditEntry{}
			for _, e := range evs {
				out = append(out, e.AuditEntry)
			}
			return out, nil
		},
		Usage: func(month string) (*logserver.Usage, error) {
			appends, _, err := db.Usage(context.Background(), id, month)
			if err != nil {
				return nil, err
			}
			if m, n := st.quota.Used(id); m == month {
				appends = max(appends, n)
			}
			cur, _ := st.view.Tenant(id)
			return &logserver.Usage{Month: month, Appends: appends, TotalLeaves: tree.Size(), LiveTokens: cur.LiveTokens(), Plan: cur.Plan, Quota: PlanQuota(cur.Plan)}, nil
		},
	}
}

// View is the hosted service's folded view of tenants (nil in file mode).
func (s *Service) View() *tenancy.View {
	if s.hosted == nil {
		return nil
	}
	return s.hosted.view
}

// Admin publishes administrative events (nil in file mode).
func (s *Service) Admin() *tenancy.Admin {
	if s.hosted == nil {
		return nil
	}
	return s.hosted.admin
}

// Quota is the hosted service's admitter (nil in file mode).
func (s *Service) Quota() *tenancy.Quota {
	if s.hosted == nil {
		return nil
	}
	return s.hosted.quota
}
