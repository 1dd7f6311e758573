package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"svc.dev/svc/client"
	"svc.dev/svc/internal/projections"
	"svc.dev/svc/internal/tenancy"
	"svc.dev/svc/receipt"
)

// Usage is a tenant's appends in a month and its log size, as the projection of
// SVC_LEAVES holds them.
func (s *Store) Usage(ctx context.Context, tenant, month string) (appends, totalLeaves uint64, err error) {
	var a, n int64
	err = s.Pool.QueryRow(ctx, `SELECT coalesce((SELECT appends FROM usage WHERE tenant_id = $1 AND month = $2), 0),
		coalesce((SELECT total_leaves FROM log_sizes WHERE tenant_id = $1), 0)`, tenant, month).Scan(&a, &n)
	return uint64(a), uint64(n), err
}

// MonthUsage is one tenant's line of a month's usage.
type MonthUsage struct {
	Tenant      string
	Appends     uint64
	TotalLeaves uint64
}

// UsageByTenant lists every tenant's appends in month and log size, by tenant id.
func (s *Store) UsageByTenant(ctx context.Context, month string) (map[string]MonthUsage, error) {
	rows, err := s.Pool.Query(ctx, `SELECT t.id, coalesce(u.appends, 0), coalesce(l.total_leaves, 0)
		FROM tenants t LEFT JOIN usage u ON u.tenant_id = t.id AND u.month = $1 LEFT JOIN log_sizes l ON l.tenant_id = t.id`, month)
	if err != nil {
		return nil, err
	}
	out := map[string]MonthUsage{}
	for rows.Next() {
		var u MonthUsage
		var a, n int64
		if err := rows.Scan(&u.Tenant, &a, &n); err != nil {
			return nil, err
		}
		u.Appends, u.TotalLeaves = uint64(a), uint64(n)
		out[u.Tenant] = u
	}
	return out, rows.Err()
}

// Audit returns audit entries newest first: a tenant's, or every tenant's when
// tenant is "".
func (s *Store) Audit(ctx context.Context, tenant string, limit int) ([]tenancy.Event, error) {
	rows, err := s.Pool.Query(ctx, `SELECT id, at, actor, action, tenant_id, detail FROM audit
		WHERE $1 = '' OR tenant_id = $1 ORDER BY stream_seq DESC LIMIT $2`, tenant, limit)
	if err != nil {
		return nil, err
	}
	out := []tenancy.Event{}
	for rows.Next() {
		var e tenancy.Event
		var at time.Time
		if err := rows.Scan(&e.ID, &at, &e.Actor, &e.Action, &e.TenantID, &e.Detail); err != nil {
			return nil, err
		}
		e.At = receipt.FormatTime(at)
		out = append(out, e)
	}
	return out, rows.Err()
}

// ErrRootDiffers: a checkpoint at this size exists with another root; the store
// never signs a second root for one size.
var ErrRootDiffers = errors.New("a checkpoint of this size exists with a different root")

// CheckpointAt returns the checkpoint of tenant at size, if any.
func (s *Store) CheckpointAt(ctx context.Context, tenant string, size uint64) (*client.CheckpointFile, error) {
	cps, err := s.checkpoints(ctx, `WHERE tenant_id = $1 AND tree_size = $2`, tenant, int64(size))
	if err != nil || len(cps) == 0 {
		return nil, err
	}
	return &cps[0], nil
}

// CheckpointsSince lists tenant's checkpoints with treeSize > since, ascending, at
// most limit.
func (s *Store) CheckpointsSince(ctx context.Context, tenant string, since uint64, limit int) ([]client.CheckpointFile, error) {
	return s.checkpoints(ctx, `WHERE tenant_id = $1 AND tree_size > $2 ORDER BY tree_size LIMIT $3`, tenant, int64(since), limit)
}

// LatestCheckpoint is tenant's checkpoint of the largest size, or nil.
func (s *Store) LatestCheckpoint(ctx context.Context, tenant string) (*client.CheckpointFile, error) {
	cps, err := s.checkpoints(ctx, `WHERE tenant_id = $1 ORDER BY tree_size DESC LIMIT 1`, tenant)
	if err != nil || len(cps) == 0 {
		return nil, err
	}
	return &cps[0], nil
}

func (s *Store) checkpoints(ctx context.Context, where string, args ...any) ([]client.CheckpointFile, error) {
	rows, err := s.Pool.Query(ctx, `SELECT c.tenant_id, coalesce(t.log_id, ''), c.tree_size, c.root_hash, c.signed_at, c.envelope
		FROM checkpoints c LEFT JOIN tenants t ON t.id = c.tenant_id `+where, args...)
	if err != nil {
		return nil, err
	}
	out := []client.CheckpointFile{}
	for rows.Next() {
		var cp client.CheckpointFile
		var size int64
		var at time.Time
		var env []byte
		if err := rows.Scan(&cp.Tenant, &cp.LogID, &size, &cp.RootHash, &at, &env); err != nil {
			return nil, err
		}
		cp.TreeSize, cp.SignedAt = uint64(size), receipt.FormatTime(at)
		if err := json.Unmarshal(env, &cp.Envelope); err != nil {
			return nil, fmt.Errorf("checkpoint %s/%d: %w", cp.Tenant, size, err)
		}
		out = append(out, cp)
	}
	return out, rows.Err()
}

// PutCheckpoint records a signed checkpoint. A new size is inserted; an existing size
// is replaced (a heartbeat's re-signature) only when its root is unchanged, and
// ErrRootDiffers is returned otherwise, in one statement, so no race lets a second
// root in.
func (s *Store) PutCheckpoint(ctx context.Context, cp client.CheckpointFile) error {
	at, err := receipt.ParseTime(cp.SignedAt)
	if err != nil {
		return fmt.Errorf("checkpoint signedAt %q: %w", cp.SignedAt, err)
	}
	env, err := json.Marshal(cp.Envelope)
	if err != nil {
		return err
	}
	tag, err := s.Pool.Exec(ctx, `INSERT INTO checkpoints (tenant_id, tree_size, root_hash, signed_at, envelope) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (tenant_id, tree_size) DO UPDATE SET signed_at = excluded.signed_at, envelope = excluded.envelope
		WHERE checkpoints.root_hash = excluded.root_hash`, cp.Tenant, int64(cp.TreeSize), cp.RootHash, at, env)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: tenant %s, size %d", ErrRootDiffers, cp.Tenant, cp.TreeSize)
	}
	return nil
}

// ThinCheckpoints deletes tenant's checkpoint rows that projections.ThinCheckpoints
// (the retention rule of files, memory and rows) does not keep, and returns how many.
func (s *Store) ThinCheckpoints(ctx context.Context, tenant string) (int, error) {
	rows, err := s.Pool.Query(ctx, `SELECT tree_size FROM checkpoints WHERE tenant_id = $1`, tenant)
	if err != nil {
		return 0, err
	}
	sizes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (uint64, error) {
		var n int64
		err := r.Scan(&n)
		return uint64(n), err
	})
	if err != nil {
		return 0, err
	}
	drop := projections.ThinCheckpoints(sizes)
	if len(drop) == 0 {
		return 0, nil
	}
	del := make([]int64, len(drop))
	for i, n := range drop {
		del[i] = int64(n)
	}
	tag, err := s.Pool.Exec(ctx, `DELETE FROM checkpoints WHERE tenant_id = $1 AND tree_size = ANY($2)`, tenant, del)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

// PutCheckpointNote records tenant's C2SP checkpoint note of size: it replaces the
// one held unless that one is of a larger size (a process behind never moves the
// published checkpoint back).
func (s *Store) PutCheckpointNote(ctx context.Context, tenant string, size uint64, note []byte) error {
	_, err := s.Pool.Exec(ctx, `INSERT INTO checkpoint_notes (tenant_id, tree_size, note) VALUES ($1, $2, $3)
		ON CONFLICT (tenant_id) DO UPDATE SET tree_size = excluded.tree_size, note = excluded.note, updated_at = now()
		WHERE checkpoint_notes.tree_size <= excluded.tree_size`, tenant, int64(size), note)
	return err
}

// LatestCheckpointNote is tenant's latest C2SP checkpoint note; nil when none is
// published.
func (s *Store) LatestCheckpointNote(ctx context.Context, tenant string) ([]byte, error) {
	var note []byte
	err := s.Pool.QueryRow(ctx, `SELECT note FROM checkpoint_notes WHERE tenant_id = $1`, tenant).Scan(&note)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return note, err
}
