package logservice

import (
	"context"
	"sync"
	"time"

	"svc.dev/svc/internal/projections"
)

// checkpointRuns publishes the checkpoints of the tenants this process holds: one
// goroutine for the process, not one per tenant, waking at the earliest tenant's
// next tick (projections.Checkpointer.Step: First until its first checkpoint, then
// Every) and running the due ticks in a bounded pool of short-lived goroutines, so an
// active tenant costs a goroutine only while its checkpoint is being signed.
type checkpointRuns struct {
	mu    sync.Mutex
	runs  map[*checkpointRun]bool
	kick  chan struct{}
	pool  chan struct{}  // a slot per tick in flight
	ticks sync.WaitGroup // the ticks in flight: run waits for them as it ends
}

// checkpointRun is one tenant's checkpointer in checkpointRuns.
type checkpointRun struct {
	cp   *projections.Checkpointer
	ctx  context.Context // the tenant's work: its end stops the run
	next time.Time       // when its next tick is due
	busy bool            // a tick is in flight
	gone bool            // ctx ended: removed once no tick is in flight
	done func()          // called once it is removed
}

// checkpointTicksAtOnce bounds the ticks in flight (each waits on the signer and the
// database); a tick past it waits for a slot.
const checkpointTicksAtOnce = 16

func newCheckpointRuns() *checkpointRuns {
	return &checkpointRuns{runs: map[*checkpointRun]bool{}, kick: make(chan struct{}, 1), pool: make(chan struct{}, checkpointTicksAtOnce)}
}

// add runs cp's ticks, the first at once, until ctx ends; then, once no tick of it is
// in flight, done is called (the caller may then call cp.Tick itself).
func (c *checkpointRuns) add(ctx context.Context, cp *projections.Checkpointer, done func()) {
	r := &checkpointRun{cp: cp, ctx: ctx, next: time.Now(), done: done}
	c.mu.Lock()
	c.runs[r] = true
	c.mu.Unlock()
	context.AfterFunc(ctx, func() {
		c.mu.Lock()
		r.gone = true
		finished := !r.busy && c.runs[r]
		if finished {
			delete(c.runs, r)
		}
		c.mu.Unlock()
		if finished {
			r.done()
		}
	})
	c.wake()
}

func (c *checkpointRuns) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// run starts the due ticks until ctx ends, then waits for those in flight.
func (c *checkpointRuns) run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	defer c.ticks.Wait()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.kick:
		case <-t.C:
		}
		for _, r := range c.due(time.Now()) {
			select {
			case c.pool <- struct{}{}:
			case <-ctx.Done():
				c.release(r)
				continue
			}
			c.ticks.Add(1)
			go c.tick(r)
		}
		t.Reset(c.wait(time.Now()))
	}
}

// due marks busy and returns the runs whose tick is due at now.
func (c *checkpointRuns) due(now time.Time) []*checkpointRun {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*checkpointRun
	for r := range c.runs {
		if !r.busy && !r.gone && !now.Before(r.next) {
			r.busy = true
			out = append(out, r)
		}
	}
	return out
}

// wait is how long until the earliest tick not in flight (a minute when none is
// waiting: add wakes the loop).
func (c *checkpointRuns) wait(now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := time.Minute
	for r := range c.runs {
		if !r.busy && !r.gone {
			d = min(d, r.next.Sub(now))
		}
	}
	return max(d, 0)
}

// release gives back r, due but not ticked (the process stops).
func (c *checkpointRuns) release(r *checkpointRun) {
	c.mu.Lock()
	r.busy = false
	finished := r.gone && c.runs[r]
	if finished {
		delete(c.runs, r)
	}
	c.mu.Unlock()
	if finished {
		r.done()
	}
}

// tick runs one of r's ticks in a pool slot and schedules the next; r's end during
// it removes r.
func (c *checkpointRuns) tick(r *checkpointRun) {
	defer c.ticks.Done()
	wait := r.cp.Step(r.ctx)
	<-c.pool
	c.mu.Lock()
	r.busy, r.next = false, time.Now().Add(wait)
	finished := r.gone && c.runs[r]
	if finished {
		delete(c.runs, r)
	}
	c.mu.Unlock()
	if finished {
		r.done()
		return
	}
	c.wake()
}
