package mockrail

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

// TestAccountListings: the listings the reconciler reads before it claims
// an absence — every refund or transfer of the account since a time,
// whatever its payment or destination — are served as the rails do: the
// subject filter, when given, is applied; without it, every payment's or
// destination's entity created since is listed, and none older.
func TestAccountListings(t *testing.T) {
	t.Run("stripe refunds and transfers", func(t *testing.T) {
		pi2 := Payment{Rail: Stripe, ID: "pi_1002", Amount: 5000, Currency: "usd"}
		r := newRail(t, WithPayments(piUSD, pi2))
		refund := func(pi string) string {
			return r.stripe("POST", "/v1/refunds", form("payment_intent", pi, "amount", "1"), "").str(t, "id")
		}
		transfer := func(dest string) string {
			return r.stripe("POST", "/v1/transfers", form("amount", "1", "currency", "usd", "destination", dest), "").str(t, "id")
		}
		old, oldTr := refund("pi_1001"), transfer("acct_A")
		r.clock.Advance(10 * time.Second)
		since := strconv.FormatInt(r.clock.Now().Unix(), 10)
		mine, other := refund("pi_1001"), refund("pi_1002")
		mineTr, otherTr := transfer("acct_A"), transfer("acct_B")
		for _, tc := range []struct {
			path string
			q    []string
			want []string
		}{
			{"/v1/refunds", []string{"payment_intent", "pi_1001"}, []string{mine, old}},
			{"/v1/refunds", []string{"created[gte]", since}, []string{other, mine}},
			{"/v1/refunds", nil, []string{other, mine, old}},
			{"/v1/transfers", []string{"destination", "acct_A", "created[gte]", since}, []string{mineTr}},
			{"/v1/transfers", []string{"created[gte]", since}, []string{otherTr, mineTr}},
			{"/v1/transfers", nil, []string{otherTr, mineTr, oldTr}},
		} {
			x := r.stripe("GET", tc.path, form(append(tc.q, "limit", "100")...), "")
			wantStatus(t, x, 200)
			if got := ids(t, x); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("GET %s %v = %v, want %v", tc.path, tc.q, got, tc.want)
			}
		}
	})
	t.Run("razorpay refunds", func(t *testing.T) {
		pay2 := Payment{Rail: Razorpay, ID: "pay_29QQoUBi66xm2g", Amount: 50000, Currency: "INR"}
		r := newRail(t, WithPayments(payINR, pay2))
		refund := func(pay string) string {
			return r.rzp("POST", "/v1/payments/"+pay+"/refund", map[string]any{"amount": 1}).str(t, "id")
		}
		old := refund(payINR.ID)
		r.clock.Advance(10 * time.Second)
		since := strconv.FormatInt(r.clock.Now().Unix(), 10)
		mine, other := refund(payINR.ID), refund(pay2.ID)
		for _, tc := range []struct {
			path string
			want []string
		}{
			{"/v1/payments/" + payINR.ID + "/refunds?count=100", []string{mine, old}},
			{"/v1/refunds?count=100&from=" + since, []string{other, mine}},
			{"/v1/refunds?count=100", []string{other, mine, old}},
			{"/v1/refunds?count=1&skip=1&from=" + since, []string{mine}},
		} {
			x := r.rzp("GET", tc.path, nil)
			wantStatus(t, x, 200)
			if got := ids(t, x); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("GET %s = %v, want %v", tc.path, got, tc.want)
			}
		}
		// Razorpay refuses what the list does not take.
		wantStatus(t, r.rzp("GET", "/v1/refunds?payment_id="+payINR.ID, nil), 400)
	})
}
