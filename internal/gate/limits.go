package gate

import (
	"fmt"
	"strings"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/sik"
)

// CheckLimits is G3: does the action fit the mandate's fixed limits, given
// what already counts against them? Per-action bounds from the grant, the
// sliding windows, the recurrence limit, the fee budget and the total
// budget per currency (held + spent + this amount ≤ budget). Sums that
// would overflow int64 are refused, never wrapped. In approval_required
// mode an action within every limit is still HELD until the owner approves
// this exact request; an approval never lifts a limit.
//
// Pure as it is, its ALLOW is sound only when in.Usage was read under the
// mandate's usage lock in the transaction that writes the intent and its
// hold, or that transaction asserts the counts within HeadroomOf (B1); see
// the package doc.
func CheckLimits(in Input) Result {
	m, a, u := in.Mandate, in.Action, in.Usage
	g := grantFor(m, a.Kind)
	if g == nil {
		return block(GateLimits, ReasonNotEvaluated, "No mandate grants %s here (see %s), so its limits were not evaluated.", orNone(string(a.Kind)), GateScope)
	}
	switch {
	case a.AmountMinor <= 0:
		return block(GateLimits, ReasonAmountInvalid, "The amount must be positive; it is %s.", amount(in, a.AmountMinor, a.Currency))
	case u.BudgetHeldMinor < 0 || u.BudgetSpentMinor < 0 || u.FeeSpentMinor < 0 || u.SubjectActions < 0:
		return block(GateLimits, ReasonUsageInvalid, "The ledger counted %s held, %s spent, %s in fees and %d actions on %s; none may be negative.",
			amount(in, u.BudgetHeldMinor, a.Currency), amount(in, u.BudgetSpentMinor, a.Currency), amount(in, u.FeeSpentMinor, m.GetFeeBudget().GetCurrency()),
			u.SubjectActions, inert(a.Subject))
	case a.AmountMinor < g.GetMinAmountMinor():
		return block(GateLimits, ReasonAmountBelowMinimum, "%s is below the %s minimum %s grants per %s.",
			amount(in, a.AmountMinor, a.Currency), amount(in, g.GetMinAmountMinor(), a.Currency), mandateName(in), a.Kind)
	case a.AmountMinor > g.GetMaxAmountMinor():
		return block(GateLimits, ReasonAmountAboveMaximum, "%s is above the %s maximum %s grants per %s.",
			amount(in, a.AmountMinor, a.Currency), amount(in, g.GetMaxAmountMinor(), a.Currency), mandateName(in), a.Kind)
	}
	for _, check := range []func(Input) (string, string){checkWindows, checkRecurrence, checkFees, checkPaidSpeed, checkBudget, checkGrantCurrency} {
		if code, why := check(in); code != "" {
			return block(GateLimits, code, "%s", why)
		}
	}
	if m.GetMode() != countersignv1.MandateMode_MANDATE_MODE_BUDGETED {
		ok, code, why := approval(in)
		if !ok {
			return hold(GateLimits, code, "%s is approval_required: %s.", mandateName(in), why)
		}
		return result(GateLimits, Allow, ReasonApproved, "Within every limit of %s, and %s.", mandateName(in), why)
	}
	return pass(GateLimits, "%s is within every limit of %s.", amount(in, a.AmountMinor, a.Currency), mandateName(in))
}

// checkRecurrence: the mandate's limit on actions on one subject.
func checkRecurrence(in Input) (code, reason string) {
	limit, n := in.Mandate.GetRecurrenceLimit(), in.Usage.SubjectActions
	if limit > 0 && n >= int64(limit) {
		return ReasonRecurrenceLimitExceeded, fmt.Sprintf("%d actions on %s already count against the recurrence limit of %d that %s sets.",
			n, in.Action.Subject, limit, mandateName(in))
	}
	return "", ""
}

// checkFees: fees are known only once the rail answers, so the fee budget
// cannot reserve this action's fee; it stops new actions once the fees
// already reported reach it (fees of actions in flight may overrun it).
//
// The fees counted carry no currency: the rails charge a payout's or a
// transfer's fee in its own currency (Stripe's balance transaction, a
// RazorpayX payout's INR). With a fee budget, such an action in another
// currency than the budget's is refused: its fee, counted as the budget's
// minor units, would mean anything (a review: 12.00 USD of fees counted as
// 1,200 against a budget of 1,500 JPY).
func checkFees(in Input) (code, reason string) {
	fb, a := in.Mandate.GetFeeBudget(), in.Action
	if fb != nil && (a.Kind == sik.KindPayout || a.Kind == sik.KindTransfer) && a.Currency != fb.GetCurrency() {
		return ReasonFeeCurrencyNotBudgeted, fmt.Sprintf("%s sets its fee budget in %s, and the rail charges a %s's fee in its own currency, %s, which the fee budget cannot count; ask the owner for a mandate whose fee budget is in %s.",
			mandateName(in), fb.GetCurrency(), a.Kind, orNone(inert(a.Currency)), orNone(inert(a.Currency)))
	}
	if fb == nil || in.Usage.FeeSpentMinor < fb.GetAmountMinor() {
		return "", ""
	}
	return ReasonFeeBudgetExhausted, fmt.Sprintf("The rail has charged %s in fees on this mandate's actions, which exhausts the fee budget of %s that %s sets.",
		amount(in, in.Usage.FeeSpentMinor, fb.GetCurrency()), amount(in, fb.GetAmountMinor(), fb.GetCurrency()), mandateName(in))
}

// checkBudget: held + spent + this amount ≤ the mandate's budget in the
// action's currency. A mandate with no budget at all is limited only by
// its grants and windows; one with budgets allows no spending in a granted
// currency it sets none for (a review spent 4 × 50,000 JPY under a mandate
// whose only budget was 500.00 USD: the grant's maximum is one number for
// all its currencies).
func checkBudget(in Input) (code, reason string) {
	a, u := in.Action, in.Usage
	b := budgetFor(in.Mandate, a.Currency)
	if b == nil {
		if a.Currency == "" || len(in.Mandate.GetBudgets()) == 0 {
			return "", ""
		}
		var set []string
		for _, b := range in.Mandate.GetBudgets() {
			set = append(set, b.GetCurrency())
		}
		return ReasonCurrencyNotBudgeted, fmt.Sprintf("%s sets budgets in %s but none in %s, so it allows no spending in %s; ask the owner for a budget in %s.",
			mandateName(in), strings.Join(set, ", "), inert(a.Currency), inert(a.Currency), inert(a.Currency))
	}
	used, ok1 := addMinor(u.BudgetHeldMinor, u.BudgetSpentMinor)
	total, ok2 := addMinor(used, a.AmountMinor)
	switch limit := b.GetAmountMinor(); {
	case limit < 0:
		return ReasonMandateInvalid, fmt.Sprintf("The %s budget of %s is negative (%s).", inert(a.Currency), mandateName(in), amount(in, limit, a.Currency))
	case !ok1 || !ok2:
		return ReasonAmountOverflow, fmt.Sprintf("%s plus the %s held and %s spent does not fit in a 64-bit amount, so it is refused.",
			amount(in, a.AmountMinor, a.Currency), amount(in, u.BudgetHeldMinor, a.Currency), amount(in, u.BudgetSpentMinor, a.Currency))
	case total > limit:
		cur := func(minor int64) string { return amount(in, minor, a.Currency) }
		return ReasonBudgetExceeded, fmt.Sprintf("%s would bring the held and spent %s budget of %s to %s, over its %s (%s held, %s spent, %s left).",
			cur(a.AmountMinor), inert(a.Currency), mandateName(in), cur(total), cur(limit), cur(u.BudgetHeldMinor), cur(u.BudgetSpentMinor), cur(max(limit-used, 0)))
	}
	return "", ""
}
