package engine

import (
	"context"
	"testing"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

func TestMain(m *testing.M) {
	pgtest.Main(m, func(ctx context.Context, url string) error {
		_, err := ledger.Migrate(ctx, url, nil)
		return err
	})
}
