package mcp

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/railtest"
)

// A tool's metadata argument (by key, the stamp excluded) and its ignored
// arguments are labels, all free text: the server decides what they take.
// So is an Extra argument with no list of values (it is keyed too), unless
// it is a boolean or the default: the model may write any text in it.
func TestLabels(t *testing.T) {
	text := func(v string) rail.Label { return rail.Label{Value: v, FreeText: true} }
	at := func(r rail.Request) rail.Request { r.Path = "/v2/mcp"; return r } // payoutConfig's endpoint
	for _, tc := range []struct {
		name string
		cfg  Config
		req  rail.Request
		want map[string]rail.Label
	}{
		{"none", StripeDefaults(), call("create_refund", `{"payment_intent":"pi_1","amount":1500}`), nil},
		{"stripe reason", StripeDefaults(), call("create_refund", `{"payment_intent":"pi_1","amount":1500,"reason":"duplicate"}`),
			map[string]rail.Label{"reason": text("duplicate")}},
		{"razorpay notes and receipt", RazorpayDefaults(), call("create_refund", `{"payment_id":"pay_1","amount":100,"receipt":"R1","notes":{"ticket":"T-77","countersign_sik":"x","n":7}}`),
			map[string]rail.Label{"receipt": text("R1"), "notes.ticket": text("T-77"), "notes.n": text("7")}},
		{"razorpay speed has a list of values", RazorpayDefaults(), call("create_refund", `{"payment_id":"pay_1","amount":100,"speed":"optimum"}`), nil},
		{"extra without values, the default", payoutConfig(), at(call("create_payout", `{"destination":"ba_1","amount":5000,"currency":"usd","method":"standard","instant":true}`)), nil},
		{"extra without values, a string and an integer", payoutConfig(), at(call("create_payout", `{"destination":"ba_1","amount":5000,"currency":"usd","method":"4111 1111 1111 1111","instant":4111111111111111}`)),
			map[string]rail.Label{"method": text("4111 1111 1111 1111"), "instant": text("4111111111111111")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := mustNew(t, tc.cfg)().Parse(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p.Action.Labels, tc.want) {
				t.Errorf("Labels = %v, want %v", p.Action.Labels, tc.want)
			}
		})
	}
}

// TestHiddenLabelTextIsRefused: a tool's metadata (a value or a key) or an
// ignored argument holding a character that is not seen
// (railtest.HiddenText) is refused, naming it; text that reads as written
// is kept.
func TestHiddenLabelTextIsRefused(t *testing.T) {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	for kind, s := range railtest.HiddenText {
		for _, args := range []string{
			`{"payment_id":"pay_1","amount":100,"notes":{"ticket":` + q(s) + `}}`,
			`{"payment_id":"pay_1","amount":100,"notes":{` + q(s) + `:"T-77"}}`,
			`{"payment_id":"pay_1","amount":100,"receipt":` + q(s) + `}`,
		} {
			if _, err := mustNew(t, RazorpayDefaults())().Parse(call("create_refund", args)); err == nil || !strings.Contains(err.Error(), "invisible character U+") {
				t.Errorf("%s: Parse(%s) = %v; want a refusal naming the invisible character", kind, args, err)
			}
		}
	}
	for kind, s := range railtest.ShownText {
		p, err := mustNew(t, RazorpayDefaults())().Parse(call("create_refund", `{"payment_id":"pay_1","amount":100,"notes":{"ticket":`+q(s)+`}}`))
		if err != nil || p.Action.Labels["notes.ticket"].Value != s {
			t.Errorf("%s: Parse = %+v, %v; want the label kept", kind, p.Action.Labels, err)
		}
	}
}
