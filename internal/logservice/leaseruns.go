package logservice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/pipeline"
)

// leaseRuns renews the leases of the tenants this process holds: one loop for the
// process (schedule), not a goroutine per tenant. It wakes at the earliest lease's
// next renewal (LeaseTTL/3 after the last was sent, renewRetry after a failed one;
// those due within leaseSlack together) and sends each due renewal from a
// short-lived goroutine of its own, so a slow or unanswered renewal (a lease bucket
// electing its leader) delays no other. The safety does not depend on the loop: a
// holder commits only before holding.validUntil, holdAfter past the sending of its
// last successful renewal (further only through electing), so renewals that are late
// or never sent hold its commits before the lease could be taken.
type leaseRuns struct {
	st    *hostedState
	log   *slog.Logger
	sched *schedule[*leaseRun]
	all   sync.WaitGroup // every lease until it is released: run waits for them as it ends
}

// leaseRun is one held tenant's lease. Its fields are the renewal's in flight, or,
// once it left the schedule, its finish's.
type leaseRun struct {
	h       *holding
	lost    func(error) // called with errLeaseLost when another process holds it
	lostErr error       // set when it did
	rev     uint64      // the revision of the last renewal (0: unknown)
	renewed time.Time   // when the last successful renewal was sent
	// held: commits held, and said so; set by the timer (holdAt) that says it the
	// moment validUntil passes, whatever the renewal in flight.
	held  atomic.Bool
	timer *time.Timer
	// unanswered: when the first of the renewals that went unanswered since the last
	// answered one was sent (zero: the last was answered). While the bucket's
	// replicas that answer show no other holder (its own value, or the key run out), commits go on until
	// Hosted.BucketElection after it (electing).
	unanswered time.Time
	electing   bool // commits go on past the lease through an election, and said so
}

// leaseSlack: renewals due within it are sent together, so that the loop wakes
// about once per slack, not once per lease.
const leaseSlack = 10 * time.Millisecond

func newLeaseRuns(st *hostedState, log *slog.Logger) *leaseRuns {
	return &leaseRuns{st: st, log: log, sched: newSchedule[*leaseRun](leaseSlack)}
}

// add renews h's lease, the first renewal at once (the sequencer's start used up
// part of the lease), until ctx ends; then the lease is released (after this process
// left the process bucket, when the whole process stops) and h.lease is closed. When
// another process holds the lease, h.lease is closed and lost is called.
func (l *leaseRuns) add(ctx context.Context, h *holding, lost func(error)) {
	r := &leaseRun{h: h, lost: lost, rev: h.rev, renewed: time.Now()}
	l.all.Add(1)
	l.sched.add(ctx, r, func() { l.finish(r) })
}

// run sends the due renewals until ctx ends, then waits until every lease is
// released.
func (l *leaseRuns) run(ctx context.Context) error {
	l.sched.run(ctx, func(it *scheduled[*leaseRun]) { go l.renew(it) })
	l.all.Wait()
	return nil
}

// renew sends one renewal of a lease and schedules the next. An attempt ends by the
// time commits are held, and within renewAttempt: a request sent while the bucket
// has no leader is never answered, and the attempt after it (renewRetry later, not
// LeaseTTL/3) is the one that lets held commits go on once the bucket elected its
// leader.
func (l *leaseRuns) renew(it *scheduled[*leaseRun]) {
	st, r, ctx := l.st, it.v, it.ctx
	tenant := r.h.t.ID
	deadline := time.Now().Add(renewAttempt)
	if hold := r.renewed.Add(st.holdAfter()); hold.After(time.Now()) && hold.Before(deadline) {
		deadline = hold
	}
	sent := time.Now()
	next, mine, err := st.renewOnce(ctx, tenant, r.rev, deadline)
	switch {
	case ctx.Err() != nil:
		if err == nil && mine {
			r.rev = next // release deletes the lease at its current revision
		}
		l.sched.after(it, time.Time{}, true)
	case err == nil && !mine:
		r.lostErr = fmt.Errorf("%w of %s: held by another process", errLeaseLost, tenant)
		l.sched.after(it, time.Time{}, true)
	case err == nil:
		r.rev, r.renewed, r.unanswered, r.electing = next, sent, time.Time{}, false
		l.holdAt(r, sent.Add(st.holdAfter()))
		if r.held.Swap(false) {
			l.log.Info("lease renewed again; commits go on", "tenant", tenant)
		}
		l.sched.after(it, sent.Add(st.cfg.LeaseTTL/3), false)
	default:
		until, lost := l.electing(ctx, r, sent, err)
		if lost != nil {
			r.lostErr = lost
			l.sched.after(it, time.Time{}, true)
			return
		}
		if until.After(time.Now()) && time.Unix(0, r.h.validUntil.Load()).Before(until) {
			r.held.Store(false) // a read lets them go on again
		}
		l.holdAt(r, until)
		l.sched.after(it, time.Now().Add(renewRetry), false)
	}
}

// holdAt makes until the end of r's commits (holding.validUntil) and arms the timer
// that says, the moment it passes, that they are held. A timer, not the renewal that
// finds it passed: a process whose connection is being re-established (to a node
// that accepts and never answers) blocks every call on it for the connect's timeout,
// and the line came up to 2 s after the commits were held
// (docs/measurements/2026-12-08-cluster-crash-gap.md, the full suite's network cut).
func (l *leaseRuns) holdAt(r *leaseRun, until time.Time) {
	r.h.validUntil.Store(until.UnixNano())
	if r.timer != nil {
		r.timer.Stop()
	}
	renewed, tenant := r.renewed, r.h.t.ID
	r.timer = time.AfterFunc(time.Until(until), func() {
		if time.Now().UnixNano() >= r.h.validUntil.Load() && !r.held.Swap(true) {
			l.log.Warn("lease not renewed in time; commits held until it is", "tenant", tenant, "for", time.Since(renewed).Round(time.Millisecond))
		}
	})
}

// electing decides, after a renewal of r's lease sent at sent failed with err, until
// when its holder may commit: holdAfter past its last successful renewal, or, while
// the renewals go unanswered (the lease bucket has no leader: a node's crash) and a
// read of the key, which any of the bucket's replicas answers, shows the lease still
// this process's or held by nobody (run out, or released by a successor: a deleted
// key reads as not found), Hosted.BucketElection past the first unanswered renewal.
// So the bucket's election costs no commits: the commits to
// SVC_LEAVES, fenced, land only through a quorum of the nodes that also hold the
// bucket, and a standby waits a lease TTL after the bucket's return before it takes
// a lease that ran out (leaseGrace), by when this holder renewed it. A holder cut
// off entirely gets no read either and holds its commits at its lease's end, as
// before; an answer that is not a renewal, or a read showing the key written by
// another process since, ends the extension at once, and the latter (lost) steps
// the holder down.
func (l *leaseRuns) electing(ctx context.Context, r *leaseRun, sent time.Time, err error) (until time.Time, lost error) {
	st, tenant := l.st, r.h.t.ID
	until = r.renewed.Add(st.holdAfter())
	if !pipeline.Transient(err) || ctx.Err() != nil {
		r.unanswered, r.electing = time.Time{}, false
		return until, nil
	}
	if r.unanswered.IsZero() {
		r.unanswered = sent
	}
	bound := r.unanswered.Add(st.cfg.BucketElection)
	if !bound.After(until) || !time.Now().Before(bound) {
		return until, nil
	}
	// The read ends by the lease's end too, so a holder cut off holds (and says so)
	// on time rather than a read's timeout later.
	deadline := time.Now().Add(renewAttempt)
	if until.After(time.Now()) && until.Before(deadline) {
		deadline = until
	}
	rctx, cancel := context.WithDeadline(ctx, deadline)
	e, gerr := st.kv.Get(rctx, tenant)
	cancel()
	switch {
	case gerr == nil && string(e.Value()) != st.id:
		return until, fmt.Errorf("%w of %s: written by another process while the lease bucket did not answer", errLeaseLost, tenant)
	case gerr != nil && !errors.Is(gerr, jetstream.ErrKeyNotFound):
		return until, nil // no replica answers: cut off, or the whole bucket gone
	}
	if !r.electing {
		r.electing = true
		l.log.Info("lease bucket not answering, its replicas show no other holder; commits go on until it answers", "tenant", tenant, "at most", time.Until(bound).Round(time.Millisecond), "err", err)
	}
	return bound, nil
}

// finish ends r's lease once it left the schedule: lost, it closes h.lease and
// reports the loss; else it hands the tenant over (the lease deleted while still
// this process's; this process leaves the process bucket first when the whole
// process stops) and closes h.lease.
func (l *leaseRuns) finish(r *leaseRun) {
	defer l.all.Done()
	if r.timer != nil {
		r.timer.Stop()
	}
	if r.lostErr != nil {
		close(r.h.lease)
		r.lost(r.lostErr)
		return
	}
	if l.st.runCtx.Err() != nil {
		l.stopping(r.h)
	}
	l.st.release(r.h.t.ID, r.rev)
	close(r.h.lease)
}

// stopping readies the release of h's lease when the whole process stops (its run
// context ended, which also stops h's sequencer and checkpointer and the feed's
// lanes, each on its own): it waits until h's work has stopped and the feed has
// deleted its lanes (each at most stopWait), then leaves the process bucket. The
// release used to go first, and a standby it woke could take the tenant while this
// process's sequencer was still committing (its next commit then fenced: a
// step-down and a takeover more) and while the tenant's requests were still pending
// in this process's lane.
func (l *leaseRuns) stopping(h *holding) {
	work := make(chan struct{})
	go func() { h.work.Wait(); close(work) }()
	timeout := time.After(stopWait)
	select {
	case <-work:
	case <-timeout:
		l.log.Warn("the sequencer did not stop in time; releasing its lease all the same", "tenant", h.t.ID, "after", stopWait)
	}
	if l.st.feed != nil {
		select {
		case <-l.st.feed.stopped:
		case <-time.After(stopWait):
		}
	}
	l.st.leave()
}

// stopWait bounds each of stopping's waits: a sequencer or a lane that does not stop
// in time keeps the lease from the others no longer.
const stopWait = 5 * time.Second

// errLeaseLost: another process holds a tenant's lease this one held, or it could
// not be renewed in time.
var errLeaseLost = errors.New("lost the sequencer lease")
