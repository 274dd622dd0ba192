package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/gate"
)

func payoutOf(r *rig, amount int64, currency string) Request {
	req := r.refund()
	req.Path, req.Body = "/v1/payouts", fmt.Appendf(nil, "amount=%d&currency=%s&destination=ba_1", amount, currency)
	return req
}

// TestADailyCapInOneCurrencyBoundsTheOthers: the owner's mandate caps what
// the agent moves in 24 hours at 1,000.00 USD and grants payouts in USD and
// EUR. Once the USD cap is used, no EUR payout passes either: the cap says
// nothing of EUR, so EUR is refused until the owner sets a window for it
// (found by a review: five payouts of about 50,000.00 EUR each went through
// in the same 24 hours).
func TestADailyCapInOneCurrencyBoundsTheOthers(t *testing.T) {
	r := newRig(t, func(m *countersignv1.Mandate) {
		m.Grants = append(m.Grants, &countersignv1.Grant{ActionKind: countersignv1.ActionKind_ACTION_KIND_PAYOUT,
			MaxAmountMinor: 5_000_000, Currencies: []string{"EUR", "USD"}})
		m.AllowedPayees = []string{"ba_1"}
		m.Windows = []*countersignv1.Window{{Scope: countersignv1.WindowScope_WINDOW_SCOPE_AGENT,
			Duration: durationpb.New(24 * time.Hour), MaxAmount: &countersignv1.Money{AmountMinor: 100_000, Currency: "USD"}}}
	})
	ctx := context.Background()
	expect(t, r.e.Decide(ctx, payoutOf(r, 100_000, "usd")), Allow, ReasonAllowed)
	expect(t, r.e.Decide(ctx, payoutOf(r, 100, "usd")), Block, gate.ReasonWindowAmountExceeded)
	expect(t, r.e.Decide(ctx, payoutOf(r, 5_000_000, "eur")), Block, gate.ReasonCurrencyNotWindowed)
}

// TestAFeeBudgetRefusesPayoutsWhoseFeesItCannotCount: a fee budget in JPY
// beside payouts granted in JPY and USD: a USD payout's fee is charged in
// USD, which the fee budget would count as yen (found by a review: 12.00
// USD of fees counted as 1,200 of a 1,500 JPY budget), so it is refused; a
// JPY payout passes.
func TestAFeeBudgetRefusesPayoutsWhoseFeesItCannotCount(t *testing.T) {
	r := newRig(t, func(m *countersignv1.Mandate) {
		m.Grants = append(m.Grants, &countersignv1.Grant{ActionKind: countersignv1.ActionKind_ACTION_KIND_PAYOUT,
			MaxAmountMinor: 5_000_000, Currencies: []string{"JPY", "USD"}})
		m.AllowedPayees = []string{"ba_1"}
		m.FeeBudget = &countersignv1.Money{AmountMinor: 1500, Currency: "JPY"}
		// A budget in each currency: a grant of two currencies needs one
		// (grant_currency_ambiguous).
		m.Budgets = []*countersignv1.Money{{AmountMinor: 1 << 40, Currency: "JPY"}, {AmountMinor: 1 << 40, Currency: "USD"}}
	})
	ctx := context.Background()
	expect(t, r.e.Decide(ctx, payoutOf(r, 10_000, "usd")), Block, gate.ReasonFeeCurrencyNotBudgeted)
	expect(t, r.e.Decide(ctx, payoutOf(r, 10_000, "jpy")), Allow, ReasonAllowed)
}
