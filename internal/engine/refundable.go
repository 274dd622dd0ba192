package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/gate"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/sik"
)

// ErrNotRefund says Refundable was asked about an intent that is not a refund.
var ErrNotRefund = errors.New("engine: not a refund")

// RefundableNow is what is still refundable on a refund's subject now, as
// the value gate (G2) would compute it for the intent if it were decided
// now.
type RefundableNow struct {
	Currency string
	// Rail is the rail's refundable balance, read now.
	Rail int64
	// Outstanding is what the ledger has on the subject that the rail's
	// balance may not show yet (in flight, unknown, reconciling, or
	// quarantined until a person resolves it), other than the intent
	// itself.
	Outstanding int64
	// Available is gate.Refundable of the two.
	Available int64
}

// Refundable reads, for the refund it, the rail's refundable balance with
// the same read-only resolve the gates use (the account's adapter, bounded
// by ResolveTimeout) and the ledger's outstanding amount with the same
// count G2 uses, and combines them as G2 does. It moves no money and
// writes nothing. For the owner's view of a held refund.
func (e *Engine) Refundable(ctx context.Context, it ledger.Intent) (RefundableNow, error) {
	if sik.Kind(it.Action) != sik.KindRefund {
		return RefundableNow{}, ErrNotRefund
	}
	if e.opts.Rails == nil {
		return RefundableNow{}, fmt.Errorf("%w: no rail accounts are configured on this server", ErrUnknownAccount)
	}
	acct, ok := e.opts.Rails.ByID(it.RailAccount)
	if !ok {
		return RefundableNow{}, fmt.Errorf("%w: %s is not configured on this server", ErrUnknownAccount, it.RailAccount)
	}
	a, err := ActionOf(it)
	if err != nil {
		return RefundableNow{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, e.opts.ResolveTimeout)
	readAt := time.Now()
	ref, err := e.resolve(rctx, acct, acct.Client, a)
	cancel()
	if err != nil {
		return RefundableNow{}, fmt.Errorf("rail read of %s: %w", it.Subject, err)
	}
	var outstanding int64
	if err := e.ledger.InTx(ctx, func(tx *ledger.Tx) error {
		var err error
		outstanding, err = tx.Outstanding(ctx, it.RailAccount, it.Subject, it.SIK, readAt)
		return err
	}); err != nil {
		return RefundableNow{}, err
	}
	avail, ok := gate.Refundable(gate.Referent{RefundableMinor: ref.RefundableMinor, Currency: ref.Currency}, outstanding)
	if !ok {
		return RefundableNow{}, fmt.Errorf("the rail reported %d refundable and the ledger %d outstanding on %s; neither may be negative",
			ref.RefundableMinor, outstanding, it.Subject)
	}
	return RefundableNow{Currency: ref.Currency, Rail: ref.RefundableMinor, Outstanding: outstanding, Available: avail}, nil
}
