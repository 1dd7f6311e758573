package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/projections"
	"svc.dev/svc/pipeline"
)

// maxGroup caps the batches applied in one transaction.
const maxGroup = 1000

// ApplyLeaves applies committed batches (in stream order) to usage and log sizes in
// one transaction; a batch at or below the projection's position is skipped.
func (s *Store) ApplyLeaves(ctx context.Context, evs []projections.Event) error {
	if len(evs) == 0 {
		return nil
	}
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		for _, ev := range evs {
			fresh, err := claim(ctx, tx, "leaves", ev.Seq)
			if err != nil {
				return err
			}
			if !fresh {
				continue
			}
			n := int64(len(ev.Batch.Leaves))
			month := ev.Time.UTC().Format("2006-01")
			if _, err := tx.Exec(ctx, `INSERT INTO usage (tenant_id, month, appends) VALUES ($1, $2, $3)
				ON CONFLICT (tenant_id, month) DO UPDATE SET appends = usage.appends + excluded.appends`, ev.Tenant, month, n); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO log_sizes (tenant_id, total_leaves) VALUES ($1, $2)
				ON CONFLICT (tenant_id) DO UPDATE SET total_leaves = greatest(log_sizes.total_leaves, excluded.total_leaves)`,
				ev.Tenant, int64(ev.Batch.First)+n); err != nil {
				return err
			}
		}
		return nil
	})
}

// FollowLeaves applies SVC_LEAVES to the database from the projection's position on,
// a transaction per group of batches (flushed when the consumer has nothing pending,
// or at maxGroup), until ctx ends.
func (s *Store) FollowLeaves(ctx context.Context, js jetstream.JetStream, caughtUp func()) error {
	pos, err := s.Position(ctx, "leaves")
	if err != nil {
		return err
	}
	var group []projections.Event
	var flushErr error
	flush := func() error {
		if err := s.ApplyLeaves(ctx, group); err != nil {
			return fmt.Errorf("usage projection: %w", err)
		}
		group = group[:0]
		return nil
	}
	var reached func()
	if caughtUp != nil {
		// Called by Follow right after the batch that was last at the start: what is
		// grouped must be in the database before the caller hears of it.
		reached = func() {
			if flushErr = flush(); flushErr == nil {
				caughtUp()
			}
		}
	}
	err = projections.Follow(ctx, js, pipeline.LeavesPrefix+">", pos+1, func(ev projections.Event) error {
		if flushErr != nil {
			return flushErr
		}
		ev.Batch = &pipeline.Batch{First: ev.Batch.First, Leaves: make([]pipeline.Leaf, len(ev.Batch.Leaves))} // keep counts, drop data
		group = append(group, ev)
		if ev.Pending == 0 || len(group) >= maxGroup {
			return flush()
		}
		return nil
	}, reached)
	if err == nil {
		err = flushErr
	}
	if ctx.Err() != nil && flushErr == nil {
		return nil // stopped, possibly by caughtUp itself
	}
	return err
}
