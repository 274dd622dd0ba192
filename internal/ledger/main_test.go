package ledger

import (
	"context"
	"testing"

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
