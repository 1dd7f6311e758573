package store

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// Run keeps the projections of SVC_ADMIN and SVC_LEAVES in the database until ctx
// ends; it returns the first error of either.
func (s *Store) Run(ctx context.Context, js jetstream.JetStream) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- s.FollowAdmin(ctx, js, nil) }()
	go func() { errc <- s.FollowLeaves(ctx, js, nil) }()
	err := <-errc
	cancel()
	return errors.Join(err, <-errc)
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
		var once bool
		err := p.follow(fctx, js, func() {
			if !once {
				once = true
				close(done)
				cancel()
			}
		})
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
