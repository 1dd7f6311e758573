package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"svc.dev/svc/internal/tenancy"
	"svc.dev/svc/pipeline"
	"svc.dev/svc/receipt"
)

// ApplyAdmin applies the administrative event at stream sequence seq to tenants,
// tokens and the audit trail, in one transaction with the projection's position; an
// event at or below the position is skipped.
func (s *Store) ApplyAdmin(ctx context.Context, seq uint64, e tenancy.Event) error {
	at, err := receipt.ParseTime(e.At)
	if err != nil {
		return fmt.Errorf("admin event %s: at %q: %w", e.ID, e.At, err)
	}
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		fresh, err := claim(ctx, tx, "admin", seq)
		if err != nil || !fresh {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO audit (stream_seq, id, at, actor, action, tenant_id, detail) VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT DO NOTHING`, int64(seq), e.ID, at, e.Actor, e.Action, e.TenantID, e.Detail); err != nil {
			return err
		}
		return applyAdmin(ctx, tx, seq, at, e)
	})
}

func applyAdmin(ctx context.Context, tx pgx.Tx, seq uint64, at time.Time, e tenancy.Event) error {
	var err error
	switch e.Action {
	case tenancy.ActionTenantAdd:
		plan := e.Plan
		if plan == "" {
			plan = tenancy.PlanFree
		}
		_, err = tx.Exec(ctx, `INSERT INTO tenants (id, log_id, plan, created_at, admin_seq) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (id) DO NOTHING`, e.TenantID, e.LogID, plan, at, int64(seq))
	case tenancy.ActionTenantDisable:
		_, err = tx.Exec(ctx, `UPDATE tenants SET disabled = true, admin_seq = $2 WHERE id = $1`, e.TenantID, int64(seq))
	case tenancy.ActionPlanSet:
		if e.Plan != "" {
			_, err = tx.Exec(ctx, `UPDATE tenants SET plan = $2, admin_seq = $3 WHERE id = $1`, e.TenantID, e.Plan, int64(seq))
		}
	case tenancy.ActionTokenAdd:
		if e.TokenHash != "" {
			_, err = tx.Exec(ctx, `INSERT INTO tokens (hash, tenant_id, label, created_at, admin_seq)
				SELECT $1, $2, $3, $4, $5 WHERE EXISTS (SELECT 1 FROM tenants WHERE id = $2)
				ON CONFLICT (hash) DO NOTHING`, e.TokenHash, e.TenantID, e.Label, at, int64(seq))
		}
	case tenancy.ActionTokenRevoke:
		if e.TokenHash != "" {
			_, err = tx.Exec(ctx, `UPDATE tokens SET revoked_at = $3, admin_seq = $4 WHERE hash = $1 AND tenant_id = $2 AND revoked_at IS NULL`,
				e.TokenHash, e.TenantID, at, int64(seq))
		}
	}
	return err
}

// FollowAdmin applies SVC_ADMIN to the database from the projection's position on,
// until ctx ends (nil) or an error. caughtUp, when not nil, is called once the
// events the stream held at the start are applied.
func (s *Store) FollowAdmin(ctx context.Context, js jetstream.JetStream, caughtUp func()) error {
	err := s.followAdmin(ctx, js, caughtUp)
	if ctx.Err() != nil {
		return nil // stopped, possibly by caughtUp itself
	}
	return err
}

func (s *Store) followAdmin(ctx context.Context, js jetstream.JetStream, caughtUp func()) error {
	pos, err := s.Position(ctx, "admin")
	if err != nil {
		return err
	}
	stream, err := js.Stream(ctx, pipeline.AdminStream)
	if err != nil {
		return err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return err
	}
	if caughtUp != nil && info.State.LastSeq <= pos {
		caughtUp()
		caughtUp = nil
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{pipeline.AdminPrefix + ">"},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy, OptStartSeq: pos + 1,
	})
	if err != nil {
		return err
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) && ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("admin projection: %w", err)
		}
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		ev, err := tenancy.DecodeEvent(m.Data())
		if err != nil {
			return fmt.Errorf("admin projection: stream seq %d: %w", md.Sequence.Stream, err)
		}
		if err := s.ApplyAdmin(ctx, md.Sequence.Stream, ev); err != nil {
			return fmt.Errorf("admin projection: stream seq %d: %w", md.Sequence.Stream, err)
		}
		if caughtUp != nil && md.Sequence.Stream >= info.State.LastSeq {
			caughtUp()
			caughtUp = nil
		}
	}
}
