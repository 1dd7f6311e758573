package logservice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// leaseRuns renews the leases of the tenants this process holds: one goroutine for
// the process, not one per tenant. It wakes at the earliest lease's next renewal
// (LeaseTTL/3 after the last was sent, renewRetry after a failed one) and sends each
// due renewal from a short-lived goroutine of its own, so a slow or unanswered
// renewal (a lease bucket electing its leader) delays no other. The safety does not
// depend on the loop: a holder commits only before holding.validUntil, holdAfter past
// the sending of its last successful renewal, so renewals that are late or never
// sent hold its commits before the lease could be taken.
type leaseRuns struct {
	st   *hostedState
	log  *slog.Logger
	mu   sync.Mutex
	runs map[*leaseRun]bool
	kick chan struct{}
	all  sync.WaitGroup // every run until its lease is released: run waits for them as it ends
}

// leaseRun is one held tenant's lease in leaseRuns.
type leaseRun struct {
	h       *holding
	ctx     context.Context // its end (stopLease) releases the lease
	lost    func(error)     // called with errLeaseLost when another process holds it
	rev     uint64          // the revision of the last renewal (0: unknown)
	renewed time.Time       // when the last successful renewal was sent
	held    bool            // commits held, and said so
	next    time.Time       // when the next renewal is due
	busy    bool            // a renewal is in flight
	gone    bool            // ctx ended: released once no renewal is in flight
}

func newLeaseRuns(st *hostedState, log *slog.Logger) *leaseRuns {
	return &leaseRuns{st: st, log: log, runs: map[*leaseRun]bool{}, kick: make(chan struct{}, 1)}
}

// add renews h's lease, the first renewal at once (the sequencer's start used up
// part of the lease), until ctx ends; then the lease is released (after this process
// left the process bucket, when the whole process stops) and h.lease is closed. When
// another process holds the lease, h.lease is closed and lost is called.
func (l *leaseRuns) add(ctx context.Context, h *holding, lost func(error)) {
	r := &leaseRun{h: h, ctx: ctx, lost: lost, rev: h.rev, renewed: time.Now(), next: time.Now()}
	l.all.Add(1)
	l.mu.Lock()
	l.runs[r] = true
	l.mu.Unlock()
	context.AfterFunc(ctx, func() {
		l.mu.Lock()
		r.gone = true
		idle := !r.busy && l.runs[r]
		if idle {
			delete(l.runs, r)
		}
		l.mu.Unlock()
		if idle {
			l.release(r)
		}
	})
	l.wake()
}

func (l *leaseRuns) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// run sends the due renewals until ctx ends, then waits until every lease is
// released.
func (l *leaseRuns) run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			l.all.Wait()
			return nil
		case <-l.kick:
		case <-t.C:
		}
		now := time.Now()
		for _, r := range l.due(now) {
			go l.renew(r)
		}
		t.Reset(l.wait(time.Now()))
	}
}

// leaseSlack: renewals due within it are sent together, so that the loop wakes
// about once per slack, not once per lease.
const leaseSlack = 10 * time.Millisecond

// due marks busy and returns the runs whose renewal is due by now + leaseSlack.
func (l *leaseRuns) due(now time.Time) []*leaseRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*leaseRun
	for r := range l.runs {
		if !r.busy && !r.gone && !now.Add(leaseSlack).Before(r.next) {
			r.busy = true
			out = append(out, r)
		}
	}
	return out
}

// wait is how long until the earliest renewal not in flight (a minute when none:
// add and every renewal's end wake the loop).
func (l *leaseRuns) wait(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := time.Minute
	for r := range l.runs {
		if !r.busy && !r.gone {
			d = min(d, r.next.Sub(now))
		}
	}
	return max(d, 0)
}

// renew sends one renewal of r's lease and schedules the next. An attempt ends by
// the time commits are held, and within renewAttempt: a request sent while the
// bucket has no leader is never answered, and the attempt after it (renewRetry
// later, not LeaseTTL/3) is the one that lets held commits go on once the bucket
// elected its leader.
func (l *leaseRuns) renew(r *leaseRun) {
	st, tenant := l.st, r.h.t.ID
	deadline := time.Now().Add(renewAttempt)
	if hold := r.renewed.Add(st.holdAfter()); !r.held && hold.Before(deadline) {
		deadline = hold
	}
	sent := time.Now()
	next, mine, err := st.renewOnce(r.ctx, tenant, r.rev, deadline)
	var lostErr error
	l.mu.Lock()
	r.busy = false
	switch {
	case r.ctx.Err() != nil:
	case err == nil && !mine:
		lostErr = fmt.Errorf("%w of %s: held by another process", errLeaseLost, tenant)
	case err == nil:
		r.rev, r.renewed, r.next = next, sent, sent.Add(st.cfg.LeaseTTL/3)
		r.h.validUntil.Store(sent.Add(st.holdAfter()).UnixNano())
		if r.held {
			r.held = false
			l.log.Info("lease renewed again; commits go on", "tenant", tenant)
		}
	default:
		r.next = time.Now().Add(renewRetry)
		if !r.held && time.Since(r.renewed) >= st.holdAfter() {
			r.held = true
			l.log.Warn("lease not renewed in time; commits held until it is", "tenant", tenant, "for", time.Since(r.renewed).Round(time.Millisecond), "err", err)
		}
	}
	finished := (r.ctx.Err() != nil || lostErr != nil) && l.runs[r]
	if finished {
		delete(l.runs, r)
	}
	l.mu.Unlock()
	switch {
	case finished && lostErr != nil:
		close(r.h.lease)
		r.lost(lostErr)
		l.all.Done()
	case finished:
		l.release(r)
	default:
		l.wake()
	}
}

// release hands r's tenant over (its lease deleted while still this process's;
// this process leaves the process bucket first when the whole process stops) and
// closes h.lease.
func (l *leaseRuns) release(r *leaseRun) {
	if l.st.runCtx.Err() != nil {
		l.st.leave()
	}
	l.st.release(r.h.t.ID, r.rev)
	close(r.h.lease)
	l.all.Done()
}

// errLeaseLost: another process holds a tenant's lease this one held, or it could
// not be renewed in time.
var errLeaseLost = errors.New("lost the sequencer lease")
