package store

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"svc.dev/svc/pipeline"
	"svc.dev/svc/pipeline/consume"
)

// DeadHandlers are the projections as handlers `svc exports dead replay` can hand
// their dead letters to.
func (s *Store) DeadHandlers() []consume.DeadHandler {
	return []consume.DeadHandler{deadHandler{s, HandlerAdmin}, deadHandler{s, HandlerLeaves}}
}

type deadHandler struct {
	s    *Store
	name string
}

func (d deadHandler) Handler() string { return d.name }

// ReplayLetter applies a letter the projection moved past. It is below the saved
// position, so it is applied on its own path, not through the position check: once,
// recorded in dead_applied in the same transaction. A letter that still cannot be
// decoded is an error and stays in SVC_DEAD.
func (d deadHandler) ReplayLetter(ctx context.Context, l consume.DeadLetter, payload []byte) error {
	seq, err := strconv.ParseUint(l.SourceSeq, 10, 64)
	if err != nil {
		return fmt.Errorf("dead letter %d: source seq %q: %w", l.Seq, l.SourceSeq, err)
	}
	var apply func(pgx.Tx) error
	switch d.name {
	case HandlerAdmin:
		a, err := decodeAdmin(payload)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrPoison, err)
		}
		apply = func(tx pgx.Tx) error {
			e := a.ev
			if _, err := tx.Exec(ctx, `INSERT INTO audit (stream_seq, id, at, actor, action, tenant_id, detail) VALUES ($1, $2, $3, $4, $5, $6, $7)
				ON CONFLICT DO NOTHING`, int64(seq), e.ID, a.at, e.Actor, e.Action, e.TenantID, e.Detail); err != nil {
				return err
			}
			return applyAdmin(ctx, tx, seq, a.at, e)
		}
	default:
		b, err := pipeline.DecodeBatch(payload)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrPoison, err)
		}
		n := int64(len(b.Leaves))
		apply = func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO usage (tenant_id, month, appends) VALUES ($1, $2, $3)
				ON CONFLICT (tenant_id, month) DO UPDATE SET appends = usage.appends + excluded.appends`, l.Tenant, l.At.UTC().Format("2006-01"), n); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO log_sizes (tenant_id, total_leaves) VALUES ($1, $2)
				ON CONFLICT (tenant_id) DO UPDATE SET total_leaves = greatest(log_sizes.total_leaves, excluded.total_leaves)`, l.Tenant, int64(b.First)+n)
			return err
		}
	}
	return pgx.BeginFunc(ctx, d.s.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO dead_applied (handler, stream_seq) VALUES ($1, $2) ON CONFLICT DO NOTHING`, d.name, int64(seq))
		if err != nil || tag.RowsAffected() == 0 {
			return err // already applied: the letter only has to leave SVC_DEAD
		}
		return apply(tx)
	})
}
