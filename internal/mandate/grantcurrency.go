package mandate

import (
	"fmt"
	"strings"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/money"
)

// grantCurrencies refuses a grant that names more than one currency in a
// mandate that limits no amount per currency. A grant's max_amount_minor
// (and min_amount_minor) is one number of minor units for all its
// currencies, and minor units of different currencies are worth different
// amounts: an owner who grants refunds in KRW and USD up to 500000, meaning
// ₩500,000 (about 360 USD), lets the agent refund 5,000.00 USD (a review).
//
// A mandate grants each action once (mandate.grants_unique_action), so the
// owner cannot write one grant per currency; what bounds each currency in
// its own units is a budget or an amount window. Once the mandate sets any,
// the gates refuse an action in a currency that has none of its own
// (currency_not_budgeted, currency_not_windowed), so the only mandate left
// exposed is one with neither, which is refused here. G3 refuses such a
// stored mandate's multi-currency actions too (grant_currency_ambiguous).
func (c *checker) grantCurrencies(m *countersignv1.Mandate) {
	if amountLimited(m) {
		return
	}
	conv := money.ForRail(railName(m.GetRail()))
	for i, g := range m.GetGrants() {
		curs := g.GetCurrencies()
		if len(curs) < 2 {
			continue
		}
		var means []string
		for _, cur := range curs {
			means = append(means, conv.Format(g.GetMaxAmountMinor(), cur))
		}
		c.add(fmt.Sprintf("grants[%d].currencies", i), "grant.currency_ambiguous",
			"%s are granted under one max_amount_minor of %d, but amounts are minor units of one currency (%d is %s), and the mandate sets no budget or amount window to bound each currency in its own units; grant one currency, or add a budget in each of %s",
			strings.Join(curs, ", "), g.GetMaxAmountMinor(), g.GetMaxAmountMinor(), strings.Join(means, " or "), strings.Join(curs, ", "))
	}
}

// amountLimited: m sets a budget or a window with an amount limit.
func amountLimited(m *countersignv1.Mandate) bool {
	if len(m.GetBudgets()) > 0 {
		return true
	}
	for _, w := range m.GetWindows() {
		if w.GetMaxAmount() != nil {
			return true
		}
	}
	return false
}
