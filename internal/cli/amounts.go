package cli

import (
	"fmt"
	"strings"
	"time"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/mandate"
	"github.com/countersign/countersign/internal/money"
)

// Tables and prompts show amounts in major units with the code; the APIs,
// mandate YAML and ledger keep integer minor units.

// convention is how rail r counts minor units.
func convention(r countersignv1.Rail) money.Convention {
	return money.ForRail(mandate.EnumName(r.Descriptor(), r.Number()))
}

// showMoney writes an API amount for a person: "600.00 USD".
func showMoney(r countersignv1.Rail, m *countersignv1.Money) string {
	if m == nil {
		return "-"
	}
	return convention(r).Format(m.GetAmountMinor(), m.GetCurrency())
}

// minorExample is "5000 = 50.00 USD": what a number of minor units means in
// currency on rail r, to show beside a question that asks for minor units.
// It reads them as the rail does, not by ISO 4217 alone: Stripe moves
// 5,000 MGA for 5000 (MGA is zero-decimal there), not 50.00.
func minorExample(r countersignv1.Rail, minor int64, currency string) string {
	conv := convention(r)
	if _, ok := conv.Exponent(currency); !ok {
		return fmt.Sprintf("%d minor units of %s", minor, currency)
	}
	return fmt.Sprintf("%d = %s", minor, conv.Format(minor, currency))
}

// mandateLimits summarises a mandate's amounts in major units: each
// grant's per-action maximum, each budget, and each window's amount.
func mandateLimits(m *countersignv1.Mandate) string {
	conv := convention(m.GetRail())
	var parts []string
	for _, g := range m.GetGrants() {
		var in []string
		for _, c := range g.GetCurrencies() {
			in = append(in, conv.Format(g.GetMaxAmountMinor(), c))
		}
		parts = append(parts, fmt.Sprintf("%s ≤ %s", mandate.EnumName(g.GetActionKind().Descriptor(), g.GetActionKind().Number()), strings.Join(in, " or ")))
	}
	for _, b := range m.GetBudgets() {
		parts = append(parts, "budget "+conv.Format(b.GetAmountMinor(), b.GetCurrency()))
	}
	for _, w := range m.GetWindows() {
		if w.GetMaxAmount() != nil {
			parts = append(parts, fmt.Sprintf("%s per %s", conv.Format(w.GetMaxAmount().GetAmountMinor(), w.GetMaxAmount().GetCurrency()), shortDuration(w.GetDuration().AsDuration())))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "; ")
}

// shortDuration writes d without zero tails: 24h, 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
