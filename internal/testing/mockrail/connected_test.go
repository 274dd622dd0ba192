package mockrail

import (
	"net/http"
	"testing"
)

func TestStripeConnectedAccount(t *testing.T) {
	victim := Payment{Rail: Stripe, ConnectedAccount: "acct_victim", ID: "pi_3003", Amount: 9000, Currency: "usd"}
	r := newRail(t, WithPayments(piUSD, victim))
	on := func(acct string) http.Header {
		h := stripeHeader(DefaultStripeKey, "")
		if acct != "" {
			h.Set("Stripe-Account", acct)
		}
		return h
	}
	refund := []byte(form("payment_intent", "pi_3003", "amount", "4000").Encode())

	// The platform does not see the connected account's payment.
	wantStatus(t, r.must("POST", "/v1/refunds", refund, on("")), 404)
	wantStatus(t, r.must("GET", "/v1/payment_intents/pi_1001", nil, on("acct_victim")), 404)
	// An unknown connected account is refused, and journaled as such.
	x := r.must("POST", "/v1/refunds", refund, on("acct_nobody"))
	wantStatus(t, x, 403)
	if x.str(t, "error", "code") != "account_invalid" {
		t.Fatalf("unknown connected account: %s", x.body)
	}
	// Named, the request acts on the connected account's payment.
	x = r.must("POST", "/v1/refunds", refund, on("acct_victim"))
	wantStatus(t, x, 200)
	if p, _ := r.srv.Payment("stripe/acct_victim", "pi_3003"); p.AmountRefunded != 4000 || p.Account != "stripe" || p.ConnectedAccount != "acct_victim" {
		t.Fatalf("victim payment after refund: %+v", p)
	}
	po := r.must("POST", "/v1/payouts", []byte(form("amount", "500", "currency", "usd", "destination", "ba_x").Encode()), on("acct_victim"))
	wantStatus(t, po, 200)
	// Its entities are its own.
	wantStatus(t, r.must("GET", "/v1/payouts/"+po.str(t, "id"), nil, on("")), 404)
	wantStatus(t, r.must("GET", "/v1/payouts/"+po.str(t, "id"), nil, on("acct_victim")), 200)

	j := r.srv.Journal()
	if len(j.Effects) != 2 {
		t.Fatalf("effects: %+v", j.Effects)
	}
	for _, e := range j.Effects {
		if e.Account != DefaultStripeAccount || e.ConnectedAccount != "acct_victim" {
			t.Fatalf("effect not on the connected account: %+v", e)
		}
	}
	var refused int
	for _, q := range j.Requests {
		if q.ConnectedAccount == "acct_nobody" && q.Outcome == OutcomeUnauthorized && q.Status == 403 {
			refused++
		}
	}
	if refused != 1 {
		t.Fatalf("the refused request is not journaled: %+v", j.Requests)
	}
}

func TestRazorpayConnectedAccount(t *testing.T) {
	sub := Payment{Rail: Razorpay, ConnectedAccount: "acc_sub1", ID: "pay_4004", Amount: 50000, Currency: "INR"}
	r := newRail(t, WithPayments(sub))
	wantStatus(t, r.rzp("POST", "/v1/payments/pay_4004/refund", map[string]any{"amount": 1000}), 400)
	wantStatus(t, r.rzp("POST", "/v1/payments/pay_4004/refund", map[string]any{"amount": 1000}, "X-Razorpay-Account", "acc_other"), 401)
	wantStatus(t, r.rzp("POST", "/v1/payments/pay_4004/refund", map[string]any{"amount": 1000}, "X-Razorpay-Account", "acc_sub1"), 200)
	if j := r.srv.Journal(); len(j.Effects) != 1 || j.Effects[0].ConnectedAccount != "acc_sub1" {
		t.Fatalf("effects: %+v", j.Effects)
	}
}

func TestConnectedAccountSeedErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Payment
	}{
		{"stripe needs acct_", Payment{Rail: Stripe, ConnectedAccount: "acc_x", ID: "pi_1", Amount: 1, Currency: "usd"}},
		{"razorpay needs acc_", Payment{Rail: Razorpay, ConnectedAccount: "acct_x", ID: "pay_1", Amount: 1, Currency: "INR"}},
		{"no slash", Payment{Rail: Stripe, ConnectedAccount: "acct_x/y", ID: "pi_1", Amount: 1, Currency: "usd"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(WithPayments(tc.p)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}
