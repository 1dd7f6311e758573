package logservice

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
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
	LeaseTTL time.Duration
}

// LeaseBucket is the KV bucket of sequencer leases: key = tenant, value = holder.
const LeaseBucket = "svc_sequencer_leases"

// DefaultLeaseTTL bounds a tenant's outage after its holder dies. Five seconds
// leaves a renewal (every TTL/3) two chances to land through a JetStream leader
// election of the R3 lease bucket (about two seconds) before the holder gives up.
const DefaultLeaseTTL = 5 * time.Second

// hostedState is what the hosted mode adds to a Service.
type hostedState struct {
	cfg   Hosted
	view  *tenancy.View
	quota *tenancy.Quota
	admin *tenancy.Admin
	kv    jetstream.KeyValue
	js    jetstream.JetStream
	id    string // this process, in leases
	// runCtx is the service's run context: a tenant handed over keeps its read-only
	// tree until the process stops.
	runCtx context.Context

	members jetstream.KeyValue // live processes and how many tenants each holds
	left    sync.Once          // leave: once per process stop, whoever asks first

	mu      sync.Mutex
	started map[string]bool
	held    map[string]*holding
}

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
	st := &hostedState{cfg: *h, js: js, started: map[string]bool{}, held: map[string]*holding{}, id: fmt.Sprintf("%s/%d/%d", host, os.Getpid(), time.Now().UnixNano())}
	s.hosted = st
	var err error
	if st.kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: LeaseBucket, TTL: h.LeaseTTL, Replicas: max(s.cfg.Replicas, 1), Description: "which process runs each tenant's sequencer"}); err != nil {
		return fmt.Errorf("lease bucket: %w", err)
	}
	if st.members, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: MembersBucket, TTL: h.LeaseTTL, Replicas: max(s.cfg.Replicas, 1), Description: "live log processes and how many tenants each sequences"}); err != nil {
		return fmt.Errorf("process bucket: %w", err)
	}
	st.runCtx = runCtx
	st.quota = &tenancy.Quota{JS: js, Now: h.Now}
	st.view = tenancy.NewView(js, s.cfg.Logger, func(t tenancy.Tenant) { s.hostedTenant(runCtx, runCtx, t) })
	st.quota.View = st.view
	st.admin = &tenancy.Admin{JS: js, View: st.view}
	if s.client, err = pipeline.NewClient(s.nc, pipeline.ClientConfig{Bundle: pipeline.DefaultBundle, Retries: -1, Timeout: s.cfg.AppendTimeout, Header: telemetry.InjectNATS}); err != nil {
		return err
	}
	if s.http, err = logserver.New(logserver.Config{Append: s.client, Checkpoints: true, TrustProxy: s.cfg.TrustProxy, Logger: s.cfg.Logger, Dynamic: true,
		Lookup: st.lookup}); err != nil {
		return err
	}
	s.goRun("database projections", func() error { return s.runProjections(runCtx, js) })
	s.goRun("balance", func() error { return s.balance(runCtx) })
	return st.view.Start(runCtx, s.errs)
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

// lookup waits (at most five seconds) for the view to apply the newest administrative
// event of tenant id, when the broker holds one: a tenant another process just
// created is served once its creation is answered there.
func (st *hostedState) lookup(ctx context.Context, id string) bool {
	if !client.ValidTenant(id) {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if !st.catchUp(ctx, id) {
		return false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.started[id]
}

// catchUp waits until the view applied the newest administrative event of tenant
// id; false when there is none or the wait fails.
func (st *hostedState) catchUp(ctx context.Context, id string) bool {
	return st.view.CatchUp(ctx, st.js, id) == nil
}

// hostedTenant serves a tenant the view reports, once: as the holder of its
// sequencer when this process wins the lease, else from a read-only tree that follows
// the log of record, taking the sequencer over when the holder stops renewing.
func (s *Service) hostedTenant(ctx, runCtx context.Context, t tenancy.Tenant) {
	st := s.hosted
	st.mu.Lock()
	if st.started[t.ID] {
		st.mu.Unlock()
		return
	}
	st.started[t.ID] = true
	st.mu.Unlock()
	if err := s.serveHosted(ctx, runCtx, t); err != nil {
		s.report(fmt.Errorf("tenant %s: %w", t.ID, err))
	}
}

func (s *Service) serveHosted(ctx, runCtx context.Context, t tenancy.Tenant) error {
	st := s.hosted
	if _, err := st.kv.Create(ctx, t.ID, []byte(st.id)); err == nil {
		return s.holdTenant(ctx, runCtx, t)
	} else if !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("sequencer lease: %w", err)
	}
	return s.follow(ctx, runCtx, t)
}

// follow serves tenant from a read-only tree that follows the log of record (another
// process runs its sequencer) and takes the sequencer over when the lease is free.
func (s *Service) follow(ctx, runCtx context.Context, t tenancy.Tenant) error {
	st := s.hosted
	tree, err := merkle.NewTree(merkle.NewMemoryStore())
	if err != nil {
		return err
	}
	rctx, stopReplica := context.WithCancel(runCtx)
	caught := make(chan struct{})
	var once sync.Once
	replicaDone := make(chan struct{})
	go func() {
		defer close(replicaDone)
		defer telemetry.Current().ForgetProjection(pipeline.LeavesSubject(t.ID))
		err := projections.Follow(rctx, st.js, pipeline.LeavesSubject(t.ID), 1, func(ev projections.Event) error {
			return appendBatch(tree, t.ID, ev.Batch)
		}, func() { once.Do(func() { close(caught) }) })
		if err != nil && rctx.Err() == nil {
			s.report(fmt.Errorf("read-only tree of %s: %w", t.ID, err))
		}
	}()
	select {
	case <-caught:
	case <-replicaDone:
		stopReplica()
		return errors.New("read-only tree stopped before it caught up")
	case <-ctx.Done():
		stopReplica()
		return ctx.Err()
	}
	if err := s.http.AddTenant(s.hostedFront(t.ID, tree)); err != nil {
		stopReplica()
		return err
	}
	s.cfg.Logger.Info("serving tenant from a read-only tree; another process runs its sequencer", "tenant", t.ID, "size", tree.Size())
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := st.awaitLease(runCtx, t.ID)
		stopReplica()
		<-replicaDone
		if err != nil {
			return
		}
		s.cfg.Logger.Info("taking over the sequencer of a tenant whose holder stopped", "tenant", t.ID)
		if err := s.holdTenant(runCtx, runCtx, t); err != nil {
			s.report(fmt.Errorf("tenant %s: taking over: %w", t.ID, err))
		}
	}()
	return nil
}

// appendBatch applies a batch of the log of record to a read-only tree.
func appendBatch(tree *merkle.Tree, tenant string, b *pipeline.Batch) error {
	size := tree.Size()
	end := b.First + uint64(len(b.Leaves))
	if end <= size {
		return nil
	}
	if b.First > size {
		return fmt.Errorf("read-only tree of %s: batch at %d but the tree holds %d", tenant, b.First, size)
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
func (st *hostedState) awaitLease(ctx context.Context, tenant string) error {
	released := make(chan struct{}, 1)
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
	for n := 0; ; n++ {
		woken := false
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if n%2 == 0 && freeSince.IsZero() {
				continue // every LeaseTTL/4, unless a deferred free lease is pending
			}
		case <-released:
			woken = true
		}
		if st.tryLease(ctx, tenant, woken, &freeSince) {
			return nil
		}
	}
}

// holding is a tenant whose sequencer and checkpointer run here.
type holding struct {
	t         tenancy.Tenant
	stopWork  context.CancelFunc // the sequencer and the checkpointer
	work      sync.WaitGroup
	stopLease context.CancelFunc // the renewal; it releases the lease when stopped
	lease     chan struct{}      // closed when the renewal returned
}

// holdTenant runs the tenant's sequencer and checkpointer here, renewing the lease.
func (s *Service) holdTenant(ctx, runCtx context.Context, t tenancy.Tenant) error {
	st := s.hosted
	dir := filepath.Join(s.cfg.DataDir, "tenants", t.ID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	seq, err := sequencer.New(sequencer.Config{Tenant: t.ID, LogID: t.LogID, Conn: s.nc, Dir: dir, Signer: s.cfg.Signer, Logger: s.cfg.Logger, Admit: st.quota})
	if err != nil {
		return err
	}
	workCtx, stopWork := context.WithCancel(runCtx)
	leaseCtx, stopLease := context.WithCancel(runCtx)
	h := &holding{t: t, stopWork: stopWork, stopLease: stopLease, lease: make(chan struct{})}
	s.mu.Lock()
	s.seqs[t.ID] = seq
	s.mu.Unlock()
	failed := make(chan error, 1)
	s.wg.Add(1)
	h.work.Add(1)
	go func() {
		defer s.wg.Done()
		defer h.work.Done()
		err := seq.Run(workCtx)
		switch {
		case err == nil:
		case errors.Is(err, sequencer.ErrFenced) && s.isHeld(t.ID):
			// Another process committed: this one steps down to a standby (in a
			// goroutine of its own, since stepping down waits for this one).
			failed <- err
			go s.loseTenant(t.ID, err)
		default:
			failed <- err
			s.report(fmt.Errorf("sequencer %s: %w", t.ID, err))
		}
	}()
	select {
	case <-seq.Ready():
	case err := <-failed:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
	s.goRun("lease "+t.ID, func() error {
		err := st.renew(leaseCtx, t.ID)
		close(h.lease)
		if errors.Is(err, errLeaseLost) {
			s.loseTenant(t.ID, err)
			return nil
		}
		return err
	})
	if err := s.http.AddTenant(s.hostedFront(t.ID, seq.Tree())); err != nil {
		return err
	}
	cp := &projections.Checkpointer{Dir: s.cfg.CheckpointDir, Tenant: t.ID, LogID: t.LogID, Tree: seq.Tree(), Signer: s.cfg.Signer,
		Every: s.cfg.CheckpointEvery, Heartbeat: s.cfg.CheckpointHeartbeat, Logger: s.cfg.Logger, DB: st.cfg.Store}
	if err := cp.Load(); err != nil {
		return err
	}
	s.mu.Lock()
	s.cps[t.ID] = cp
	s.mu.Unlock()
	h.work.Add(1)
	s.goRun("checkpoints "+t.ID, func() error { defer h.work.Done(); return cp.Run(workCtx) })
	// Registered last: stepDown may stop it only once everything above runs.
	st.mu.Lock()
	st.held[t.ID] = h
	st.mu.Unlock()
	return nil
}

// stepDown hands a tenant this process holds to another: it serves the tenant from
// a read-only tree, stops the sequencer and the checkpointer, then releases the lease
// (which wakes the standbys' watches). Only then may another process sequence, and
// the fence would refuse this one's commit anyway.
func (s *Service) stepDown(ctx context.Context, tenant, why string) error {
	h := s.hosted.take(tenant)
	if h == nil {
		return nil
	}
	return s.handOver(ctx, h, why)
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

// handOver is stepDown's work, for the one caller that took the holding h.
func (s *Service) handOver(ctx context.Context, h *holding, why string) error {
	tenant := h.t.ID
	s.cfg.Logger.Info("stepping down to a standby", "tenant", tenant, "why", why)
	if err := s.follow(ctx, ctx, h.t); err != nil {
		return err
	}
	h.stopWork()
	h.work.Wait()
	s.mu.Lock()
	seq := s.seqs[tenant]
	delete(s.seqs, tenant)
	delete(s.cps, tenant)
	s.mu.Unlock()
	telemetry.Current().ForgetTenant(tenant)
	// The tree store is closed before the lease goes: this process's own standby may
	// take the tenant back and open it again.
	var err error
	if seq != nil {
		err = seq.Close()
	}
	h.stopLease()
	<-h.lease
	return err
}

// errLeaseLost: another process holds a tenant's lease this one held, or it could
// not be renewed in time.
var errLeaseLost = errors.New("lost the sequencer lease")

// isHeld reports whether this process runs tenant's sequencer.
func (s *Service) isHeld(tenant string) bool {
	st := s.hosted
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.held[tenant] != nil
}

// loseTenant steps down from a tenant whose lease was lost or whose sequencer was
// fenced out: the process goes on serving its other tenants and this one read-only,
// as a standby that takes the lease again when it is free. Only when even that fails
// (the broker is unreachable) is the process told to stop.
//
// A sequencer fenced out and its lease lost may both report one loss: the first
// takes the holding and reports it (log line, svc.sequencer.leases.lost), the second
// finds nothing to step down from.
func (s *Service) loseTenant(tenant string, cause error) {
	h := s.hosted.take(tenant)
	if h == nil {
		return
	}
	s.cfg.Logger.Warn("lost a tenant's sequencer; serving it read-only as a standby", "tenant", tenant, "err", cause)
	telemetry.Current().LeaseLost(tenant)
	if err := s.handOver(s.hosted.runCtx, h, cause.Error()); err != nil && s.hosted.runCtx.Err() == nil {
		s.report(fmt.Errorf("tenant %s: %w; stepping down failed: %w", tenant, cause, err))
	}
}

// renew keeps the lease on tenant's sequencer; it returns errLeaseLost when another
// process holds it or it was not renewed within two thirds of the TTL (the broker's
// fence would refuse this sequencer's next commit anyway).
func (st *hostedState) renew(ctx context.Context, tenant string) error {
	tick := time.NewTicker(st.cfg.LeaseTTL / 3)
	defer tick.Stop()
	renewed := time.Now()
	var rev uint64
	for {
		select {
		case <-ctx.Done():
			if st.runCtx.Err() != nil { // the process stops: leave before releasing
				st.leave()
			}
			st.release(tenant, rev)
			return nil
		case <-tick.C:
		}
		e, err := st.kv.Get(ctx, tenant)
		if err == nil && string(e.Value()) == st.id {
			if rev, err = st.kv.Update(ctx, tenant, []byte(st.id), e.Revision()); err == nil {
				renewed = time.Now()
				continue
			}
		}
		if ctx.Err() != nil {
			st.release(tenant, rev)
			return nil
		}
		if err == nil {
			return fmt.Errorf("%w of %s: held by another process", errLeaseLost, tenant)
		}
		// A broker hiccup: keep trying while the lease is surely still ours.
		if time.Since(renewed) < st.cfg.LeaseTTL*2/3 {
			continue
		}
		return fmt.Errorf("%w of %s: not renewed for %s: %w", errLeaseLost, tenant, time.Since(renewed).Round(time.Millisecond), err)
	}
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
		Authorize: func(token string, mayAsk func() bool) bool {
			if st.view.Authorized(id, token) {
				return true
			}
			// Maybe a token another process created a moment ago: catch the view up
			// with the tenant's newest event (one broker round trip), within the
			// address's budget, then decide.
			if token == "" || !mayAsk() {
				return false
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return st.catchUp(ctx, id) && st.view.Authorized(id, token)
		},
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
