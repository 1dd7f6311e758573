package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// LogOfLogsEntry is a leaf of the log of logs: a tenant's signed checkpoint note.
type LogOfLogsEntry struct {
	Tenant string
	Note   []byte
}

// AllCheckpointNotes returns every tenant's latest C2SP checkpoint note.
func (s *Store) AllCheckpointNotes(ctx context.Context) (map[string][]byte, error) {
	rows, err := s.Pool.Query(ctx, `SELECT tenant_id, note FROM checkpoint_notes`)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for rows.Next() {
		var t string
		var n []byte
		if err := rows.Scan(&t, &n); err != nil {
			rows.Close()
			return nil, err
		}
		out[t] = n
	}
	return out, rows.Err()
}

// AppendLogOfLogs records entries as leaves first, first+1, ... of the log of logs, all
// or none; a leaf already recorded (another runner wrote it) is an error.
func (s *Store) AppendLogOfLogs(ctx context.Context, first uint64, entries []LogOfLogsEntry) error {
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		for i, e := range entries {
			if _, err := tx.Exec(ctx, `INSERT INTO log_of_logs (idx, tenant_id, note) VALUES ($1, $2, $3)`, int64(first)+int64(i), e.Tenant, e.Note); err != nil {
				return fmt.Errorf("log of logs leaf %d: %w", first+uint64(i), err)
			}
		}
		return nil
	})
}

// LogOfLogsSince returns at most limit leaves from index from on, in order.
func (s *Store) LogOfLogsSince(ctx context.Context, from uint64, limit int) ([]LogOfLogsEntry, error) {
	rows, err := s.Pool.Query(ctx, `SELECT idx, tenant_id, note FROM log_of_logs WHERE idx >= $1 ORDER BY idx LIMIT $2`, int64(from), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []LogOfLogsEntry
	for rows.Next() {
		var idx int64
		var e LogOfLogsEntry
		if err := rows.Scan(&idx, &e.Tenant, &e.Note); err != nil {
			return nil, err
		}
		if uint64(idx) != from+uint64(len(out)) {
			return nil, fmt.Errorf("log of logs: leaf %d missing", from+uint64(len(out)))
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// PutLogOfLogsCheckpoint records the log of logs' checkpoint of size unless a larger
// one is recorded.
func (s *Store) PutLogOfLogsCheckpoint(ctx context.Context, size uint64, note []byte) error {
	_, err := s.Pool.Exec(ctx, `INSERT INTO log_of_logs_checkpoint (tree_size, note) VALUES ($1, $2)
		ON CONFLICT (one) DO UPDATE SET tree_size = excluded.tree_size, note = excluded.note
		WHERE log_of_logs_checkpoint.tree_size <= excluded.tree_size`, int64(size), note)
	return err
}

// LogOfLogsCheckpoint is the log of logs' latest checkpoint; nil when none.
func (s *Store) LogOfLogsCheckpoint(ctx context.Context) (uint64, []byte, error) {
	var size int64
	var note []byte
	err := s.Pool.QueryRow(ctx, `SELECT tree_size, note FROM log_of_logs_checkpoint`).Scan(&size, &note)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil, nil
	}
	return uint64(size), note, err
}

// LogOfLogsLeaf is a leaf of the log of logs with its index.
type LogOfLogsLeaf struct {
	Index uint64
	LogOfLogsEntry
}

// LogOfLogsLatest returns each tenant's latest leaf below index below, in no order.
func (s *Store) LogOfLogsLatest(ctx context.Context, below uint64) ([]LogOfLogsLeaf, error) {
	rows, err := s.Pool.Query(ctx, `SELECT DISTINCT ON (tenant_id) idx, tenant_id, note FROM log_of_logs
		WHERE idx < $1 ORDER BY tenant_id, idx DESC`, int64(below))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []LogOfLogsLeaf
	for rows.Next() {
		var idx int64
		var l LogOfLogsLeaf
		if err := rows.Scan(&idx, &l.Tenant, &l.Note); err != nil {
			return nil, err
		}
		l.Index = uint64(idx)
		out = append(out, l)
	}
	return out, rows.Err()
}

// LogOfLogsLatestOf returns tenant's latest leaf below index below; false when it has
// none.
func (s *Store) LogOfLogsLatestOf(ctx context.Context, tenant string, below uint64) (LogOfLogsLeaf, bool, error) {
	var idx int64
	l := LogOfLogsLeaf{LogOfLogsEntry: LogOfLogsEntry{Tenant: tenant}}
	err := s.Pool.QueryRow(ctx, `SELECT idx, note FROM log_of_logs WHERE tenant_id = $1 AND idx < $2 ORDER BY idx DESC LIMIT 1`,
		tenant, int64(below)).Scan(&idx, &l.Note)
	if errors.Is(err, pgx.ErrNoRows) {
		return l, false, nil
	}
	l.Index = uint64(idx)
	return l, err == nil, err
}
