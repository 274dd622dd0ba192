package gate

import (
	"fmt"
	"strings"
)

// checkGrantCurrency: a grant's maximum is one number of minor units for
// all its currencies, and minor units of different currencies are worth
// different amounts (a review: refunds granted in KRW and USD up to 500000,
// meant as ₩500,000, let the agent refund 5,000.00 USD). Under a grant of
// more than one currency, an action in a currency no budget and no amount
// window bounds in its own units is refused. mandate.Validate refuses such
// a mandate since; this keeps one stored before from deciding on the
// ambiguous number (fail closed: the owner applies a mandate with a budget
// or an amount window in each currency, or one currency per grant).
//
// It runs after checkBudget and checkWindows, which already refuse a
// currency without its own budget or window once the mandate sets any, so
// it fires only for a mandate that limits no amount per currency at all.
func checkGrantCurrency(in Input) (code, reason string) {
	a := in.Action
	g := grantFor(in.Mandate, a.Kind)
	if g == nil || len(g.GetCurrencies()) < 2 || budgetFor(in.Mandate, a.Currency) != nil {
		return "", ""
	}
	for _, w := range in.Mandate.GetWindows() {
		if w.GetMaxAmount() != nil && w.GetMaxAmount().GetCurrency() == a.Currency {
			return "", ""
		}
	}
	means := make([]string, 0, len(g.GetCurrencies()))
	for _, c := range g.GetCurrencies() {
		means = append(means, amount(in, g.GetMaxAmountMinor(), c))
	}
	return ReasonGrantCurrencyAmbiguous, fmt.Sprintf("%s grants %s in %s up to one maximum of %d minor units (%s) and sets no budget or amount window in %s, so nothing says how much %s the owner meant; ask the owner for a mandate with a budget in %s, or one currency per grant.",
		mandateName(in), a.Kind, strings.Join(g.GetCurrencies(), ", "), g.GetMaxAmountMinor(), strings.Join(means, " or "),
		inert(a.Currency), inert(a.Currency), inert(a.Currency))
}
