package gate

import (
	"testing"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// krwUSDRefundIn is a 5,000.00 USD refund under a mandate that grants
// refunds in KRW and USD up to 500000 (meant as ₩500,000, about 360 USD)
// with no budget and no amount window: the review's case.
func krwUSDRefundIn() Input {
	in := refundIn()
	m := in.Mandate
	m.Grants = []*countersignv1.Grant{{ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND, MinAmountMinor: 1, MaxAmountMinor: 500000, Currencies: []string{"KRW", "USD"}}}
	m.Budgets, m.FeeBudget, m.AllowedPayees, m.RecurrenceLimit = nil, nil, nil, 0
	m.Windows = m.Windows[1:] // the payee window counts calls only
	in.Action.AmountMinor = 500000
	in.Referent = Referent{AmountMinor: 9000000, RefundableMinor: 9000000, Currency: "USD"}
	in.Usage = Usage{}
	in.Usage.Windows = counted(in)
	return in
}

func TestCheckLimitsGrantCurrency(t *testing.T) {
	runGate(t, krwUSDRefundIn, CheckLimits, GateLimits, []gateCase{
		{name: "one maximum for KRW and USD, nothing else bounding USD", verdict: Block, code: ReasonGrantCurrencyAmbiguous,
			contains: []string{"refund in KRW, USD up to one maximum of 500000 minor units (500,000 KRW or 5,000.00 USD)", "no budget or amount window in USD"}},
		{name: "in KRW too: which currency the owner meant is unknown", mod: func(in *Input) {
			in.Action.Currency, in.Referent.Currency = "KRW", "KRW"
		}, verdict: Block, code: ReasonGrantCurrencyAmbiguous, contains: []string{"no budget or amount window in KRW"}},
		{name: "an approval does not lift it", mod: func(in *Input) {
			in.Mandate.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
			approve(in)
		}, verdict: Block, code: ReasonGrantCurrencyAmbiguous},
		{name: "above the maximum is still above it", mod: func(in *Input) { in.Action.AmountMinor = 500001 }, verdict: Block, code: ReasonAmountAboveMaximum},
		{name: "a budget in the action's currency bounds it", mod: func(in *Input) {
			in.Mandate.Budgets = []*countersignv1.Money{money(100000, "USD")}
			in.Action.AmountMinor = 100000
		}, verdict: Allow, code: ReasonPassed},
		{name: "a budget in the other currency only", mod: func(in *Input) {
			in.Mandate.Budgets = []*countersignv1.Money{money(5000000, "KRW")}
		}, verdict: Block, code: ReasonCurrencyNotBudgeted},
		{name: "an amount window in the action's currency bounds it", mod: func(in *Input) {
			in.Mandate.Windows = append(in.Mandate.Windows, &countersignv1.Window{Scope: countersignv1.WindowScope_WINDOW_SCOPE_AGENT,
				Duration: in.Mandate.Windows[0].Duration, MaxAmount: money(500000, "USD")})
			in.Usage.Windows = counted(*in)
		}, verdict: Allow, code: ReasonPassed},
		{name: "one currency per grant", mod: func(in *Input) { in.Mandate.Grants[0].Currencies = []string{"USD"} }, verdict: Allow, code: ReasonPassed},
	})
}
