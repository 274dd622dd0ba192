package gate

import (
	"testing"
)

func TestCheckValue(t *testing.T) {
	full := func(in *Input) {
		in.Action.FullRefund, in.Action.AmountMinor = true, in.Referent.RefundableMinor
	}
	runGate(t, refundIn, CheckValue, GateValue, []gateCase{
		{name: "partial refund", verdict: Allow, code: ReasonPassed, contains: []string{"2,500.00 USD", "pay_1002"}},
		{name: "refund of exactly what is left", mod: func(in *Input) { in.Referent.RefundableMinor = 300000; in.LedgerOutstandingMinor = 50000 }, verdict: Allow, code: ReasonPassed},
		{name: "full refund", mod: full, verdict: Allow, code: ReasonPassed},
		{name: "zero amount", mod: func(in *Input) { in.Action.AmountMinor = 0 }, verdict: Block, code: ReasonAmountInvalid, contains: []string{"0"}},
		{name: "negative amount", mod: func(in *Input) { in.Action.AmountMinor = -5 }, verdict: Block, code: ReasonAmountInvalid, contains: []string{"it is -0.05 USD"}},
		{name: "currency unknown", mod: func(in *Input) { in.Action.Currency = "" }, verdict: Block, code: ReasonCurrencyUnresolved, contains: []string{"pay_1002"}},
		{name: "refund in the wrong currency", mod: func(in *Input) { in.Action.Currency = "EUR" }, verdict: Block, code: ReasonCurrencyMismatch,
			contains: []string{"The request is in EUR but pay_1002 is in USD."}},
		{name: "refund of a payment without currency", mod: func(in *Input) { in.Referent.Currency = "" }, verdict: Block, code: ReasonReferentInvalid},
		{name: "negative refundable", mod: func(in *Input) { in.Referent.RefundableMinor = -1 }, verdict: Block, code: ReasonReferentInvalid, contains: []string{"-0.01 USD refundable"}},
		{name: "negative outstanding", mod: func(in *Input) { in.LedgerOutstandingMinor = -1 }, verdict: Block, code: ReasonReferentInvalid},
		{name: "full refund of nothing", mod: func(in *Input) { in.Referent.RefundableMinor = 0; full(in) }, verdict: Block, code: ReasonNothingRefundable,
			contains: []string{"Nothing is left to refund on pay_1002."}},
		{name: "everything left is already in flight", mod: func(in *Input) { in.LedgerOutstandingMinor = 600000 }, verdict: Block, code: ReasonNothingRefundable,
			contains: []string{"rail shows 5,000.00 USD", "6,000.00 USD more"}},
		{name: "refund above refundable", mod: func(in *Input) { in.Referent.RefundableMinor = 189900 }, verdict: Block, code: ReasonAmountExceedsRefundable,
			contains: []string{"2,500.00 USD exceeds the 1,899.00 USD still refundable on pay_1002."}},
		{name: "refund above refundable less in flight", mod: func(in *Input) { in.LedgerOutstandingMinor = 300000 }, verdict: Block, code: ReasonAmountExceedsRefundable,
			contains: []string{"2,500.00 USD exceeds the 2,000.00 USD still refundable on pay_1002", "rail shows 5,000.00 USD", "3,000.00 USD more"}},
		{name: "full refund while a partial one is in flight", mod: func(in *Input) { full(in); in.LedgerOutstandingMinor = 100000 }, verdict: Block, code: ReasonAmountExceedsRefundable,
			contains: []string{"valued at 5,000.00 USD", "at most 4,000.00 USD (400000 in minor units)"}},
		{name: "payout to an allowed payee", mod: func(in *Input) { *in = payoutIn() }, verdict: Allow, code: ReasonPassed, contains: []string{"ba_1"}},
		{name: "payout off the allowlist", mod: func(in *Input) { *in = payoutIn(); in.Action.Payee = "ba_9" }, verdict: Block, code: ReasonPayeeNotAllowed,
			contains: []string{"Payee ba_9 is not on the allowlist"}},
		{name: "payout naming no payee", mod: func(in *Input) { *in = payoutIn(); in.Action.Payee = "" }, verdict: Block, code: ReasonPayeeNotAllowed, contains: []string{"names no payee"}},
		{name: "payout without an allowlist", mod: func(in *Input) { *in = payoutIn(); in.Mandate.AllowedPayees = nil; in.Action.Payee = "ba_9" }, verdict: Allow, code: ReasonPassed},
		{name: "payout in the wrong currency", mod: func(in *Input) { *in = payoutIn(); in.Referent.Currency = "EUR" }, verdict: Block, code: ReasonCurrencyMismatch},
		{name: "payout with no referent currency", mod: func(in *Input) { *in = payoutIn(); in.Referent.Currency = "" }, verdict: Allow, code: ReasonPassed},
		{name: "refund ignores the payee allowlist", mod: func(in *Input) { in.Action.Payee = "cus_9" }, verdict: Allow, code: ReasonPassed},
		{name: "payout without mandate", mod: func(in *Input) { *in = payoutIn(); in.Mandate = nil }, verdict: Block, code: ReasonNotEvaluated},
	})
}

func TestRefundable(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		refundable, outstanding int64
		want                    int64
		ok                      bool
	}{
		{"nothing outstanding", 500, 0, 500, true},
		{"some outstanding", 500, 200, 300, true},
		{"all outstanding", 500, 500, 0, true},
		{"more outstanding than the rail shows", 500, 900, 0, true},
		{"largest amounts", 1<<63 - 1, 1<<63 - 1, 0, true},
		{"negative refundable", -1, 0, 0, false},
		{"negative outstanding", 500, -1, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := refundable(Referent{RefundableMinor: tc.refundable}, tc.outstanding)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("refundable(%d, %d) = %d, %v; want %d, %v", tc.refundable, tc.outstanding, got, ok, tc.want, tc.ok)
			}
		})
	}
}
