package stripe

import (
	"testing"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// TestReversible: of the actions parsed from requests, only a standard
// payout (method absent or standard: Stripe cancels a payout while it is
// pending) is reversible. A transfer is not: Stripe reverses one only while
// the destination account still holds the funds, which a connected account
// that pays out at once does not (a review's finding: a reversible-only
// grant admitted every transfer). A native action's payout method other
// than standard is not reversible either (fail closed).
func TestReversible(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  rail.Request
		want bool
	}{
		{"standard payout, method absent", post("/v1/payouts", "amount=100&currency=usd&destination=ba_1"), true},
		{"standard payout", post("/v1/payouts", "amount=100&currency=usd&destination=ba_1&method=standard"), true},
		{"instant payout", post("/v1/payouts", "amount=100&currency=usd&destination=ba_1&method=instant"), false},
		{"transfer", post("/v1/transfers", "amount=100&currency=usd&destination=acct_1"), false},
		{"transfer from a charge", post("/v1/transfers", "amount=100&currency=usd&destination=acct_1&source_transaction=ch_1"), false},
		{"refund", post("/v1/refunds", "payment_intent=pi_1&amount=100"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New().Parse(tc.req)
			if err != nil || p.Kind != rail.KindAction {
				t.Fatalf("Parse = %+v, %v; want an action", p, err)
			}
			if got := New().(rail.Reverser).Reversible(p.Action); got != tc.want {
				t.Fatalf("Reversible(%s %v) = %v, want %v", p.Action.Kind, p.Action.Extra, got, tc.want)
			}
		})
	}
	// Actions a native caller names (not parsed, so not normalised).
	for _, tc := range []struct {
		name string
		a    rail.Action
		want bool
	}{
		{"payout without extra", rail.Action{Kind: sik.KindPayout}, true},
		{"payout, method Instant", rail.Action{Kind: sik.KindPayout, Extra: map[string]string{"method": "Instant"}}, false},
		{"payout, method empty", rail.Action{Kind: sik.KindPayout, Extra: map[string]string{"method": ""}}, false},
		{"transfer", rail.Action{Kind: sik.KindTransfer}, false},
		{"unknown kind", rail.Action{Kind: "capture"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := New().(rail.Reverser).Reversible(tc.a); got != tc.want {
				t.Fatalf("Reversible = %v, want %v", got, tc.want)
			}
		})
	}
}
