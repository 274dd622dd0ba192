package gate

import (
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/sik"
)

// eurWindow gives in's mandate a daily agent window of amount in EUR too,
// and recounts its windows.
func eurWindow(in *Input) {
	in.Mandate.Windows = append(in.Mandate.Windows, &countersignv1.Window{Scope: countersignv1.WindowScope_WINDOW_SCOPE_AGENT,
		Duration: durationpb.New(24 * time.Hour), MaxAmount: &countersignv1.Money{AmountMinor: 1 << 40, Currency: "EUR"}})
	in.Usage.Windows = counted(*in)
}

func TestCheckLimits(t *testing.T) {
	approvalRequired := func(in *Input) { in.Mandate.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED }
	runGate(t, payoutIn, CheckLimits, GateLimits, []gateCase{
		{name: "within every limit", verdict: Allow, code: ReasonPassed, contains: []string{"10,000.00 USD is within every limit"}},
		{name: "refund within every limit", mod: func(in *Input) { *in = refundIn() }, verdict: Allow, code: ReasonPassed},
		{name: "no grant", mod: func(in *Input) { in.Action.Kind = sik.KindTransfer }, verdict: Block, code: ReasonNotEvaluated, contains: []string{GateScope}},
		{name: "no mandate", mod: func(in *Input) { in.Mandate = nil }, verdict: Block, code: ReasonNotEvaluated},
		{name: "zero amount", mod: func(in *Input) { in.Action.AmountMinor = 0 }, verdict: Block, code: ReasonAmountInvalid},
		{name: "negative held", mod: func(in *Input) { in.Usage.BudgetHeldMinor = -1 }, verdict: Block, code: ReasonUsageInvalid, contains: []string{"-0.01 USD held"}},
		{name: "below the grant's minimum", mod: func(in *Input) { in.Action.AmountMinor = 99 }, verdict: Block, code: ReasonAmountBelowMinimum, contains: []string{"0.99 USD is below the 1.00 USD minimum"}},
		{name: "at the grant's minimum", mod: func(in *Input) { in.Action.AmountMinor = 100 }, verdict: Allow, code: ReasonPassed},
		{name: "at the grant's maximum", mod: func(in *Input) { in.Action.AmountMinor = 2000000; in.Usage.Windows = counted(*in) }, verdict: Allow, code: ReasonPassed},
		{name: "above the grant's maximum", mod: func(in *Input) { in.Action.AmountMinor = 2000001 }, verdict: Block, code: ReasonAmountAboveMaximum, contains: []string{"20,000.01 USD is above the 20,000.00 USD maximum"}},
		{name: "windows miscounted", mod: func(in *Input) { in.Usage.Windows = in.Usage.Windows[:1] }, verdict: Block, code: ReasonUsageInvalid, contains: []string{"1 windows", "has 2"}},
		{name: "window counted for another payee", mod: func(in *Input) { in.Usage.Windows[1].Key = "ba_2" }, verdict: Block, code: ReasonUsageInvalid,
			contains: []string{"payee ba_2", "payee ba_1"}},
		{name: "window counted from another time", mod: func(in *Input) { in.Usage.Windows[0].Since = t0 }, verdict: Block, code: ReasonUsageInvalid},
		{name: "window counted negative", mod: func(in *Input) { in.Usage.Windows = counted(*in, [2]int64{-1, 0}) }, verdict: Block, code: ReasonUsageInvalid},
		{name: "window with no duration", mod: func(in *Input) {
			in.Mandate.Windows[0].Duration = nil
			in.Usage.Windows = counted(*in)
		}, verdict: Block, code: ReasonMandateInvalid},
		{name: "agent window calls used up", mod: func(in *Input) { in.Usage.Windows = counted(*in, [2]int64{10, 0}) }, verdict: Block, code: ReasonWindowCallsExceeded,
			contains: []string{"The 24h window of agent agt_1 allows 10 calls and 10 already count"}},
		{name: "payee window calls used up", mod: func(in *Input) { in.Usage.Windows = counted(*in, [2]int64{0, 0}, [2]int64{3, 0}) }, verdict: Block, code: ReasonWindowCallsExceeded,
			contains: []string{"1h window of payee ba_1 allows 3"}},
		{name: "structuring: third payout of 1000000 in a 2500000 day", mod: func(in *Input) { in.Usage.Windows = counted(*in, [2]int64{2, 2000000}) }, verdict: Block, code: ReasonWindowAmountExceeded,
			contains: []string{"payout of 10,000.00 USD would bring the 24h window of agent agt_1 to 30,000.00 USD, over its limit of 25,000.00 USD (20,000.00 USD already used, 5,000.00 USD left)"}},
		{name: "window fills exactly", mod: func(in *Input) { in.Usage.Windows = counted(*in, [2]int64{2, 1500000}) }, verdict: Allow, code: ReasonPassed},
		{name: "window in another currency only", mod: func(in *Input) {
			in.Action.Currency, in.Referent.Currency = "EUR", "EUR"
			in.Mandate.Budgets = append(in.Mandate.Budgets, &countersignv1.Money{AmountMinor: 1 << 40, Currency: "EUR"})
			in.Mandate.FeeBudget = nil
			in.Usage.Windows = counted(*in, [2]int64{2, 2500000})
		}, verdict: Block, code: ReasonCurrencyNotWindowed, contains: []string{"limits the amount per agent window in USD but in none in EUR"}},
		{name: "window in another currency beside one in the action's", mod: func(in *Input) {
			in.Action.Currency, in.Referent.Currency = "EUR", "EUR"
			in.Mandate.Budgets = append(in.Mandate.Budgets, &countersignv1.Money{AmountMinor: 1 << 40, Currency: "EUR"})
			in.Mandate.FeeBudget = nil
			eurWindow(in)
			in.Usage.Windows = counted(*in, [2]int64{2, 2500000})
		}, verdict: Allow, code: ReasonPassed},
		{name: "payout in another currency than the fee budget's", mod: func(in *Input) {
			in.Action.Currency, in.Referent.Currency = "EUR", "EUR"
			in.Mandate.Budgets = append(in.Mandate.Budgets, &countersignv1.Money{AmountMinor: 1 << 40, Currency: "EUR"})
			eurWindow(in)
		}, verdict: Block, code: ReasonFeeCurrencyNotBudgeted, contains: []string{"fee budget in USD", "its own currency, EUR"}},
		{name: "refund in another currency than the fee budget's", mod: func(in *Input) {
			*in = refundIn()
			in.Action.Currency, in.Referent.Currency = "EUR", "EUR"
			in.Mandate.FeeBudget = money(1<<40, "USD")
			in.Mandate.Budgets, in.Mandate.Windows = nil, nil
			in.Usage.Windows = nil
		}, verdict: Allow, code: ReasonPassed},
		{name: "window amount overflows", mod: func(in *Input) { in.Usage.Windows = counted(*in, [2]int64{1, math.MaxInt64}) }, verdict: Block, code: ReasonAmountOverflow,
			contains: []string{"92,233,720,368,547,758.07 USD"}},
		{name: "recurrence limit reached", mod: func(in *Input) { in.Usage.SubjectActions = 5 }, verdict: Block, code: ReasonRecurrenceLimitExceeded, contains: []string{"5 actions on ba_1", "limit of 5"}},
		{name: "no recurrence limit", mod: func(in *Input) { in.Mandate.RecurrenceLimit = 0; in.Usage.SubjectActions = 500 }, verdict: Allow, code: ReasonPassed},
		{name: "fee budget exhausted", mod: func(in *Input) { in.Usage.FeeSpentMinor = 50000 }, verdict: Block, code: ReasonFeeBudgetExhausted, contains: []string{"500.00 USD in fees", "fee budget of 500.00 USD"}},
		{name: "no fee budget", mod: func(in *Input) { in.Mandate.FeeBudget = nil; in.Usage.FeeSpentMinor = math.MaxInt64 }, verdict: Allow, code: ReasonPassed},
		{name: "budget exceeded", mod: func(in *Input) { in.Usage.BudgetHeldMinor, in.Usage.BudgetSpentMinor = 4000000, 5500000 }, verdict: Block, code: ReasonBudgetExceeded,
			contains: []string{"10,000.00 USD would bring", "to 105,000.00 USD, over its 100,000.00 USD (40,000.00 USD held, 55,000.00 USD spent, 5,000.00 USD left)"}},
		{name: "budget filled exactly", mod: func(in *Input) { in.Usage.BudgetHeldMinor, in.Usage.BudgetSpentMinor = 4000000, 5000000 }, verdict: Allow, code: ReasonPassed},
		{name: "currency without a budget beside one with", mod: func(in *Input) {
			in.Action.Currency = "EUR"
			in.Mandate.FeeBudget = nil
			eurWindow(in)
		}, verdict: Block, code: ReasonCurrencyNotBudgeted, contains: []string{"sets budgets in USD but none in EUR"}},
		{name: "no budget at all", mod: func(in *Input) {
			in.Mandate.Budgets = nil
			in.Usage.BudgetHeldMinor, in.Usage.BudgetSpentMinor = math.MaxInt64/2, math.MaxInt64/2
		}, verdict: Allow, code: ReasonPassed},
		{name: "budget sum overflows", mod: func(in *Input) {
			in.Mandate.Budgets[0].AmountMinor = math.MaxInt64
			in.Usage.BudgetHeldMinor, in.Usage.BudgetSpentMinor = math.MaxInt64-10, 5
		}, verdict: Block, code: ReasonAmountOverflow, contains: []string{"does not fit in a 64-bit amount"}},
		{name: "negative budget", mod: func(in *Input) { in.Mandate.Budgets[0].AmountMinor = -1 }, verdict: Block, code: ReasonMandateInvalid},
		{name: "approval required", mod: approvalRequired, verdict: Hold, code: ReasonApprovalRequired, contains: []string{"approval_required", "send the identical request again after approval"}},
		{name: "approval of this request", mod: func(in *Input) { approvalRequired(in); approve(in) }, verdict: Allow, code: ReasonApproved},
		{name: "approval of another request", mod: func(in *Input) { approvalRequired(in); approve(in); in.Fingerprint = "fp_other" }, verdict: Hold, code: ReasonApprovalMismatch,
			contains: []string{"fp_7c1e0b9d2,", "fp_other"}},
		{name: "approval without a request fingerprint", mod: func(in *Input) { approvalRequired(in); approve(in); in.Fingerprint = "" }, verdict: Hold, code: ReasonApprovalMismatch},
		{name: "approval expired", mod: func(in *Input) { approvalRequired(in); approve(in); in.ApprovalExpiresAt = t0.Add(-time.Second) }, verdict: Hold, code: ReasonApprovalExpired,
			contains: []string{"2026-03-01T11:59:59Z"}},
		{name: "approval never lifts a limit", mod: func(in *Input) { approvalRequired(in); approve(in); in.Usage.BudgetSpentMinor = 9500000 }, verdict: Block, code: ReasonBudgetExceeded},
	})
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		24 * time.Hour:                   "24h",
		time.Hour + 30*time.Minute:       "1h30m",
		90 * time.Second:                 "1m30s",
		30 * time.Minute:                 "30m",
		time.Hour + 5*time.Second:        "1h0m5s",
		31 * 24 * time.Hour:              "744h",
		1500 * time.Millisecond:          "1.5s",
		10*time.Minute + 10*time.Second:  "10m10s",
		10*time.Hour + 10*time.Minute:    "10h10m",
		100*time.Hour + 100*time.Minute:  "101h40m",
		200*time.Hour + 0*time.Minute:    "200h",
		2*time.Minute + 0*time.Second:    "2m",
		20*time.Minute + 20*time.Second:  "20m20s",
		20*time.Minute + 0*time.Second:   "20m",
		100 * time.Second:                "1m40s",
		3*time.Hour + 20*time.Minute:     "3h20m",
		3*time.Hour + 20*time.Minute + 1: "3h20m0.000000001s",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestWindowSpecs(t *testing.T) {
	in := refundIn()
	in.Mandate.Windows = append(in.Mandate.Windows, &countersignv1.Window{Scope: countersignv1.WindowScope_WINDOW_SCOPE_PAYEE,
		Duration: durationpb.New(7 * day), MaxAmount: money(900, "EUR")})
	got := WindowSpecs(in)
	want := []WindowSpec{
		{Scope: countersignv1.WindowScope_WINDOW_SCOPE_AGENT, Duration: day, Since: t0.Add(-day), Key: "agt_1", Currency: "USD"},
		{Scope: countersignv1.WindowScope_WINDOW_SCOPE_PAYEE, Duration: time.Hour, Since: t0.Add(-time.Hour), Key: "pay_1002"}, // a refund's payee is its subject
		{Scope: countersignv1.WindowScope_WINDOW_SCOPE_PAYEE, Duration: 7 * day, Since: t0.Add(-7 * day), Key: "pay_1002", Currency: "EUR"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d specs, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("spec %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if specs := WindowSpecs(payoutIn()); specs[1].Key != "ba_1" {
		t.Errorf("a payout's payee window counts %q, want ba_1", specs[1].Key)
	}
	if specs := WindowSpecs(Input{}); len(specs) != 0 {
		t.Errorf("no mandate: %d specs", len(specs))
	}
}
