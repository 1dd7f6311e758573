package tenancy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/pipeline"
)

// catchUps shares the broker round trips of CatchUp: the requests for one tenant
// that arrive while a round is asking the broker wait for the round after it (which
// starts when that one ends: it reflects the stream at or after their arrival), so a
// flood costs at most two rounds in flight per tenant, whatever its rate.
type catchUps struct {
	mu     sync.Mutex
	rounds map[string]*roundPair
	stream jetstream.Stream // SVC_ADMIN, once looked up
}

type roundPair struct{ running, next *round }

type round struct {
	done chan struct{}
	err  error
}

// roundTimeout bounds one round's broker request and wait for the view.
const roundTimeout = 5 * time.Second

// CatchUp returns once the view applied the newest event on tenant id's admin subject
// (at once when there is none): what another process published about the tenant a
// moment ago is then in the view. Concurrent calls for one tenant share one broker
// round trip (see catchUps).
func (v *View) CatchUp(ctx context.Context, js jetstream.JetStream, id string) error {
	c := &v.catch
	c.mu.Lock()
	if c.rounds == nil {
		c.rounds = map[string]*roundPair{}
	}
	p := c.rounds[id]
	var r *round
	switch {
	case p == nil:
		r = &round{done: make(chan struct{})}
		c.rounds[id] = &roundPair{running: r}
		go v.runRound(js, id, r)
	case p.next != nil:
		r = p.next
	default:
		r = &round{done: make(chan struct{})}
		p.next = r
	}
	c.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return fmt.Errorf("tenancy: catching up with tenant %s: %w", id, ctx.Err())
	}
}

// runRound asks the broker for id's newest admin event, waits for the view to apply
// it, then starts the round queued meanwhile, if any.
func (v *View) runRound(js jetstream.JetStream, id string, r *round) {
	ctx, cancel := context.WithTimeout(context.Background(), roundTimeout)
	r.err = v.catchUpOnce(ctx, js, id)
	cancel()
	close(r.done)
	c := &v.catch
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.rounds[id]
	if p.next == nil {
		delete(c.rounds, id)
		return
	}
	p.running, p.next = p.next, nil
	go v.runRound(js, id, p.running)
}

func (v *View) catchUpOnce(ctx context.Context, js jetstream.JetStream, id string) error {
	c := &v.catch
	c.mu.Lock()
	stream := c.stream
	c.mu.Unlock()
	if stream == nil {
		s, err := js.Stream(ctx, pipeline.AdminStream)
		if err != nil {
			return fmt.Errorf("tenancy: %w", err)
		}
		c.mu.Lock()
		c.stream, stream = s, s
		c.mu.Unlock()
	}
	last, err := stream.GetLastMsgForSubject(ctx, pipeline.AdminSubject(id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("tenancy: %w", err)
	}
	return v.WaitFor(ctx, last.Sequence)
}
