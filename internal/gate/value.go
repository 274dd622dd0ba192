package gate

import (
	"slices"

	"github.com/countersign/countersign/internal/sik"
)

// CheckValue is G2: is the action's value sound against its referent as
// the rail reports it? The amount is positive, the currency is the
// referent's, a refund stays within what is still refundable once the
// ledger's outstanding refunds are taken off, and a payout or transfer goes
// to a payee on the mandate's allowlist when it has one. Refunds go back to
// the original payer and are not checked against the allowlist.
func CheckValue(in Input) Result {
	a, r := in.Action, in.Referent
	refund := a.Kind == sik.KindRefund
	switch {
	case a.AmountMinor <= 0 && (!refund || !a.FullRefund): // a full refund of nothing says so below
		return block(GateValue, ReasonAmountInvalid, "The amount must be positive; it is %s.", amount(in, a.AmountMinor, a.Currency))
	case a.Currency == "":
		return block(GateValue, ReasonCurrencyUnresolved, "The currency of this %s on %s could not be determined.", a.Kind, inert(a.Subject))
	case r.Currency != "" && r.Currency != a.Currency:
		return block(GateValue, ReasonCurrencyMismatch, "The request is in %s but %s is in %s.", inert(a.Currency), inert(a.Subject), inert(r.Currency))
	}
	if refund {
		if r.Currency == "" {
			return block(GateValue, ReasonReferentInvalid, "The rail did not report the currency of %s, so the refund cannot be checked.", inert(a.Subject))
		}
		if code, why := checkRefundable(in, r, in.LedgerOutstandingMinor); code != "" {
			return block(GateValue, code, "%s", why)
		}
		if a.AmountMinor <= 0 {
			return block(GateValue, ReasonAmountInvalid, "The full refund of %s was valued at %s; it must be positive.", inert(a.Subject), amount(in, a.AmountMinor, a.Currency))
		}
		return pass(GateValue, "%s is within what is still refundable on %s.", amount(in, a.AmountMinor, a.Currency), inert(a.Subject))
	}
	if in.Mandate == nil {
		return block(GateValue, ReasonNotEvaluated, "There is no mandate (see %s), so payee %s cannot be checked against its allowlist.", GateScope, orNone(inert(a.Payee)))
	}
	allowed := in.Mandate.GetAllowedPayees()
	switch {
	case len(allowed) == 0:
		return pass(GateValue, "%s to %s; %s sets no payee allowlist.", amount(in, a.AmountMinor, a.Currency), orNone(inert(a.Payee)), mandateName(in))
	case a.Payee == "":
		return block(GateValue, ReasonPayeeNotAllowed, "This %s names no payee, and %s allows only the payees it lists.", a.Kind, mandateName(in))
	case !slices.Contains(allowed, a.Payee):
		return block(GateValue, ReasonPayeeNotAllowed, "Payee %s is not on the allowlist of %s; ask the owner to add it.", inert(a.Payee), mandateName(in))
	}
	return pass(GateValue, "%s to %s, a payee %s allows.", amount(in, a.AmountMinor, a.Currency), inert(a.Payee), mandateName(in))
}
