package engine

import (
	"context"
	"testing"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/gate"
)

// TestReversibleGrantAdmitsOnlyWhatTheRailCanReverse: a payout grant marked
// reversible admits a Stripe standard payout (cancellable while it is
// pending) and refuses an instant one, which Stripe cannot cancel. The
// action's reversibility is the rail adapter's to say; it was the grant's
// own flag, so the grant refused nothing (found by a review). A transfer
// grant marked reversible admits no transfer: Stripe reverses one only while
// the destination still holds the funds (found by a later review: every
// transfer was admitted as reversible).
func TestReversibleGrantAdmitsOnlyWhatTheRailCanReverse(t *testing.T) {
	r := newRig(t, func(m *countersignv1.Mandate) {
		m.Grants = append(m.Grants, &countersignv1.Grant{ActionKind: countersignv1.ActionKind_ACTION_KIND_PAYOUT, MaxAmountMinor: 1 << 40,
			Currencies: []string{"USD"}, Reversible: true},
			&countersignv1.Grant{ActionKind: countersignv1.ActionKind_ACTION_KIND_TRANSFER, MaxAmountMinor: 1 << 40,
				Currencies: []string{"USD"}, Reversible: true})
	})
	transfer := r.refund()
	transfer.Path, transfer.Body = "/v1/transfers", []byte("amount=5000&currency=usd&destination=acct_payee")
	expect(t, r.e.Decide(context.Background(), transfer), Block, gate.ReasonActionNotReversible)
	payout := func(method string) Outcome {
		req := r.refund()
		req.Path, req.Body = "/v1/payouts", []byte("amount=5000&currency=usd&destination=ba_1&method="+method)
		return r.e.Decide(context.Background(), req)
	}
	expect(t, payout("instant"), Block, gate.ReasonActionNotReversible)
	expect(t, payout("standard"), Allow, ReasonAllowed)
}
