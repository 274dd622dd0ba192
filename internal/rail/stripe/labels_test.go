package stripe

import (
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/railtest"
)

// Every label member is reported with its value (the approval covers it)
// and whether it is free text (the mandate's free_text applies); the stamp
// and expand[] are not labels.
func TestLabels(t *testing.T) {
	text := func(v string) rail.Label { return rail.Label{Value: v, FreeText: true} }
	for _, tc := range []struct {
		name string
		req  rail.Request
		want map[string]rail.Label
	}{
		{"none", post("/v1/refunds", "payment_intent=pi_1&amount=100"), nil},
		{"stamp and expand are not labels", post("/v1/refunds", "payment_intent=pi_1&metadata[countersign_sik]=x&expand[]=balance_transaction"), nil},
		{"refund reason is a closed label, metadata free text", post("/v1/refunds", "payment_intent=pi_1&reason=duplicate&metadata[ticket]=T-77"),
			map[string]rail.Label{"reason": {Value: "duplicate"}, "metadata[ticket]": text("T-77")}},
		{"payout description and statement descriptor", post("/v1/payouts", "amount=5&currency=usd&destination=ba_1&description=weekly&statement_descriptor=ACME"),
			map[string]rail.Label{"description": text("weekly"), "statement_descriptor": text("ACME")}},
		{"transfer group", post("/v1/transfers", "amount=5&currency=usd&destination=acct_1&transfer_group=ORDER_9&description=d"),
			map[string]rail.Label{"transfer_group": text("ORDER_9"), "description": text("d")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New().Parse(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p.Action.Labels, tc.want) {
				t.Errorf("Labels = %v, want %v", p.Action.Labels, tc.want)
			}
		})
	}
}

// TestHiddenLabelTextIsRefused: metadata or a description holding a
// character that is not seen (railtest.HiddenText) is refused, naming it:
// an owner approving "T-77" must not approve a card number written in tag
// characters after it. Text that reads as written is kept.
func TestHiddenLabelTextIsRefused(t *testing.T) {
	for kind, s := range railtest.HiddenText {
		for _, req := range []rail.Request{
			post("/v1/refunds", "payment_intent=pi_1&metadata[ticket]="+url.QueryEscape(s)),
			post("/v1/refunds", "payment_intent=pi_1&metadata["+url.QueryEscape(s)+"]=T-77"),
			post("/v1/payouts", "amount=5&currency=usd&destination=ba_1&description="+url.QueryEscape(s)),
		} {
			_, err := New().Parse(req)
			if err == nil {
				t.Errorf("%s: Parse(%q) accepted it", kind, req.Body)
			} else if !strings.Contains(err.Error(), "invisible character U+") && !strings.Contains(err.Error(), "must be a plain value") {
				t.Errorf("%s: Parse(%q) = %v; want a refusal naming the invisible character", kind, req.Body, err)
			}
		}
	}
	for kind, s := range railtest.ShownText {
		p, err := New().Parse(post("/v1/refunds", "payment_intent=pi_1&metadata[ticket]="+url.QueryEscape(s)))
		if err != nil || p.Action.Labels["metadata[ticket]"].Value != s {
			t.Errorf("%s: Parse = %+v, %v; want the label kept", kind, p.Action.Labels, err)
		}
	}
}
