package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"svc.dev/svc/internal/tenancy"
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
	return s.applyAdminEvents(ctx, []adminEvent{{seq: seq, at: at, ev: e}}, seq)
}

// adminEvent is a decoded SVC_ADMIN message.
type adminEvent struct {
	seq uint64
	at  time.Time
	ev  tenancy.Event
}

// decodeAdmin reads one SVC_ADMIN message; what fails here is poison.
func decodeAdmin(data []byte) (adminEvent, error) {
	e, err := tenancy.DecodeEvent(data)
	if err != nil {
		return adminEvent{}, err
	}
	at, err := receipt.ParseTime(e.At)
	if err != nil {
		return adminEvent{}, fmt.Errorf("admin event %s: at %q: %w", e.ID, e.At, err)
	}
	return adminEvent{at: at, ev: e}, nil
}

// applyAdminEvents applies evs (in stream order) in one transaction, each only when
// it is past the projection's position, and moves the position to through.
func (s *Store) applyAdminEvents(ctx context.Context, evs []adminEvent, through uint64) error {
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		for _, a := range evs {
			fresh, err := claim(ctx, tx, "admin", a.seq)
			if err != nil {
				return err
			}
			if !fresh {
				continue
			}
			e := a.ev
			if _, err := tx.Exec(ctx, `INSERT INTO audit (stream_seq, id, at, actor, action, tenant_id, detail) VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT DO NOTHING`, int64(a.seq), e.ID, a.at, e.Actor, e.Action, e.TenantID, e.Detail); err != nil {
				return err
			}
			if err := applyAdmin(ctx, tx, a.seq, a.at, e); err != nil {
				return err
			}
		}
		_, err := claim(ctx, tx, "admin", through)
		return err
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
