package ledger

import (
	"context"
	"database/sql"
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/countersign/countersign/internal/testing/pgtest"
)

func TestMain(m *testing.M) {
	pgtest.Main(m, func(ctx context.Context, url string) error {
		_, err := Migrate(ctx, url, nil)
		return err
	})
}

// openTest returns a store over a fresh migrated database.
func openTest(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), pgtest.NewDatabase(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// migrationTest is a fresh migrated database and its migration provider,
// for a test that runs one migration's Down and Up over data.
func migrationTest(t *testing.T) (url string, p *goose.Provider, db *sql.DB) {
	t.Helper()
	url = pgtest.NewDatabase(t)
	p, db, err := provider(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return url, p, db
}
