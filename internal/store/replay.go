package store

import (
	"context"
	"errors"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// Run keeps the projections of SVC_ADMIN and SVC_LEAVES in the database until ctx
// ends, as handlers on one Watermill router (router.go). A database that does not
// answer is waited for, never skipped; Run returns an error only when the router
// cannot start.
func (s *Store) Run(ctx context.Context, js jetstream.JetStream) error {
	return s.runRouter(ctx, js, s.Router, []projection{adminProjection, leavesProjection}, nil)
}

// FollowAdmin applies SVC_ADMIN to the database from the projection's position on,
// until ctx ends. caughtUp, when not nil, is called once the events the stream held
// at the start are applied.
func (s *Store) FollowAdmin(ctx context.Context, js jetstream.JetStream, caughtUp func()) error {
	return s.follow(ctx, js, adminProjection, caughtUp)
}

// FollowLeaves applies SVC_LEAVES to the database as FollowAdmin does SVC_ADMIN, a
// transaction per group of batches.
func (s *Store) FollowLeaves(ctx context.Context, js jetstream.JetStream, caughtUp func()) error {
	return s.follow(ctx, js, leavesProjection, caughtUp)
}

// follow runs one projection on a router until ctx ends, calling caughtUp once what
// its stream held at the start is committed.
func (s *Store) follow(ctx context.Context, js jetstream.JetStream, p projection, caughtUp func()) error {
	var reached func(string, uint64)
	if caughtUp != nil {
		target, err := lastOnSubject(ctx, js, p)
		if err != nil {
			return err
		}
		pos, err := s.Position(ctx, p.position)
		if err != nil {
			return err
		}
		var once sync.Once
		if pos >= target {
			once.Do(caughtUp)
		}
		reached = func(_ string, last uint64) {
			if last >= target {
				once.Do(caughtUp)
			}
		}
	}
	return s.runRouter(ctx, js, s.Router, []projection{p}, reached)
}

// lastOnSubject is the stream sequence of the last message p reads now (0: none).
func lastOnSubject(ctx context.Context, js jetstream.JetStream, p projection) (uint64, error) {
	stream, err := js.Stream(ctx, p.stream)
	if err != nil {
		return 0, err
	}
	m, err := stream.GetLastMsgForSubject(ctx, p.subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return m.Sequence, nil
}

// Rebuild applies both streams from the projections' positions (the start, in an
// empty database) up to what the streams hold now, then returns: `svc replay db`.
// progress, when not nil, is called with the name of each projection that caught up.
func (s *Store) Rebuild(ctx context.Context, js jetstream.JetStream, progress func(name string)) error {
	for _, p := range []struct {
		name   string
		follow func(context.Context, jetstream.JetStream, func()) error
	}{{"admin", s.FollowAdmin}, {"leaves", s.FollowLeaves}} {
		fctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		err := p.follow(fctx, js, func() { close(done); cancel() })
		cancel()
		if err != nil {
			return err
		}
		select {
		case <-done:
		default:
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return errors.New("replay of " + p.name + " stopped before it caught up")
		}
		if progress != nil {
			progress(p.name)
		}
	}
	return nil
}
