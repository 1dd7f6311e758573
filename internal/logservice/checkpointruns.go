package logservice

import (
	"context"
	"sync"
	"time"

	"svc.dev/svc/internal/projections"
)

// checkpointRuns publishes the checkpoints of the tenants this process holds: one
// loop for the process (schedule), not a goroutine per tenant, waking at the earliest
// tenant's next tick (projections.Checkpointer.Step: First until its first
// checkpoint, then Every) and running the due ticks in a bounded pool of short-lived
// goroutines, so an active tenant costs a goroutine only while its checkpoint is
// being signed.
type checkpointRuns struct {
	sched *schedule[*projections.Checkpointer]
	pool  chan struct{}  // a slot per tick in flight
	ticks sync.WaitGroup // the ticks in flight: run waits for them as it ends
}

// checkpointTicksAtOnce bounds the ticks in flight (each waits on the signer and the
// database); a tick past it waits for a slot.
const checkpointTicksAtOnce = 16

func newCheckpointRuns() *checkpointRuns {
	return &checkpointRuns{sched: newSchedule[*projections.Checkpointer](0), pool: make(chan struct{}, checkpointTicksAtOnce)}
}

// add runs cp's ticks, the first at once, until ctx ends; then, once no tick of it is
// in flight, done is called (the caller may then call cp.Tick itself).
func (c *checkpointRuns) add(ctx context.Context, cp *projections.Checkpointer, done func()) {
	c.sched.add(ctx, cp, done)
}

// run runs the due ticks until ctx ends, then waits for those in flight.
func (c *checkpointRuns) run(ctx context.Context) error {
	defer c.ticks.Wait()
	c.sched.run(ctx, func(it *scheduled[*projections.Checkpointer]) {
		select {
		case c.pool <- struct{}{}:
		case <-ctx.Done(): // the process stops
			c.sched.after(it, time.Now(), false)
			return
		case <-it.ctx.Done(): // the tenant stops: its stop (holding its lock) waits for no other tenant's tick
			c.sched.after(it, time.Now(), false)
			return
		}
		c.ticks.Add(1)
		go func() {
			defer c.ticks.Done()
			wait := it.v.Step(it.ctx)
			<-c.pool
			c.sched.after(it, time.Now().Add(wait), false)
		}()
	})
	return nil
}
