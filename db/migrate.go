package db

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Migrate applies every pending migration. It holds a PostgreSQL session advisory lock
// for the duration, so replicas started together apply each migration exactly once: the
// others wait for the lock and then find nothing pending.
func Migrate(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	provider, closeFn, err := newProvider(ctx, pool, logger)
	if err != nil {
		return err
	}
	defer closeFn()
	results, err := provider.Up(ctx)
	if err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	for _, r := range results {
		logger.InfoContext(ctx, "migration applied", "version", r.Source.Version, "file", r.Source.Path, "duration", r.Duration)
	}
	return nil
}

// MigrationsPending reports whether the database lacks migrations this binary has.
func MigrationsPending(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	provider, closeFn, err := newProvider(ctx, pool, slog.New(slog.DiscardHandler))
	if err != nil {
		return false, err
	}
	defer closeFn()
	return provider.HasPending(ctx)
}

// MigrationVersions returns the database's migration version and the newest this binary
// has. It takes no lock, so readiness checks never wait behind a running migration.
func MigrationVersions(ctx context.Context, pool *pgxpool.Pool) (current, target int64, err error) {
	provider, closeFn, err := newProvider(ctx, pool, slog.New(slog.DiscardHandler))
	if err != nil {
		return 0, 0, err
	}
	defer closeFn()
	return provider.GetVersions(ctx)
}

func newProvider(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) (*goose.Provider, func(), error) {
	// The lock id is derived from the schema so that separate schemas (tests, or several
	// deployments sharing a server) migrate independently instead of queueing.
	var schema string
	if err := pool.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return nil, nil, fmt.Errorf("read current schema: %w", err)
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte("rendezvous/migrate/" + schema))
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(int64(h.Sum64()>>1)), lock.WithLockTimeout(1, 300))
	if err != nil {
		return nil, nil, fmt.Errorf("migration locker: %w", err)
	}
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return nil, nil, err
	}
	sqlDB := stdlib.OpenDBFromPool(pool)
	provider, err := goose.NewProvider(goose.DialectPostgres, sqlDB, sub,
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
		goose.WithSlog(logger),
	)
	if err != nil {
		_ = sqlDB.Close()
		return nil, nil, fmt.Errorf("migration provider: %w", err)
	}
	return provider, func() { closeDB(sqlDB) }, nil
}

func closeDB(db *sql.DB) { _ = db.Close() }
