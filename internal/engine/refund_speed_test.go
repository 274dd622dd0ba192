package engine

import (
	"context"
	"testing"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/gate"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/razorpay"
	"github.com/countersign/countersign/internal/sik"
	"github.com/countersign/countersign/internal/testing/mockrail"
)

// TestAPaidRefundSpeedIsRefusedUnderAFeeBudget: a Razorpay instant refund
// (speed optimum) is a paid service whose fee Razorpay's refund does not
// report, so under a fee budget, which could not count it, it is refused
// before any rail read; at normal speed, or without a fee budget, it is not
// (found by a review: the agent could spend fees the budget never saw).
func TestAPaidRefundSpeedIsRefusedUnderAFeeBudget(t *testing.T) {
	ctx := context.Background()
	newSpeedRig := func(t *testing.T, feeBudget bool) *rig {
		return newRigOn(t, rigRail{account: "rzp_1", rail: sik.RailRazorpay, host: "api.razorpay.com",
			key: mockrail.DefaultRazorpayKeyID + ":" + mockrail.DefaultRazorpayKeySecret, adapter: func() rail.Adapter { return razorpay.New() },
			mandateRail: countersignv1.Rail_RAIL_RAZORPAY, kind: countersignv1.ActionKind_ACTION_KIND_REFUND, currency: "INR",
			payments: []mockrail.Payment{{Rail: mockrail.Razorpay, ID: "pay_29QQoUBi66xm2g", Amount: 1 << 30, Currency: "INR"}}},
			func(m *countersignv1.Mandate) {
				if feeBudget {
					m.FeeBudget = &countersignv1.Money{AmountMinor: 10_000, Currency: "INR"}
				}
			})
	}
	refund := func(r *rig, amount, speed string) Request {
		body := `{"amount":` + amount
		if speed != "" {
			body += `,"speed":"` + speed + `"`
		}
		return Request{Source: SourceExtAuthz, RequestID: "req", Credential: r.secret, Method: "POST", Host: "api.razorpay.com",
			Path: "/v1/payments/pay_29QQoUBi66xm2g/refund", Headers: map[string]string{"content-type": "application/json"}, Body: []byte(body + "}")}
	}
	t.Run("fee budget", func(t *testing.T) {
		r := newSpeedRig(t, true)
		before := len(r.mock.Journal().Requests)
		out := r.e.Decide(ctx, refund(r, "100", "optimum"))
		expect(t, out, Block, gate.ReasonRefundSpeedNotBudgeted)
		if read := len(r.mock.Journal().Requests) - before; out.Intent != nil || read != 0 {
			t.Fatalf("a refused paid refund left an intent (%+v) or read the rail (%d requests)", out.Intent, read)
		}
		expect(t, r.e.Decide(ctx, refund(r, "101", "normal")), Allow, ReasonAllowed)
		expect(t, r.e.Decide(ctx, refund(r, "102", "")), Allow, ReasonAllowed)
	})
	t.Run("no fee budget", func(t *testing.T) {
		r := newSpeedRig(t, false)
		expect(t, r.e.Decide(ctx, refund(r, "100", "optimum")), Allow, ReasonAllowed)
	})
}
