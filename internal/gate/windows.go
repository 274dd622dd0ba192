package gate

import (
	"fmt"
	"strings"
	"time"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/sik"
)

// WindowSpec says what the ledger counts for one of the mandate's sliding
// windows: the mandate's actions of Key whose budget hold is reserved (in
// flight or unknown, whenever decided) or posted with its rail answer
// recorded at or after Since, so that no span of Duration on the rail's
// clock holds more than the limit.
type WindowSpec struct {
	Scope    countersignv1.WindowScope
	Duration time.Duration
	Since    time.Time // Now − Duration
	// Key is the agent id (agent scope), or the payee (payee scope): the
	// destination of a payout or transfer, the subject of a refund.
	Key string
	// Currency is the currency of the window's amount limit, "" when it
	// limits calls only; only actions in it add to WindowUsage.AmountMinor.
	Currency string
}

// WindowSpecs returns, for each of in.Mandate's windows in order, what the
// ledger must count into in.Usage.Windows.
func WindowSpecs(in Input) []WindowSpec {
	ws := in.Mandate.GetWindows()
	specs := make([]WindowSpec, len(ws))
	for i, w := range ws {
		d := w.GetDuration().AsDuration()
		s := WindowSpec{Scope: w.GetScope(), Duration: d, Since: in.Now.Add(-d), Key: in.Agent.ID, Currency: w.GetMaxAmount().GetCurrency()}
		if s.Scope == countersignv1.WindowScope_WINDOW_SCOPE_PAYEE {
			s.Key = payeeKey(in.Action)
		}
		specs[i] = s
	}
	return specs
}

func payeeKey(a Action) string {
	if a.Kind == sik.KindRefund {
		return a.Subject
	}
	return a.Payee
}

// checkWindows returns a reason code and sentence for the first window this
// action would overrun, or for usage that was not counted for these
// windows; "" when every window has room.
func checkWindows(in Input) (code, reason string) {
	specs, ws, used := WindowSpecs(in), in.Mandate.GetWindows(), in.Usage.Windows
	if len(used) != len(specs) {
		return ReasonUsageInvalid, fmt.Sprintf("The ledger counted %d windows but %s has %d, so its windows cannot be checked.", len(used), mandateName(in), len(specs))
	}
	a := in.Action
	for i, s := range specs {
		u, w := used[i], ws[i]
		switch {
		case s.Duration <= 0 || s.Scope == countersignv1.WindowScope_WINDOW_SCOPE_UNSPECIFIED || w.GetMaxCalls() < 0 || w.GetMaxAmount().GetAmountMinor() < 0:
			return ReasonMandateInvalid, fmt.Sprintf("Window %d of %s lacks a scope or a positive duration, or has a negative limit.", i+1, mandateName(in))
		case u.Scope != s.Scope || u.Duration != s.Duration || u.Key != s.Key || u.Currency != s.Currency || !u.Since.Equal(s.Since):
			return ReasonUsageInvalid, fmt.Sprintf("The ledger counted window %d as %s, but it is %s.", i+1, windowName(u.WindowSpec), windowName(s))
		case u.Calls < 0 || u.AmountMinor < 0:
			return ReasonUsageInvalid, fmt.Sprintf("The ledger counted %d calls and %s for %s; neither may be negative.", u.Calls, amount(in, u.AmountMinor, s.Currency), windowName(s))
		case w.GetMaxCalls() > 0 && u.Calls >= int64(w.GetMaxCalls()):
			return ReasonWindowCallsExceeded, fmt.Sprintf("%s allows %d calls and %d already count against it; wait for the window to slide.",
				windowName(s), w.GetMaxCalls(), u.Calls)
		}
		if s.Currency == "" || s.Currency != a.Currency {
			continue
		}
		limit := w.GetMaxAmount().GetAmountMinor()
		total, ok := addMinor(u.AmountMinor, a.AmountMinor)
		switch {
		case !ok:
			return ReasonAmountOverflow, fmt.Sprintf("%s plus the %s already in %s does not fit in a 64-bit amount.",
				amount(in, a.AmountMinor, a.Currency), amount(in, u.AmountMinor, a.Currency), windowName(s))
		case total > limit:
			cur := func(minor int64) string { return amount(in, minor, a.Currency) }
			return ReasonWindowAmountExceeded, fmt.Sprintf("This %s of %s would bring %s to %s, over its limit of %s (%s already used, %s left).",
				a.Kind, cur(a.AmountMinor), windowName(s), cur(total), cur(limit), cur(u.AmountMinor), cur(max(limit-u.AmountMinor, 0)))
		}
	}
	return checkWindowCurrency(in)
}

// checkWindowCurrency: an amount limit in one currency is no limit in
// another. A mandate whose windows of a scope limit the amount moved allows
// no action in a currency none of them counts (a review: once a daily cap
// of 1,000.00 USD was used up, payouts of 50,000.00 EUR went on all day
// under a grant of both), as checkBudget refuses a currency without a
// budget beside one with.
func checkWindowCurrency(in Input) (code, reason string) {
	a := in.Action
	if a.Currency == "" {
		return "", ""
	}
	for _, scope := range []countersignv1.WindowScope{countersignv1.WindowScope_WINDOW_SCOPE_AGENT, countersignv1.WindowScope_WINDOW_SCOPE_PAYEE} {
		var set []string
		covered := false
		for _, w := range in.Mandate.GetWindows() {
			if c := w.GetMaxAmount().GetCurrency(); w.GetScope() == scope && c != "" {
				set = append(set, c)
				covered = covered || c == a.Currency
			}
		}
		if len(set) > 0 && !covered {
			of := "agent"
			if scope == countersignv1.WindowScope_WINDOW_SCOPE_PAYEE {
				of = "payee"
			}
			return ReasonCurrencyNotWindowed, fmt.Sprintf("%s limits the amount per %s window in %s but in none in %s, so it allows no spending in %s; ask the owner for a window in %s.",
				mandateName(in), of, strings.Join(set, ", "), inert(a.Currency), inert(a.Currency), inert(a.Currency))
		}
	}
	return "", ""
}

// windowName names a window in a sentence: "the 24h window of agent agt_1".
func windowName(s WindowSpec) string {
	of := "agent " + inert(s.Key)
	if s.Scope == countersignv1.WindowScope_WINDOW_SCOPE_PAYEE {
		of = "payee " + inert(s.Key)
	}
	return fmt.Sprintf("the %s window of %s", shortDuration(s.Duration), of)
}

// shortDuration writes d without zero tails: 24h, 1h30m, 90s → 1m30s.
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
