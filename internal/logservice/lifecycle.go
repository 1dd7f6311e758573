package logservice

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/client"
	"svc.dev/svc/internal/tenancy"
	"svc.dev/svc/pipeline"
)

// The lifecycle of a hosted tenant (docs/design/log-service.md): known once the view
// reports it, which costs a map entry; active from its first request to this process
// (a sequencer here when the lease is free, else a read-only tree), until it has been
// quiet for QuietPeriod; then stopped, down to the map entry again.

// known records a tenant the view reports; nothing runs for it until its first
// request.
func (st *hostedState) known(t tenancy.Tenant) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.started[t.ID] = true
}

// lock is tenant's lifecycle lock: its start, stop, hand-over and takeover never
// overlap. Taken before st.mu and s.mu, never while either is held.
func (st *hostedState) lock(tenant string) *sync.Mutex {
	st.mu.Lock()
	defer st.mu.Unlock()
	l := st.locks[tenant]
	if l == nil {
		l = &sync.Mutex{}
		st.locks[tenant] = l
	}
	return l
}

// lookup is the HTTP front's Lookup: it waits (at most five seconds) for the view to
// apply the newest administrative event of tenant id, when the broker holds one (a
// tenant another process just created is served once its creation is answered
// there), then starts the tenant here unless it is active already.
func (s *Service) lookup(ctx context.Context, id string) (bool, error) {
	st := s.hosted
	if !client.ValidTenant(id) {
		return false, nil
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if !st.catchUp(cctx, id) {
		return false, nil
	}
	st.mu.Lock()
	known := st.started[id]
	st.mu.Unlock()
	if !known {
		return false, nil
	}
	return true, s.activate(ctx, id)
}

// startTimeout bounds a tenant's start (recovery of its tree store included).
const startTimeout = 30 * time.Second

// activate starts tenant id here unless it is active already. A failure is the
// tenant's alone: it is listed in /health and counted, and the next request tries
// again.
func (s *Service) activate(ctx context.Context, id string) error {
	st := s.hosted
	st.askRoom()
	st.hurry(id) // a stop of id under way: this start waits for it
	l := st.lock(id)
	l.Lock()
	defer l.Unlock()
	st.mu.Lock()
	active := st.held[id] != nil || st.follows[id] != nil
	st.mu.Unlock()
	if active {
		return nil
	}
	t, ok := st.view.Tenant(id)
	if !ok {
		return fmt.Errorf("tenant %s is not in the view", id)
	}
	st.touch(id)
	sctx, cancel := context.WithTimeout(st.runCtx, startTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel) // a caller that gives up stops the start
	defer stop()
	err := s.serveHosted(sctx, t)
	st.refuse(id, err, s.cfg.Logger)
	return err
}

// minIdleToEvict is how long a tenant must have been without a request or batch
// before makeRoom may stop it early. A request still in flight does not lose its
// append: what its stopped sequencer did not take up stays in SVC_APPEND, and quiesce
// starts the tenant again when it finds it there. MaxActive is a soft cap all the
// same: a burst of more tenants than that within this time all start.
const minIdleToEvict = 3 * time.Second

// askRoom asks the reaper to stop the least recently used tenants when MaxActive or
// more are active here: a start never waits for another tenant's stop.
func (st *hostedState) askRoom() {
	st.mu.Lock()
	full := len(st.held)+len(st.follows) >= st.cfg.MaxActive
	st.mu.Unlock()
	if full {
		select {
		case st.roomWanted <- struct{}{}:
		default:
		}
	}
}

// makeRoom stops the least recently used active tenants while MaxActive or more are
// active here (not counting id), those idle for minIdleToEvict at least, up to
// evictAtOnce at a time. It runs in the reaper, holding no tenant's lock.
func (s *Service) makeRoom(id string) {
	victims := s.hosted.victims(id, time.Now())
	sem := make(chan struct{}, evictAtOnce)
	var wg sync.WaitGroup
	for _, v := range victims {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if v.held {
				s.quiesce(v.id, nil)
			} else {
				s.stopFollowing(v.id, nil, nil)
			}
		}()
	}
	wg.Wait()
}

// evictAtOnce bounds the tenants makeRoom stops at once.
const evictAtOnce = 16

// victim is an active tenant makeRoom stops.
type victim struct {
	id   string
	held bool // its sequencer runs here (else a read-only tree)
	at   time.Time
}

// victims lists, least recently used first, the tenants to stop so that one fewer
// than MaxActive stay active (never id, nor one used within minIdleToEvict).
func (st *hostedState) victims(id string, now time.Time) []victim {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := len(st.held) + len(st.follows)
	if n < st.cfg.MaxActive {
		return nil
	}
	var all []victim
	for t, h := range st.held {
		if at := later(st.lastUsed(t), h.seq.LastActive()); t != id && now.Sub(at) >= minIdleToEvict {
			all = append(all, victim{t, true, at})
		}
	}
	for t, f := range st.follows {
		if at := later(st.lastUsed(t), time.Unix(0, f.used.Load())); t != id && now.Sub(at) >= minIdleToEvict {
			all = append(all, victim{t, false, at})
		}
	}
	slices.SortFunc(all, func(a, b victim) int { return a.at.Compare(b.at) })
	return all[:min(len(all), n-st.cfg.MaxActive+1)]
}

// refuse records (err non-nil) or clears tenant's start failure.
func (st *hostedState) refuse(tenant string, err error, log *slog.Logger) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if err == nil {
		delete(st.refused, tenant)
		return
	}
	st.refused[tenant] = err.Error()
	st.tel.StartRefused()
	log.Warn("tenant could not be started; its requests get 503 until a start succeeds", "tenant", tenant, "err", err)
}

// maxProblems caps the tenants /health names.
const maxProblems = 50

// problems lists the tenants whose last start failed (at most maxProblems).
func (st *hostedState) problems() map[string]string {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := map[string]string{}
	for _, id := range slices.Sorted(maps.Keys(st.refused)) {
		if len(out) == maxProblems {
			break
		}
		out[id] = st.refused[id]
	}
	return out
}

// touch records a request to tenant: it stays active for QuietPeriod more.
func (st *hostedState) touch(tenant string) {
	now := time.Now().UnixNano()
	if v, ok := st.used.Load(tenant); ok {
		v.(*atomic.Int64).Store(now)
		return
	}
	a := new(atomic.Int64)
	a.Store(now)
	if v, loaded := st.used.LoadOrStore(tenant, a); loaded {
		v.(*atomic.Int64).Store(now)
	}
}

// lastUsed is when tenant was last requested here.
func (st *hostedState) lastUsed(tenant string) time.Time {
	if v, ok := st.used.Load(tenant); ok {
		return time.Unix(0, v.(*atomic.Int64).Load())
	}
	return time.Time{}
}

// reap stops the tenants that have been quiet for QuietPeriod, checking every
// QuietPeriod/4, and makes room when a start finds MaxActive tenants active: one
// goroutine for the process, whatever the number of tenants.
func (s *Service) reap(ctx context.Context) error {
	st := s.hosted
	tick := time.NewTicker(max(st.cfg.QuietPeriod/4, 10*time.Millisecond))
	defer tick.Stop()
	// A burst of starts goes past MaxActive (the cap is soft); once its tenants have
	// been idle minIdleToEvict, the least recently used are stopped.
	room := time.NewTicker(minIdleToEvict)
	defer room.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-st.roomWanted:
			s.makeRoom("")
			continue
		case <-room.C:
			st.askRoom()
			continue
		case <-tick.C:
		}
		held, follows := st.quiet(time.Now())
		for _, id := range held {
			s.quiesce(id, nil)
		}
		for _, id := range follows {
			s.stopFollowing(id, nil, nil)
		}
	}
}

// quiet lists the active tenants with no request here and no batch for QuietPeriod.
func (st *hostedState) quiet(now time.Time) (held, follows []string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for id, h := range st.held {
		if now.Sub(later(st.lastUsed(id), h.seq.LastActive())) >= st.cfg.QuietPeriod {
			held = append(held, id)
		}
	}
	for id, f := range st.follows {
		if now.Sub(later(st.lastUsed(id), time.Unix(0, f.used.Load()))) >= st.cfg.QuietPeriod {
			follows = append(follows, id)
		}
	}
	return held, follows
}

// quiesce stops the sequencer this process runs for tenant: quiet (cause nil), or
// failed with cause (then recorded as the tenant's problem). The consumer on
// SVC_APPEND is deleted before the lease is released (after, it could be the next
// holder's); then an append that came in meanwhile starts the tenant again.
func (s *Service) quiesce(tenant string, cause error) {
	st := s.hosted
	// Looked at once the tenant's lock is released: a start meanwhile need not wait
	// for this broker round trip.
	if s.stopHeld(tenant, cause) && cause == nil && st.appendsWaiting(tenant) {
		go func() { _ = s.activate(st.runCtx, tenant) }()
	}
}

// stopHeld is quiesce's stop, under tenant's lock; false when there was nothing to
// stop.
func (s *Service) stopHeld(tenant string, cause error) bool {
	st := s.hosted
	l := st.lock(tenant)
	l.Lock()
	defer l.Unlock()
	if cause == nil && st.runCtx.Err() != nil {
		return false // the process stops: Close does it
	}
	h := st.take(tenant)
	if h == nil {
		return false
	}
	defer st.stopped(tenant, h)
	if cause == nil {
		s.cfg.Logger.Info("tenant quiet; its sequencer stops until its next request", "tenant", tenant, "quiet", st.cfg.QuietPeriod)
	}
	s.unhold(h, true, cause == nil)
	s.cfg.Telemetry.ForgetTenant(tenant)
	if cause != nil {
		st.refuse(tenant, cause, s.cfg.Logger)
	}
	return true
}

// lastCheckpoint publishes the checkpoint of h's tree as its stopped sequencer left
// it, when one is due. A tenant stopped for quiet or to make room often stops within
// the checkpointer's First of its last append, cancelling the tick that would have
// signed it; no other process publishes it until the tenant starts again. The lease
// is still held here, so it is signed before another process may append. It waits
// at most lastCheckpointWait, and no longer once a start of the tenant waits for
// this stop (hurry: a slow signer or database would hold that start, and its
// request, for as long); on failure the next holder's checkpointer publishes it, at
// once when it starts.
func (s *Service) lastCheckpoint(h *holding) {
	if h.cp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), lastCheckpointWait)
	defer cancel()
	go func() {
		select {
		case <-h.hurry:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := h.cp.Tick(ctx); err != nil {
		s.cfg.Logger.Warn("last checkpoint not published before the tenant stopped; its next start publishes it", "tenant", h.t.ID, "err", err)
	}
}

// lastCheckpointWait bounds lastCheckpoint (a variable for the tests).
var lastCheckpointWait = 5 * time.Second

// appendsWaiting reports whether SVC_APPEND holds a request for tenant that no
// sequencer took up (a work queue deletes what was acknowledged).
func (st *hostedState) appendsWaiting(tenant string) bool {
	ctx, cancel := context.WithTimeout(st.runCtx, 5*time.Second)
	defer cancel()
	stream, err := st.feed.appendStream(ctx)
	if err != nil {
		return true // unsure: a start costs little
	}
	_, err = stream.GetLastMsgForSubject(ctx, pipeline.AppendSubject(tenant))
	return !errors.Is(err, jetstream.ErrMsgNotFound)
}

// stopFollowing stops tenant's read-only tree: quiet (f nil: whichever runs), or the
// follower f failed with cause. The wait for its lease stops with it.
func (s *Service) stopFollowing(tenant string, f *following, cause error) {
	st := s.hosted
	l := st.lock(tenant)
	l.Lock()
	defer l.Unlock()
	st.mu.Lock()
	cur := st.follows[tenant]
	if cur == nil || (f != nil && cur != f) {
		st.mu.Unlock()
		return
	}
	delete(st.follows, tenant)
	st.mu.Unlock()
	s.http.RemoveTenant(tenant)
	cur.stop()
	if cause != nil {
		st.refuse(tenant, fmt.Errorf("read-only tree: %w", cause), s.cfg.Logger)
	}
}

// holderFile, in the data directory, names the process that last ran there (its
// lease id).
const holderFile = "lease-holder"

// reclaim releases the leases the previous process on this data directory held
// when it died (kill -9, a crash): that process is gone, so its tenants need not
// wait out the lease TTL before their next request starts them here, and its entry
// in the process bucket goes. Then it records this process's lease id there. Two
// processes never share a data directory; if they did, the commit fence would still
// refuse the second writer.
func (st *hostedState) reclaim(ctx context.Context, dataDir string, log *slog.Logger) error {
	path := filepath.Join(dataDir, holderFile)
	prev, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if len(prev) > 0 && string(prev) != st.id {
		// Its entry in the process bucket goes too: it lives for a lease TTL, and
		// the balancer would hand tenants over to that dead process meanwhile
		// (each such hand-over a stop of a sequencer in the middle of the
		// restart's first appends, and a wait of LeaseTTL/2 for a taker).
		if err := st.members.Delete(ctx, memberKey(string(prev))); err != nil {
			log.Warn("removing the previous process from the process bucket failed; the balancer may defer to it for a lease TTL", "err", err)
		}
		n, err := st.releaseHeldBy(ctx, string(prev))
		if err != nil {
			log.Warn("releasing the leases of the previous process failed; its tenants start once the leases run out", "err", err)
		} else if n > 0 {
			log.Info("released the leases the previous process on this data directory held", "leases", n, "process", string(prev))
		}
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(st.id), 0o644)
}

// releaseHeldBy deletes every lease whose holder is id (at the revision read, so a
// lease taken meanwhile stays) and returns how many.
func (st *hostedState) releaseHeldBy(ctx context.Context, id string) (int, error) {
	keys, err := st.kv.ListKeys(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = keys.Stop() }()
	n := 0
	for k := range keys.Keys() {
		e, err := st.kv.Get(ctx, k)
		if err != nil || string(e.Value()) != id {
			continue
		}
		if st.kv.Delete(ctx, k, jetstream.LastRevision(e.Revision())) == nil {
			n++
		}
	}
	return n, nil
}

// wakeEvery is how often a process looks in SVC_APPEND for requests of tenants that
// no process runs.
const wakeEvery = 200 * time.Millisecond

// wakeOnAppend starts a tenant that no process runs when an append for it reaches
// the broker by another way than this process's HTTP front (a gateway or SDK
// publishing on svc.append.<tenant>, svc log-admin import). Such a request waits in
// SVC_APPEND, which no consumer's filter covers; every wakeEvery, one look at the
// stream's subjects with requests (one broker round trip, whatever the number of
// tenants or appends) finds it, and the tenant starts here unless another process
// holds its lease (that one's consumer takes it up).
func (s *Service) wakeOnAppend(ctx context.Context) error {
	st := s.hosted
	stream, err := st.js.Stream(ctx, pipeline.AppendStream)
	if err != nil {
		return fmt.Errorf("stream %s: %w", pipeline.AppendStream, err)
	}
	w := &waker{s: s, stream: stream, waking: map[string]bool{}, elsewhere: map[string]time.Time{}}
	s.goRun("wake on append", func() error { w.run(ctx); return nil })
	return nil
}

// waker is wakeOnAppend's loop.
type waker struct {
	s         *Service
	stream    jetstream.Stream
	mu        sync.Mutex
	waking    map[string]bool      // tenants being started
	elsewhere map[string]time.Time // tenants another process held when last asked, until when to believe it
}

// maxWaking bounds the tenants wakeOnAppend starts at once.
const maxWaking = 64

func (w *waker) run(ctx context.Context) {
	tick := time.NewTicker(wakeEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := w.stream.Info(qctx, jetstream.WithSubjectFilter(pipeline.AppendPrefix+"*"))
		cancel()
		if err != nil {
			continue // the broker's retries are the append path's to report
		}
		now := time.Now()
		w.mu.Lock()
		maps.DeleteFunc(w.elsewhere, func(_ string, until time.Time) bool { return now.After(until) })
		w.mu.Unlock()
		for subj := range info.State.Subjects {
			id := strings.TrimPrefix(subj, pipeline.AppendPrefix)
			if w.wanted(id, now) {
				go w.wake(ctx, id)
			}
		}
	}
}

// wanted reports (and marks) whether tenant id, which has requests waiting, should
// be started here now.
func (w *waker) wanted(id string, now time.Time) bool {
	st := w.s.hosted
	st.mu.Lock()
	idle := st.started[id] && st.held[id] == nil && st.follows[id] == nil
	st.mu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if !idle || w.waking[id] || len(w.waking) >= maxWaking || now.Before(w.elsewhere[id]) {
		return false
	}
	delete(w.elsewhere, id)
	w.waking[id] = true
	return true
}

// wake starts tenant id here unless another process holds its lease.
func (w *waker) wake(ctx context.Context, id string) {
	st := w.s.hosted
	defer func() { w.mu.Lock(); delete(w.waking, id); w.mu.Unlock() }()
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	e, err := st.kv.Get(gctx, id)
	cancel()
	if err == nil && string(e.Value()) != st.id {
		w.mu.Lock()
		w.elsewhere[id] = time.Now().Add(st.cfg.LeaseTTL / 3)
		w.mu.Unlock()
		return
	}
	if err := w.s.activate(ctx, id); err != nil {
		w.s.cfg.Logger.Warn("starting a tenant for an append over the broker failed", "tenant", id, "err", err)
	}
}
