package logservice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// leaseRuns renews the leases of the tenants this process holds: one loop for the
// process (schedule), not a goroutine per tenant. It wakes at the earliest lease's
// next renewal (LeaseTTL/3 after the last was sent, renewRetry after a failed one;
// those due within leaseSlack together) and sends each due renewal from a
// short-lived goroutine of its own, so a slow or unanswered renewal (a lease bucket
// electing its leader) delays no other. The safety does not depend on the loop: a
// holder commits only before holding.validUntil, holdAfter past the sending of its
// last successful renewal, so renewals that are late or never sent hold its commits
// before the lease could be taken.
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
	held    bool        // commits held, and said so
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
	if hold := r.renewed.Add(st.holdAfter()); !r.held && hold.Before(deadline) {
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
		r.rev, r.renewed = next, sent
		r.h.validUntil.Store(sent.Add(st.holdAfter()).UnixNano())
		if r.held {
			r.held = false
			l.log.Info("lease renewed again; commits go on", "tenant", tenant)
		}
		l.sched.after(it, sent.Add(st.cfg.LeaseTTL/3), false)
	default:
		if !r.held && time.Since(r.renewed) >= st.holdAfter() {
			r.held = true
			l.log.Warn("lease not renewed in time; commits held until it is", "tenant", tenant, "for", time.Since(r.renewed).Round(time.Millisecond), "err", err)
		}
		l.sched.after(it, time.Now().Add(renewRetry), false)
	}
}

// finish ends r's lease once it left the schedule: lost, it closes h.lease and
// reports the loss; else it hands the tenant over (the lease deleted while still
// this process's; this process leaves the process bucket first when the whole
// process stops) and closes h.lease.
func (l *leaseRuns) finish(r *leaseRun) {
	defer l.all.Done()
	if r.lostErr != nil {
		close(r.h.lease)
		r.lost(r.lostErr)
		return
	}
	if l.st.runCtx.Err() != nil {
		l.st.leave()
	}
	l.st.release(r.h.t.ID, r.rev)
	close(r.h.lease)
}

// errLeaseLost: another process holds a tenant's lease this one held, or it could
// not be renewed in time.
var errLeaseLost = errors.New("lost the sequencer lease")
