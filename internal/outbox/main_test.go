package outbox

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// TestMain runs the tests against a real PostgreSQL and fails the binary if
// a dispatcher (or anything else) leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.Wrap(m, func(ctx context.Context, url string) error {
		_, err := ledger.Migrate(ctx, url, nil)
		return err
	}))
}
