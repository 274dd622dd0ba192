package reconcile

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/railtest"
	"github.com/countersign/countersign/internal/rail/razorpay"
	"github.com/countersign/countersign/internal/rail/stripe"
	"github.com/countersign/countersign/internal/sik"
)

const unlikeStamp = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"

// TestAStampedEntityElsewhereIsNotApplied: the rails' listings are not
// filtered by destination (a Razorpay payout list is the account's, a
// Stripe one every destination's), so a stamped entity of the right amount
// may still have paid someone else. Find's match says how it differs from
// the action as the adapter's own answer check reads it (its payment or
// destination too), and the reconciler does not take it as applied (found
// by a review: only amount and currency were compared, while the answer
// path refused the same body).
func TestAStampedEntityElsewhereIsNotApplied(t *testing.T) {
	n := int64(1000000)
	rzpPayout := func(fa string) string {
		return fmt.Sprintf(`{"entity":"collection","count":1,"items":[{"id":"pout_1","entity":"payout","fund_account_id":%q,"amount":1000000,"currency":"INR","notes":{"countersign_sik":%q},"status":"processing","created_at":1760000000}]}`, fa, unlikeStamp)
	}
	stripePayout := func(dest string) string {
		return fmt.Sprintf(`{"object":"list","has_more":false,"data":[{"id":"po_1","object":"payout","destination":%q,"amount":1000000,"currency":"usd","metadata":{"countersign_sik":%q},"status":"pending","created":1760000000}]}`, dest, unlikeStamp)
	}
	stripeRefund := func(pi string) string {
		return fmt.Sprintf(`{"object":"list","has_more":false,"data":[{"id":"re_1","object":"refund","payment_intent":%q,"charge":"ch_1","amount":1000000,"currency":"usd","metadata":{"countersign_sik":%q},"status":"succeeded","created":1760000000}]}`, pi, unlikeStamp)
	}
	rzpA := rail.Action{Kind: sik.KindPayout, Subject: "fa_1", AmountMinor: &n, Currency: "INR", Payee: "fa_1",
		Extra: map[string]string{"account_number": "7878780080316316", "mode": "IMPS"}}
	stripeA := rail.Action{Kind: sik.KindPayout, Subject: "ba_1", AmountMinor: &n, Currency: "USD", Payee: "ba_1"}
	refundA := rail.Action{Kind: sik.KindRefund, Subject: "pi_1", AmountMinor: &n, Currency: "USD"}
	for _, tc := range []struct {
		name    string
		adapter rail.Adapter
		a       rail.Action
		listing string
		says    string // "" when applied
	}{
		{"razorpay payout to its fund account", razorpay.New(), rzpA, rzpPayout("fa_1"), ""},
		{"razorpay payout to another fund account", razorpay.New(), rzpA, rzpPayout("fa_evil"), "fa_evil"},
		{"stripe payout to its destination", stripe.New(), stripeA, stripePayout("ba_1"), ""},
		{"stripe payout to another destination", stripe.New(), stripeA, stripePayout("ba_evil"), "ba_evil"},
		{"stripe refund of its payment", stripe.New(), refundA, stripeRefund("pi_1"), ""},
		{"stripe refund of another payment", stripe.New(), refundA, stripeRefund("pi_other"), "pi_other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprint(w, tc.listing)
			}))
			defer srv.Close()
			f, err := tc.adapter.Find(context.Background(), railtest.NewClient(srv.URL, "", srv.Client()), tc.a, unlikeStamp, time.Unix(1759990000, 0))
			if err != nil || f.Match == nil {
				t.Fatalf("Find: %+v %v", f, err)
			}
			got := unlike(tc.a, *f.Match)
			switch {
			case tc.says == "" && got != "":
				t.Fatalf("unlike = %q for the action's own entity", got)
			case tc.says != "" && !strings.Contains(got, tc.says):
				t.Fatalf("unlike = %q; want it to name %s", got, tc.says)
			}
		})
	}
}
