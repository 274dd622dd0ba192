package gate

import (
	"testing"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/sik"
)

// razorpayRefundIn is refundIn on Razorpay at speed "optimum" (an instant
// refund, a paid service), under a mandate with a fee budget.
func razorpayRefundIn() Input {
	in := refundIn()
	in.Rail, in.Host, in.APIVersion = sik.RailRazorpay, "api.razorpay.com", ""
	in.Mandate.Rail = countersignv1.Rail_RAIL_RAZORPAY
	in.Action.Extra = map[string]string{"speed": "optimum"}
	return in
}

func TestCheckLimitsRefundSpeed(t *testing.T) {
	runGate(t, razorpayRefundIn, CheckLimits, GateLimits, []gateCase{
		{name: "instant refund beside a fee budget", verdict: Block, code: ReasonRefundSpeedNotBudgeted,
			contains: []string{`at speed "optimum"`, "fee budget cannot count it"}},
		{name: "a speed Razorpay may add later", mod: func(in *Input) { in.Action.Extra["speed"] = "instant" }, verdict: Block, code: ReasonRefundSpeedNotBudgeted},
		{name: "normal speed", mod: func(in *Input) { in.Action.Extra["speed"] = "normal" }, verdict: Allow, code: ReasonPassed},
		{name: "no speed", mod: func(in *Input) { in.Action.Extra = nil }, verdict: Allow, code: ReasonPassed},
		{name: "no fee budget", mod: func(in *Input) { in.Mandate.FeeBudget = nil }, verdict: Allow, code: ReasonPassed},
		{name: "not Razorpay", mod: func(in *Input) { in.Rail = sik.RailStripe }, verdict: Allow, code: ReasonPassed},
	})
}
