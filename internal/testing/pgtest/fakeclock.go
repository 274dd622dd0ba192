package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
)

// FakeClockSchema holds the fake clock: a one-row table and a now() that
// reads it.
const FakeClockSchema = "pgtest_fakeclock"

// fakeClockSearchPath puts the fake now() before pg_catalog's. PostgreSQL
// searches pg_catalog first only when the path does not name it.
const fakeClockSearchPath = FakeClockSchema + ",pg_catalog,public"

// InstallFakeClock makes now() in the database at databaseURL a clock the
// test sets, for connections made through [FakeClockURL]: it creates
// FakeClockSchema with a one-row table and a STABLE now() reading it (a
// transaction sees one time, as with the real now()).
//
// Run it before the schema is created: a column DEFAULT now() is bound to
// the function it resolved to when the table was created, so tables made
// through FakeClockURL after the install keep reading the fake clock, and
// so do plpgsql triggers, which resolve now() when they run. Clones of the
// database carry the fake clock along.
func InstallFakeClock(ctx context.Context, databaseURL string, start time.Time) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("pgtest: fake clock: %w", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	schema := quoteIdent(FakeClockSchema)
	for _, stmt := range []string{
		`CREATE SCHEMA ` + schema,
		`CREATE TABLE ` + schema + `.clock (one boolean PRIMARY KEY DEFAULT true CHECK (one), t timestamptz NOT NULL)`,
		`CREATE FUNCTION ` + schema + `.now() RETURNS timestamptz LANGUAGE sql STABLE PARALLEL SAFE AS 'SELECT t FROM ` + schema + `.clock'`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("pgtest: fake clock: %s: %w", stmt, err)
		}
	}
	if _, err := conn.Exec(ctx, `INSERT INTO `+schema+`.clock (t) VALUES ($1)`, start); err != nil {
		return fmt.Errorf("pgtest: fake clock: %w", err)
	}
	return nil
}

// FakeClockURL returns databaseURL with the search path that makes now()
// the fake clock.
func FakeClockURL(databaseURL string) (string, error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return "", fmt.Errorf("pgtest: fake clock: database URL: %w", err)
	}
	q := u.Query()
	q.Set("search_path", fakeClockSearchPath)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// FakeClock sets the fake now() of one database.
type FakeClock struct {
	conn *pgx.Conn
}

// OpenFakeClock connects to the database at databaseURL, where
// InstallFakeClock ran (on it or on its template).
func OpenFakeClock(ctx context.Context, databaseURL string) (*FakeClock, error) {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return nil, fmt.Errorf("pgtest: fake clock: %w", err)
	}
	return &FakeClock{conn: conn}, nil
}

// Set moves the database's now() to t; transactions that begin afterwards
// see it.
func (c *FakeClock) Set(ctx context.Context, t time.Time) error {
	tag, err := c.conn.Exec(ctx, `UPDATE `+quoteIdent(FakeClockSchema)+`.clock SET t = $1`, t)
	if err != nil {
		return fmt.Errorf("pgtest: fake clock: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("pgtest: fake clock: no clock row (was InstallFakeClock run?)")
	}
	return nil
}

// Now reads the database's now() through the fake clock's search path.
func (c *FakeClock) Now(ctx context.Context) (time.Time, error) {
	var t time.Time
	err := c.conn.QueryRow(ctx, `SELECT `+quoteIdent(FakeClockSchema)+`.now()`).Scan(&t)
	return t, err
}

// Close disconnects.
func (c *FakeClock) Close(ctx context.Context) error { return c.conn.Close(ctx) }
