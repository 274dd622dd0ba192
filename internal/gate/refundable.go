package gate

import "fmt"

// refundable is what may still be refunded on a subject: the rail's
// refundable balance less what the ledger holds against it that the rail
// does not show yet. ok is false when either figure is negative, which
// only a resolution bug produces.
func refundable(r Referent, outstanding int64) (avail int64, ok bool) {
	if r.RefundableMinor < 0 || outstanding < 0 {
		return 0, false
	}
	return max(r.RefundableMinor-outstanding, 0), true // both ≥ 0: cannot overflow
}

// checkRefundable returns a reason code and sentence when refund a does not
// fit in what is still refundable on its subject; "" when it does.
func checkRefundable(a Action, r Referent, outstanding int64) (code, reason string) {
	avail, ok := refundable(r, outstanding)
	if !ok {
		return ReasonReferentInvalid, fmt.Sprintf("The rail reported %d refundable and the ledger %d outstanding on %s; neither may be negative, so the refund is refused.",
			r.RefundableMinor, outstanding, a.Subject)
	}
	why := ""
	if outstanding > 0 {
		why = fmt.Sprintf(" (the rail shows %d, and %d more is already being refunded through Countersign)", r.RefundableMinor, outstanding)
	}
	switch {
	case avail == 0:
		return ReasonNothingRefundable, fmt.Sprintf("Nothing is left to refund on %s%s.", a.Subject, why)
	case a.AmountMinor > avail && a.FullRefund:
		return ReasonAmountExceedsRefundable, fmt.Sprintf("A full refund of %s, valued at %d, exceeds the %d still refundable on %s%s; send an explicit amount of at most %d.",
			a.Subject, a.AmountMinor, avail, a.Subject, why, avail)
	case a.AmountMinor > avail:
		return ReasonAmountExceedsRefundable, fmt.Sprintf("%d exceeds the %d still refundable on %s%s.", a.AmountMinor, avail, a.Subject, why)
	}
	return "", ""
}
