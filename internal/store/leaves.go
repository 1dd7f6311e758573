package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"svc.dev/svc/internal/projections"
)

// maxGroup caps the batches applied in one transaction.
const maxGroup = 1000

// copyAbove is the number of rows from which a group is written with COPY (into a
// temporary table merged in one statement) rather than row by row.
const copyAbove = 16

// ApplyLeaves applies committed batches (in stream order) to usage and log sizes in
// one transaction: batches at or below the projection's position (read under a row
// lock, so processes running the projection at once serialise) are skipped, the rest
// are summed per tenant and month, and written row by row or, for many rows (a
// rebuild of many tenants), with COPY.
func (s *Store) ApplyLeaves(ctx context.Context, evs []projections.Event) error {
	return s.applyLeaves(ctx, evs, 0)
}

// applyLeaves is ApplyLeaves that moves the position to at least through (past
// messages set aside as dead letters) when that is past it.
func (s *Store) applyLeaves(ctx context.Context, evs []projections.Event, through uint64) error {
	if len(evs) == 0 && through == 0 {
		return nil
	}
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO projection_positions (name, stream_seq) VALUES ('leaves', 0) ON CONFLICT DO NOTHING`); err != nil {
			return err
		}
		var pos int64
		if err := tx.QueryRow(ctx, `SELECT stream_seq FROM projection_positions WHERE name = 'leaves' FOR UPDATE`).Scan(&pos); err != nil {
			return err
		}
		type key struct{ tenant, month string }
		usage := map[key]int64{}
		sizes := map[string]int64{}
		top := max(pos, int64(through))
		for _, ev := range evs {
			if int64(ev.Seq) <= pos {
				continue
			}
			n := int64(len(ev.Batch.Leaves))
			usage[key{ev.Tenant, ev.Time.UTC().Format("2006-01")}] += n
			sizes[ev.Tenant] = max(sizes[ev.Tenant], int64(ev.Batch.First)+n)
			top = max(top, int64(ev.Seq))
		}
		if top == pos {
			return nil
		}
		if len(usage)+len(sizes) > copyAbove {
			uRows := make([][]any, 0, len(usage))
			for k, n := range usage {
				uRows = append(uRows, []any{k.tenant, k.month, n})
			}
			sRows := make([][]any, 0, len(sizes))
			for t, n := range sizes {
				sRows = append(sRows, []any{t, n})
			}
			if err := copyMerge(ctx, tx, "usage_in", "tenant_id text, month text, appends bigint", []string{"tenant_id", "month", "appends"}, uRows,
				`INSERT INTO usage (tenant_id, month, appends) SELECT tenant_id, month, appends FROM usage_in
				ON CONFLICT (tenant_id, month) DO UPDATE SET appends = usage.appends + excluded.appends`); err != nil {
				return err
			}
			if err := copyMerge(ctx, tx, "sizes_in", "tenant_id text, total_leaves bigint", []string{"tenant_id", "total_leaves"}, sRows,
				`INSERT INTO log_sizes (tenant_id, total_leaves) SELECT tenant_id, total_leaves FROM sizes_in
				ON CONFLICT (tenant_id) DO UPDATE SET total_leaves = greatest(log_sizes.total_leaves, excluded.total_leaves)`); err != nil {
				return err
			}
		} else {
			for k, n := range usage {
				if _, err := tx.Exec(ctx, `INSERT INTO usage (tenant_id, month, appends) VALUES ($1, $2, $3)
					ON CONFLICT (tenant_id, month) DO UPDATE SET appends = usage.appends + excluded.appends`, k.tenant, k.month, n); err != nil {
					return err
				}
			}
			for t, n := range sizes {
				if _, err := tx.Exec(ctx, `INSERT INTO log_sizes (tenant_id, total_leaves) VALUES ($1, $2)
					ON CONFLICT (tenant_id) DO UPDATE SET total_leaves = greatest(log_sizes.total_leaves, excluded.total_leaves)`, t, n); err != nil {
					return err
				}
			}
		}
		_, err := tx.Exec(ctx, `UPDATE projection_positions SET stream_seq = $1 WHERE name = 'leaves'`, top)
		return err
	})
}

// copyMerge COPYs rows into a temporary table dropped at commit, then runs merge.
func copyMerge(ctx context.Context, tx pgx.Tx, table, columns string, names []string, rows [][]any, merge string) error {
	if _, err := tx.Exec(ctx, "CREATE TEMP TABLE "+table+" ("+columns+") ON COMMIT DROP"); err != nil {
		return err
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{table}, names, pgx.CopyFromRows(rows)); err != nil {
		return fmt.Errorf("copy into %s: %w", table, err)
	}
	_, err := tx.Exec(ctx, merge)
	return err
}
