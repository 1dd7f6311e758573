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

// LeaseBucket is the KV bucket of sequencer leases: key = tenant, value = holder.
const LeaseBucket = "svc_sequencer_leases"

// DefaultLeaseTTL bounds a tenant's outage after its holder dies. Five seconds
// leaves a renewal (every TTL/3) two chances to land through a JetStream leader
// election of the R3 lease bucket (about two seconds) before the holder gives up.
const DefaultLeaseTTL = 5 * time.Second

// leaseStorage is where the lease bucket keeps its keys: in memory (replicated like
// any stream with --replicas), since a lease lives for a TTL of seconds and a broker
// that loses it (a full restart) only makes the holders create it again, while on
// disk every lease's creation and renewal was an fsynced write: the largest part of a
// tenant's start (about 50 of 70 ms with 8 starts at once) and of an idle process's
// CPU. A bucket an older version made on disk stays there (a stream's storage cannot
// change, and processes of both versions must share one bucket).
// An error other than "no such bucket" is returned (the start's Retry tries again):
// guessing memory then would ask the broker to change an existing bucket's storage.
func leaseStorage(ctx context.Context, js jetstream.JetStream) (jetstream.StorageType, error) {
	kv, err := js.KeyValue(ctx, LeaseBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return jetstream.MemoryStorage, nil
	}
	if err != nil {
		return 0, err
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return 0, err
	}
	if b, ok := st.(*jetstream.KeyValueBucketStatus); ok && b.StreamInfo().Config.Storage == jetstream.FileStorage {
		return jetstream.FileStorage, nil
	}
	return jetstream.MemoryStorage, nil
}

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
	refused map[string]string      // tenants whose last start failed, with why
	used    sync.Map               // tenant → *atomic.Int64: unix ns of its last request here
	halted  map[string]error       // tenants whose sequencer found the log of record shorter (sequencer.ErrShorterLog)

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

// startHosted starts the hosted mode: its buckets, append feed, administrative view,
// quota and HTTP front, and the loops that follow them until runCtx ends.
func (s *Service) startHosted(ctx, runCtx context.Context, js jetstream.JetStream) error {
	h := s.cfg.Hosted
	if h.Store == nil {
		return errors.New("logservice: hosted mode needs a store")
	}
	if h.LeaseTTL <= 0 {
		h.LeaseTTL = DefaultLeaseTTL
	}
	host, _ := os.Hostname()
	if h.LeaseTTL < 100*time.Millisecond {
		return fmt.Errorf("logservice: lease TTL %v is below 100 ms", h.LeaseTTL)
	}
	if h.MaxActive <= 0 {
		h.MaxActive = DefaultMaxActive
	}
	if h.QuietPeriod <= 0 {
		h.QuietPeriod = max(DefaultQuietPeriod, 2*s.cfg.CheckpointEvery)
	}
	st := &hostedState{cfg: *h, tel: s.cfg.Telemetry, js: js, started: map[string]bool{}, held: map[string]*holding{}, follows: map[string]*following{},
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

// follow serves tenant from a read-only tree that follows the log of record (another
// process runs its sequencer) and takes the sequencer over when the lease is free.
// The caller holds t's lock; the read-only tree stops when the tenant goes quiet.
// released, when not nil, is this process's own holding's lease channel (a
// hand-over): the lease is not tried before it is closed, since until then the lease
// is still this process's and taking it would keep it from the other processes.
func (s *Service) follow(ctx context.Context, t tenancy.Tenant, released <-chan struct{}) error {
	st := s.hosted
	tree, err := merkle.NewTree(merkle.NewMemoryStore())
	if err != nil {
		return err
	}
	fctx, stop := context.WithCancel(st.runCtx)
	f := &following{stop: stop}
	f.used.Store(time.Now().UnixNano())
	caught := make(chan struct{})
	var once sync.Once
	replicaDone := make(chan struct{})
	go func() {
		defer close(replicaDone)
		defer s.cfg.Telemetry.ForgetProjection(pipeline.LeavesSubject(t.ID))
		err := projections.Follow(fctx, s.cfg.Telemetry, st.js, pipeline.LeavesSubject(t.ID), 1, func(ev projections.Event) error {
			f.used.Store(time.Now().UnixNano())
			return appendBatch(tree, t.ID, ev.Batch)
		}, func() { once.Do(func() { close(caught) }) })
		if errors.Is(err, errLogGap) {
			// The log of record lost committed batches: raise the alarm; the tenant
			// stops here and the process (and its other tenants) stays up.
			st.halt(t.ID, err, s.cfg.Logger)
		}
		if err != nil && fctx.Err() == nil {
			f.err = err
			stop()
		}
	}()
	select {
	case <-caught:
	case <-replicaDone:
		stop()
		return fmt.Errorf("read-only tree stopped before it caught up: %w", f.err)
	case <-ctx.Done():
		stop()
		return ctx.Err()
	}
	if err := s.http.AddTenant(s.hostedFront(t.ID, tree)); err != nil {
		stop()
		return err
	}
	st.mu.Lock()
	st.follows[t.ID] = f
	st.mu.Unlock()
	s.cfg.Logger.Info("serving tenant from a read-only tree; another process runs its sequencer", "tenant", t.ID, "size", tree.Size())
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := st.awaitLease(fctx, t.ID, released)
		stop()
		<-replicaDone
		if err == nil {
			s.takeOver(t, f)
		} else if f.err != nil {
			s.stopFollowing(t.ID, f, f.err)
		}
	}()
	return nil
}

// following is an active tenant served here from a read-only tree.
type following struct {
	stop context.CancelFunc // the read-only tree and the wait for the lease
	used atomic.Int64       // unix ns of the last batch the tree applied
	err  error              // why the read-only tree failed; set before it stops
}

// takeOver runs tenant's sequencer here once the follower f won its lease, unless
// the tenant went quiet meanwhile (then the lease goes back at once).
func (s *Service) takeOver(t tenancy.Tenant, f *following) {
	st := s.hosted
	l := st.lock(t.ID)
	l.Lock()
	defer l.Unlock()
	st.mu.Lock()
	mine := st.follows[t.ID] == f
	if mine {
		delete(st.follows, t.ID)
	}
	st.mu.Unlock()
	if !mine {
		st.release(t.ID, 0)
		return
	}
	s.cfg.Logger.Info("taking over the sequencer of a tenant whose holder stopped", "tenant", t.ID)
	if err := s.holdTenant(st.runCtx, st.runCtx, t, 0, time.Time{}); err != nil {
		s.http.RemoveTenant(t.ID)
		st.refuse(t.ID, fmt.Errorf("taking over: %w", err), s.cfg.Logger)
	}
}

// errLogGap: the log of record skips committed batches (the broker lost them).
var errLogGap = errors.New("the log of record has a gap: the broker lost committed leaves")

// appendBatch applies a batch of the log of record to a read-only tree.
func appendBatch(tree *merkle.Tree, tenant string, b *pipeline.Batch) error {
	size := tree.Size()
	end := b.First + uint64(len(b.Leaves))
	if end <= size {
		return nil
	}
	if b.First > size {
		return fmt.Errorf("%w: read-only tree of %s: batch at %d but the tree holds %d", errLogGap, tenant, b.First, size)
	}
	hashes := make([]merkle.Hash, 0, end-size)
	for _, l := range b.Leaves[size-b.First:] {
		hashes = append(hashes, l.Hash)
	}
	_, err := tree.AppendBatch(hashes)
	return err
}

// awaitLease returns once this process holds tenant's lease (nil) or ctx ends. It
// tries at once when the holder releases the lease (a clean stop deletes it) and
// every LeaseTTL/4 otherwise, since a lease that ran out leaves no marker to watch.
// When own is not nil (this process hands the tenant over), it first waits until own
// is closed (its holding released the lease), then tries at once as after a release:
// tryLease takes back a lease that names this process, which during a slow hand-over
// would be the holding's own, still renewed, and never released.
func (st *hostedState) awaitLease(ctx context.Context, tenant string, own <-chan struct{}) error {
	released := make(chan struct{}, 1)
	if own != nil {
		select {
		case <-own:
			released <- struct{}{}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if w, err := st.kv.Watch(ctx, tenant, jetstream.UpdatesOnly()); err == nil {
		defer func() { _ = w.Stop() }()
		go func() {
			for e := range w.Updates() {
				if e != nil && e.Operation() != jetstream.KeyValuePut {
					select {
					case released <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	tick := time.NewTicker(st.cfg.LeaseTTL / 8)
	defer tick.Stop()
	var freeSince time.Time
	var grace leaseGrace
	for n := 0; ; n++ {
		woken := false
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if n%2 == 0 && freeSince.IsZero() && !grace.pending() {
				continue // every LeaseTTL/4, unless a deferred free lease is pending
			}
		case <-released:
			woken = true
		}
		if grace.wait(ctx, st.kv) {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, renewAttempt)
		took, err := st.tryLease(actx, tenant, woken, &freeSince)
		cancel()
		if took {
			return nil
		}
		grace.failed(ctx.Err() == nil && pipeline.Transient(err))
	}
}

// leaseGrace keeps a standby from taking a lease that ran out while the lease
// bucket had no leader (a node's crash: an election longer than the TTL): the
// holder, alive, retries its renewal every renewRetry and re-creates its lease
// within about a second of the bucket's return, holding its commits meanwhile, so a
// standby that could not reach the bucket lets it do so for graceAfterOutage before
// it tries Create. Without it the standby won the race about one time in three and
// the election cost a whole takeover (docs/measurements/2026-11-27-cluster-faults.md).
// A holder that died meanwhile costs its tenants graceAfterOutage more.
type leaseGrace struct {
	down bool      // the last attempt found the bucket unreachable
	back time.Time // when it answered again; zero: no grace under way
}

// graceAfterOutage is leaseGrace's wait after the lease bucket answers again.
const graceAfterOutage = 1500 * time.Millisecond

// failed records whether the last attempt on the bucket timed out.
func (g *leaseGrace) failed(down bool) {
	if down {
		g.down, g.back = true, time.Time{}
	}
}

// pending reports whether the bucket was down or a grace runs.
func (g *leaseGrace) pending() bool { return g.down || !g.back.IsZero() }

// wait reports whether this attempt must be skipped: the bucket is still down (it
// probes it), it just came back, or the grace is not over.
func (g *leaseGrace) wait(ctx context.Context, kv jetstream.KeyValue) bool {
	if g.down {
		actx, cancel := context.WithTimeout(ctx, renewAttempt)
		led := bucketLed(actx, kv)
		cancel()
		if !led {
			return true
		}
		g.down, g.back = false, time.Now()
		return true
	}
	if !g.back.IsZero() && time.Since(g.back) < graceAfterOutage {
		return true
	}
	g.back = time.Time{}
	return false
}

// bucketLed reports whether the lease bucket has a leader, which a write (a renewal,
// a Create) needs. A read of a key does not tell: a bucket allows direct gets, which
// any replica answers while the bucket elects its leader, so a standby that probed
// with one ended its grace during the election and won the lease back from a living
// holder when its Create landed first after it (kill -9 of the node leading the
// bucket, 2 of 4 rounds: docs/measurements/2026-11-27-cluster-crash-gap.md).
func bucketLed(ctx context.Context, kv jetstream.KeyValue) bool {
	st, err := kv.Status(ctx)
	if err != nil {
		return false
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return true
	}
	ci := bs.StreamInfo().Cluster
	return ci == nil || ci.Leader != ""
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
	// validUntil (Unix ns): the sequencer commits only before it, holdAfter past the
	// sending of the last renewal, so a holder that cannot renew (cut off, or
	// the broker electing the lease bucket's leader) commits nothing once another
	// process could take the lease, and goes on the moment it renews again.
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
	h := &holding{t: t, lease: make(chan struct{}), rev: rev}
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
	h.stopWork()
	h.work.Wait()
	if last {
		s.lastCheckpoint(h)
	}
	s.mu.Lock()
	delete(s.seqs, h.t.ID)
	delete(s.cps, h.t.ID)
	s.mu.Unlock()
	s.http.RemoveTenant(h.t.ID)
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
	return s.handOver(ctx, h, why, true)
}

// take removes tenant from what this process holds and returns its holding: nil
// when it holds none, or another step-down took it first.
func (st *hostedState) take(tenant string) *holding {
	st.mu.Lock()
	defer st.mu.Unlock()
	h := st.held[tenant]
	delete(st.held, tenant)
	return h
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

// holdAfter is how long after sending its last successful renewal a holder may
// commit: the lease is valid for the TTL from the broker's stamp of that renewal,
// which comes after it was sent, so commits stop a tenth of the TTL (0.5 s at 5 s)
// before anyone could take it. Two thirds of the TTL (an earlier choice) held the
// commits 1.2 s sooner during every lease bucket election, for no safety: the lease
// is still valid then, and the fence remains the safety net.
func (st *hostedState) holdAfter() time.Duration { return st.cfg.LeaseTTL - st.cfg.LeaseTTL/10 }

// A failed renewal is tried again after renewRetry, each attempt for at most
// renewAttempt, so held commits go on within about renewRetry + a round trip of
// the lease bucket's election instead of at the next tick (LeaseTTL/3).
const (
	renewAttempt = time.Second
	renewRetry   = 100 * time.Millisecond
)

// renewOnce renews tenant's lease by compare-and-set: mine is false when another
// process holds it. A lease that ran out (nobody took it) is taken again. With the
// revision of its last renewal (last), one update does it while nobody else wrote
// the key (one fsynced write, no read); otherwise it reads who holds it first.
func (st *hostedState) renewOnce(ctx context.Context, tenant string, last uint64, deadline time.Time) (rev uint64, mine bool, err error) {
	actx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if last != 0 {
		if rev, err = st.kv.Update(actx, tenant, []byte(st.id), last); err == nil {
			return rev, true, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return 0, false, err
		}
	}
	e, err := st.kv.Get(actx, tenant)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted):
		rev, err = st.kv.Create(actx, tenant, []byte(st.id))
		if errors.Is(err, jetstream.ErrKeyExists) {
			return 0, false, nil // another process took it in between
		}
		return rev, err == nil, err
	case err != nil:
		return 0, false, err
	case string(e.Value()) != st.id:
		return 0, false, nil
	}
	rev, err = st.kv.Update(actx, tenant, []byte(st.id), e.Revision())
	return rev, err == nil, err
}

// release hands tenant over at once on a clean stop: it deletes the lease when it is
// still this process's (revision rev, or unknown before the first renewal), which
// wakes the standbys' watches.
func (st *hostedState) release(tenant string, rev uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if rev == 0 {
		e, err := st.kv.Get(ctx, tenant)
		if err != nil || string(e.Value()) != st.id {
			return
		}
		rev = e.Revision()
	}
	_ = st.kv.Delete(ctx, tenant, jetstream.LastRevision(rev))
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
