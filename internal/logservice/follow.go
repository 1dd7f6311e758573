package logservice

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"svc.dev/svc/internal/projections"
	"svc.dev/svc/internal/tenancy"
	"svc.dev/svc/merkle"
	"svc.dev/svc/pipeline"
)

// A standby's read-only tree that follows a tenant's log of record until its
// lease is free, and the take-over.

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
