package gate

import (
	"fmt"

	"github.com/countersign/countersign/internal/sik"
)

// checkPaidSpeed: a Razorpay instant refund (speed "optimum") is a paid
// service, but the rail reports a fee only on payouts, so the fee budget
// would never count it; speed is a key member the agent chooses and no
// mandate field controls. With a fee budget, a Razorpay refund at any
// speed but the free "normal" (or none, which Razorpay reads as normal) is
// refused rather than let it spend fees the budget cannot see.
//
// It sees speed only through Action.Extra, which the caller must fill with
// the adapter's key members; an Action without it reads as speed absent.
func checkPaidSpeed(in Input) (code, reason string) {
	a := in.Action
	if in.Mandate.GetFeeBudget() == nil || in.Rail != sik.RailRazorpay || a.Kind != sik.KindRefund {
		return "", ""
	}
	switch speed, set := a.Extra["speed"]; {
	case !set || speed == "normal":
		return "", ""
	default:
		return ReasonRefundSpeedNotBudgeted, fmt.Sprintf("%s sets a fee budget, and a Razorpay refund at speed %q is charged a fee Razorpay does not report on the refund, so the fee budget cannot count it; send the refund without speed, or with speed \"normal\", or ask the owner for a mandate without a fee budget.",
			mandateName(in), inert(speed))
	}
}
