package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"svc.dev/svc/internal/telemetry"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrationLock is the advisory lock key held while migrating.
const migrationLock = 0x5f5c_0001

// Store is the database of the hosted log.
type Store struct {
	Pool *pgxpool.Pool

	// Router tunes the projection handlers Run, Rebuild and Follow* start.
	Router RouterConfig
	// Telemetry receives the leaves projection's lag (svc.projection.lag{consumer=
	// "store.leaves"}); nil: none. Set before Run.
	Telemetry *telemetry.Telemetry

	statsOnce sync.Once
	st        *Stats
}

// Open connects to url (a PostgreSQL URL or key=value string) and applies the
// migrations the database lacks.
func Open(ctx context.Context, url string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("database at %s:%d does not answer: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	s := &Store{Pool: pool}
	if err := s.Migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the pool.
func (s *Store) Close() { s.Pool.Close() }

// Migrate applies, in order, every embedded migration not yet recorded in
// schema_migrations, each in its own transaction.
func (s *Store) Migrate(ctx context.Context) error {
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrationLock); err != nil {
		return fmt.Errorf("migrations: lock: %w", err)
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", migrationLock)
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	slices.Sort(names)
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("migration %s: name must start with a number", base)
		}
		var done bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)", v).Scan(&done); err != nil {
			return err
		}
		if done {
			continue
		}
		sql, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, string(sql)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", v, base)
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %s: %w", base, err)
		}
	}
	return nil
}

// Position is how far projection name ("admin", "leaves") has applied its stream.
func (s *Store) Position(ctx context.Context, name string) (uint64, error) {
	var seq int64
	err := s.Pool.QueryRow(ctx, "SELECT stream_seq FROM projection_positions WHERE name = $1", name).Scan(&seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return uint64(seq), err
}

// claim moves projection name to seq inside tx when seq is past its position, and
// reports whether the event at seq is new (false: already applied, skip it).
func claim(ctx context.Context, tx pgx.Tx, name string, seq uint64) (bool, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO projection_positions (name, stream_seq) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET stream_seq = excluded.stream_seq WHERE projection_positions.stream_seq < excluded.stream_seq`, name, int64(seq))
	if err != nil {
		return false, err
	}
	return tag.RowsAffected() == 1, nil
}
