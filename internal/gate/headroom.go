package gate

import (
	"fmt"
	"math"

	"github.com/countersign/countersign/internal/sik"
)

// Headroom is, for each count the stateful checks compare against, the most
// it may already hold for this action still to pass them: CheckLimits' and
// CheckValue's verdicts, with the rest of the input fixed, are ALLOW-side
// exactly when every count is at most its bound. The gates can then decide
// on counts read without a lock, and the ledger asserts the bounds under
// the mandate's lock when it writes (B1), instead of holding that lock
// while Go decides. The budget needs no bound here: the budget row's CHECK
// refuses an overrun of an ALLOW's hold; a HOLD places none, so its bound is
// MaxBudgetUsed.
//
// A bound of math.MaxInt64 means the count is not limited.
type Headroom struct {
	// Windows[i] bounds the usage of in.Mandate.Windows[i].
	Windows []WindowHeadroom
	// MaxSubjectActions bounds Usage.SubjectActions (the recurrence limit).
	MaxSubjectActions int64
	// MaxFeeSpent bounds Usage.FeeSpentMinor (the fee budget).
	MaxFeeSpent int64
	// MaxOutstanding bounds LedgerOutstandingMinor (a refund's value
	// against what is still refundable).
	MaxOutstanding int64
	// MaxBudgetUsed bounds Usage.BudgetHeldMinor + Usage.BudgetSpentMinor
	// (the budget in the action's currency).
	MaxBudgetUsed int64
}

// WindowHeadroom bounds one window's usage.
type WindowHeadroom struct {
	WindowSpec
	MaxCalls       int64
	MaxAmountMinor int64
	// Name names the window in an assertion.
	Name string
}

// Unlimited is a bound that limits nothing.
const Unlimited = math.MaxInt64

// HeadroomOf returns in's bounds. Only an input whose checks pass with
// nothing counted (Uncounted) has meaningful ones; a count can never be
// negative, so a negative bound means the action cannot pass.
func HeadroomOf(in Input) Headroom {
	h := Headroom{MaxSubjectActions: Unlimited, MaxFeeSpent: Unlimited, MaxOutstanding: Unlimited, MaxBudgetUsed: Unlimited}
	a, m := in.Action, in.Mandate
	if a.Kind == sik.KindRefund {
		h.MaxOutstanding = in.Referent.RefundableMinor - a.AmountMinor
	}
	if m == nil {
		return h
	}
	for i, s := range WindowSpecs(in) {
		w := m.GetWindows()[i]
		wh := WindowHeadroom{WindowSpec: s, MaxCalls: Unlimited, MaxAmountMinor: Unlimited, Name: windowName(s)}
		if w.GetMaxCalls() > 0 {
			wh.MaxCalls = int64(w.GetMaxCalls()) - 1
		}
		if s.Currency != "" && s.Currency == a.Currency {
			wh.MaxAmountMinor = w.GetMaxAmount().GetAmountMinor() - a.AmountMinor
		}
		h.Windows = append(h.Windows, wh)
	}
	if l := m.GetRecurrenceLimit(); l > 0 {
		h.MaxSubjectActions = int64(l) - 1
	}
	if fb := m.GetFeeBudget(); fb != nil {
		h.MaxFeeSpent = fb.GetAmountMinor() - 1
	}
	if b := budgetFor(m, a.Currency); b != nil {
		h.MaxBudgetUsed = b.GetAmountMinor() - a.AmountMinor
	}
	return h
}

// Uncounted returns in as if nothing counted against the mandate yet: each
// window counted (empty) for its spec, no holds, fees or actions, nothing
// outstanding. Gates that pass on it pass on real counts exactly when the
// counts are within HeadroomOf(in).
func Uncounted(in Input) Input {
	in.Usage = Usage{}
	in.LedgerOutstandingMinor = 0
	for _, s := range WindowSpecs(in) {
		in.Usage.Windows = append(in.Usage.Windows, WindowUsage{WindowSpec: s})
	}
	return in
}

// Within reports whether usage u and outstanding fit h (the Go side of the
// ledger's assertions, for tests and for the slow path's own check).
func (h Headroom) Within(u Usage, outstanding int64) error {
	if len(u.Windows) != len(h.Windows) {
		return fmt.Errorf("%d windows counted, %d bounded", len(u.Windows), len(h.Windows))
	}
	for i, w := range h.Windows {
		amount := u.Windows[i].AmountMinor
		if w.Currency == "" {
			amount = 0
		}
		if u.Windows[i].Calls > w.MaxCalls || amount > w.MaxAmountMinor {
			return fmt.Errorf("%s has no room left", w.Name)
		}
	}
	switch {
	case u.SubjectActions > h.MaxSubjectActions:
		return fmt.Errorf("the recurrence limit has no room left")
	case u.FeeSpentMinor > h.MaxFeeSpent:
		return fmt.Errorf("the fee budget is exhausted")
	case outstanding > h.MaxOutstanding:
		return fmt.Errorf("more is outstanding than the refundable balance leaves room for")
	case u.BudgetHeldMinor > h.MaxBudgetUsed || u.BudgetSpentMinor > h.MaxBudgetUsed-u.BudgetHeldMinor:
		return fmt.Errorf("the budget has no room left")
	}
	return nil
}
