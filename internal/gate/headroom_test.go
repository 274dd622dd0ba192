package gate

import (
	"testing"

	"pgregory.net/rapid"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/sik"
)

// verdictOn is G2's and G3's verdicts together: what the counts decide.
func verdictOn(in Input) Verdict {
	v, _ := Ladder(CheckValue(in), CheckLimits(in))
	return v
}

// TestHeadroomIsExactlyTheChecks: for any counts, the value and limits
// checks give what they give with nothing counted when the counts are
// within HeadroomOf, and BLOCK when they are not. This is what lets the
// ledger assert the bounds at commit in place of the gates reading the
// counts under the lock.
func TestHeadroomIsExactlyTheChecks(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := refundIn()
		if rapid.Bool().Draw(t, "payout") {
			in = payoutIn()
		}
		m := in.Mandate
		m.Windows[0].MaxCalls = rapid.Int32Range(0, 6).Draw(t, "agent window calls")
		m.Windows[0].MaxAmount = money(rapid.Int64Range(0, 3000000).Draw(t, "agent window amount"), "USD")
		m.Windows[1].MaxCalls = rapid.Int32Range(0, 6).Draw(t, "payee window calls")
		m.RecurrenceLimit = rapid.Int32Range(0, 6).Draw(t, "recurrence limit")
		m.FeeBudget.AmountMinor = rapid.Int64Range(0, 5000).Draw(t, "fee budget")
		m.Budgets = []*countersignv1.Money{money(rapid.Int64Range(0, 3000000).Draw(t, "budget"), "USD")}
		in.Action.AmountMinor = rapid.Int64Range(100, 600000).Draw(t, "amount")
		if in.Action.Kind == sik.KindRefund {
			in.Referent.RefundableMinor = rapid.Int64Range(0, 600000).Draw(t, "refundable")
		}
		base := Uncounted(in)
		want := verdictOn(base)
		if want == Block {
			return // the action fails whatever is counted
		}
		u := Usage{
			FeeSpentMinor:    rapid.Int64Range(0, 6000).Draw(t, "fees"),
			SubjectActions:   rapid.Int64Range(0, 7).Draw(t, "subject actions"),
			BudgetHeldMinor:  rapid.Int64Range(0, 2000000).Draw(t, "held"),
			BudgetSpentMinor: rapid.Int64Range(0, 2000000).Draw(t, "spent"),
		}
		for i, s := range WindowSpecs(in) {
			u.Windows = append(u.Windows, WindowUsage{WindowSpec: s,
				Calls:       rapid.Int64Range(0, 7).Draw(t, "calls "+string(rune('0'+i))),
				AmountMinor: rapid.Int64Range(0, 3000000).Draw(t, "window amount "+string(rune('0'+i)))})
		}
		outstanding := int64(0)
		if in.Action.Kind == sik.KindRefund {
			outstanding = rapid.Int64Range(0, 600000).Draw(t, "outstanding")
		}
		counted := in
		counted.Usage, counted.LedgerOutstandingMinor = u, outstanding
		got := verdictOn(counted)
		within := HeadroomOf(in).Within(u, outstanding)
		switch {
		case within == nil && got != want:
			t.Fatalf("within the headroom the checks say %v, with nothing counted %v", got, want)
		case within != nil && got != Block:
			t.Fatalf("outside the headroom (%v) the checks say %v, not BLOCK", within, got)
		}
	})
}
