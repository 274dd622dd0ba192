package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
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

// TestAStampedEntityElsewhereIsNotApplied: a stamped entity of the right
// amount may still have paid someone else (a Razorpay payout list is the
// account's, a Stripe one every destination's; a Stripe refund or transfer
// search reads the account's listing before it claims absence). Find's
// match says
// how it differs from the action as the adapter's own answer check reads
// it (its payment or destination too), and the reconciler does not take it
// as applied (found by a review: only amount and currency were compared,
// while the answer path refused the same body). The listing honours the
// filters Find sends, as the rails do (it once ignored them, and the
// refund case passed while real Stripe hid that refund from Find: found
// by a later review).
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
	stripeTransfer := func(dest string) string {
		return fmt.Sprintf(`{"object":"list","has_more":false,"data":[{"id":"tr_1","object":"transfer","destination":%q,"amount":1000000,"currency":"usd","metadata":{"countersign_sik":%q},"created":1760000000}]}`, dest, unlikeStamp)
	}
	rzpRefund := func(pay string) string {
		return fmt.Sprintf(`{"entity":"collection","count":1,"items":[{"id":"rfnd_1","entity":"refund","payment_id":%q,"amount":1000000,"currency":"INR","notes":{"countersign_sik":%q},"status":"processed","created_at":1760000000}]}`, pay, unlikeStamp)
	}
	rzpA := rail.Action{Kind: sik.KindPayout, Subject: "fa_1", AmountMinor: &n, Currency: "INR", Payee: "fa_1",
		Extra: map[string]string{"account_number": "7878780080316316", "mode": "IMPS"}}
	stripeA := rail.Action{Kind: sik.KindPayout, Subject: "ba_1", AmountMinor: &n, Currency: "USD", Payee: "ba_1"}
	refundA := rail.Action{Kind: sik.KindRefund, Subject: "pi_1", AmountMinor: &n, Currency: "USD"}
	transferA := rail.Action{Kind: sik.KindTransfer, Subject: "acct_1", AmountMinor: &n, Currency: "USD", Payee: "acct_1"}
	rzpRefundA := rail.Action{Kind: sik.KindRefund, Subject: "pay_1", AmountMinor: &n, Currency: "INR"}
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
		{"stripe transfer to its destination", stripe.New(), transferA, stripeTransfer("acct_1"), ""},
		{"stripe transfer to another destination", stripe.New(), transferA, stripeTransfer("acct_evil"), "acct_evil"},
		{"razorpay refund of its payment", razorpay.New(), rzpRefundA, rzpRefund("pay_1"), ""},
		// No Razorpay refund of another payment: the request names its
		// payment in the URL path, read alike by both, and Find reads that
		// payment's refunds alone (razorpay.Find).
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(honouring(t, tc.listing))
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

// honouring serves listing (a Stripe list or a Razorpay collection) with
// the filters of each request applied, as the rails apply them: Stripe's
// payment_intent, charge, destination and created[gte], Razorpay's from
// and a payment's refunds path.
func honouring(t *testing.T, listing string) http.Handler {
	var page map[string]json.RawMessage
	if err := json.Unmarshal([]byte(listing), &page); err != nil {
		t.Fatal(err)
	}
	items, key := page["data"], "data"
	if items == nil {
		items, key = page["items"], "items"
	}
	var all []map[string]any
	if err := json.Unmarshal(items, &all); err != nil {
		t.Fatal(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		keep := []map[string]any{}
		for _, e := range all {
			ok := true
			for _, f := range []string{"payment_intent", "charge", "destination"} {
				ok = ok && (!q.Has(f) || e[f] == q.Get(f))
			}
			if pay, found := strings.CutPrefix(r.URL.Path, "/v1/payments/"); found {
				ok = ok && e["payment_id"] == strings.TrimSuffix(pay, "/refunds")
			}
			for f, at := range map[string]string{"created[gte]": "created", "from": "created_at"} {
				if v, err := strconv.ParseFloat(q.Get(f), 64); err == nil {
					c, _ := e[at].(float64)
					ok = ok && c >= v
				}
			}
			if ok {
				keep = append(keep, e)
			}
		}
		out := map[string]any{}
		for k, v := range page {
			out[k] = v
		}
		out[key] = keep
		if key == "items" {
			out["count"] = len(keep)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}
