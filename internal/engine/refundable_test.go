package engine

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rails"
)

// noRails knows no rail account.
type noRails struct{}

func (noRails) ByID(string) (*rails.Account, bool)   { return nil, false }
func (noRails) ByHost(string) (*rails.Account, bool) { return nil, false }

// TestRefundableRefusesWithoutReadingAnything: what Refundable cannot
// answer it names, before any rail read or ledger count (the scripted
// ledger fails every transaction; the read against a real rail is
// internal/server/TestApprovalLiveIsTheValueGatesView).
func TestRefundableRefusesWithoutReadingAnything(t *testing.T) {
	refund := ledger.Intent{Key: ledger.Key{RailAccount: "acct_x", SIK: "S"}, Action: "refund", Subject: "pi_1", Canonical: `{}`}
	payout := refund
	payout.Action = "payout"
	for _, tc := range []struct {
		name  string
		rails Rails
		it    ledger.Intent
		want  error
	}{
		{"not a refund", noRails{}, payout, ErrNotRefund},
		{"no rails configured", nil, refund, ErrUnknownAccount},
		{"account not configured", noRails{}, refund, ErrUnknownAccount},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := New(&scriptedLedger{}, Options{Rails: tc.rails}, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
			if _, err := e.Refundable(context.Background(), tc.it); !errors.Is(err, tc.want) {
				t.Fatalf("Refundable = %v, want %v", err, tc.want)
			}
		})
	}
}
