package ledger

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the embedded, numbered SQL migrations.
func Migrations() fs.FS {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // the embed pattern above guarantees the directory exists
	}
	return sub
}

// MigrationResult is one applied migration.
type MigrationResult struct {
	Version int64
	Source  string
}

// Migrate applies every pending migration to the database at databaseURL.
// Concurrent callers are serialised by a Postgres advisory lock.
func Migrate(ctx context.Context, databaseURL string, log *slog.Logger) ([]MigrationResult, error) {
	p, db, err := provider(databaseURL, log)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	res, err := p.Up(ctx)
	if err != nil {
		return nil, classify(fmt.Errorf("ledger: migrate: %w", err))
	}
	out := make([]MigrationResult, 0, len(res))
	for _, r := range res {
		out = append(out, MigrationResult{Version: r.Source.Version, Source: r.Source.Path})
	}
	return out, nil
}

// LatestVersion is the newest migration the binary carries.
func LatestVersion() int64 {
	entries, err := fs.Glob(Migrations(), "*.sql")
	if err != nil {
		panic(err)
	}
	var latest int64
	for _, e := range entries {
		var v int64
		if _, err := fmt.Sscanf(e, "%d_", &v); err == nil && v > latest {
			latest = v
		}
	}
	return latest
}

// SchemaVersion reports the version the database is at (0 for an empty
// database). It reads goose's table directly through the pool so the health
// check costs one small query.
func (s *Store) SchemaVersion(ctx context.Context) (int64, error) {
	var v int64
	err := s.pool.QueryRow(ctx, `
		SELECT COALESCE(max(version_id), 0) FROM goose_db_version WHERE is_applied`).Scan(&v)
	if err != nil {
		if isUndefinedTable(err) {
			return 0, nil
		}
		return 0, classify(err)
	}
	return v, nil
}

// Ready returns nil when the database answers and its schema is current;
// ErrUnavailable or ErrSchemaBehind otherwise.
func (s *Store) Ready(ctx context.Context) error {
	v, err := s.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	if latest := LatestVersion(); v < latest {
		return fmt.Errorf("%w (database at %d, binary needs %d)", ErrSchemaBehind, v, latest)
	}
	if s.pooled {
		return s.checkDurableDefault(ctx)
	}
	return nil
}

// ErrNotDurable means the server behind a pooler does not default to
// synchronous_commit on, which the ledger's writes outside InTx rely on.
var ErrNotDurable = errors.New("ledger: synchronous_commit is not on behind the pooler")

// checkDurableDefault reads the synchronous_commit a pooled session gets.
// Behind a pooler it cannot be set per session, so the role's or database's
// default must say on (PostgreSQL's own default); anything else is
// not-ready rather than a quietly weaker commit.
func (s *Store) checkDurableDefault(ctx context.Context) error {
	var sc string
	if err := s.pool.QueryRow(ctx, `SELECT current_setting('synchronous_commit')`).Scan(&sc); err != nil {
		return classify(err)
	}
	if sc != "on" && sc != "remote_apply" {
		return fmt.Errorf("%w: the server says %q; set it for the ledger's role (ALTER ROLE … SET synchronous_commit = on)", ErrNotDurable, sc)
	}
	return nil
}

func provider(databaseURL string, log *slog.Logger) (*goose.Provider, *sql.DB, error) {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, nil, fmt.Errorf("ledger: database URL: %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("ledger: migration lock: %w", err)
	}
	opts := []goose.ProviderOption{goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true)}
	if log != nil {
		opts = append(opts, goose.WithSlog(log))
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, Migrations(), opts...)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("ledger: migrations: %w", err)
	}
	return p, db, nil
}
