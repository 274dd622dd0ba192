package gate

import "fmt"

// refundable is what may still be refunded on a subject: the rail's
// refundable balance less what the ledger holds against it that the rail
// does not show yet. ok is false when either figure is negative, which
// only a resolution bug produces.
func refundable(r Referent, outstanding int64) (avail int64, ok bool) {
	return Refundable(r, outstanding)
}

// Refundable is what CheckValue (G2) holds a refund to: the rail's
// refundable balance on the referent less what the ledger has outstanding
// on it, never below 0; ok is false when either figure is negative (G2
// then refuses). Exported so the owner API shows the very figure.
func Refundable(r Referent, outstanding int64) (avail int64, ok bool) {
	if r.RefundableMinor < 0 || outstanding < 0 {
		return 0, false
	}
	return max(r.RefundableMinor-outstanding, 0), true // both ≥ 0: cannot overflow
}

// checkRefundable returns a reason code and sentence when the refund in.Action
// does not fit in what is still refundable on its subject; "" when it does.
func checkRefundable(in Input, r Referent, outstanding int64) (code, reason string) {
	a := in.Action
	cur := func(minor int64) string { return amount(in, minor, a.Currency) }
	avail, ok := refundable(r, outstanding)
	if !ok {
		return ReasonReferentInvalid, fmt.Sprintf("The rail reported %s refundable and the ledger %s outstanding on %s; neither may be negative, so the refund is refused.",
			cur(r.RefundableMinor), cur(outstanding), inert(a.Subject))
	}
	why := ""
	if outstanding > 0 {
		why = fmt.Sprintf(" (the rail shows %s, and %s more is already being refunded through Countersign, or is quarantined until its owner resolves it)", cur(r.RefundableMinor), cur(outstanding))
	}
	switch {
	case avail == 0:
		return ReasonNothingRefundable, fmt.Sprintf("Nothing is left to refund on %s%s.", inert(a.Subject), why)
	case a.AmountMinor > avail && a.FullRefund:
		return ReasonAmountExceedsRefundable, fmt.Sprintf("A full refund of %s, valued at %s, exceeds the %s still refundable on %s%s; send an explicit amount of at most %s (%d in minor units).",
			inert(a.Subject), cur(a.AmountMinor), cur(avail), inert(a.Subject), why, cur(avail), avail)
	case a.AmountMinor > avail:
		return ReasonAmountExceedsRefundable, fmt.Sprintf("%s exceeds the %s still refundable on %s%s.", cur(a.AmountMinor), cur(avail), inert(a.Subject), why)
	}
	return "", ""
}
