package razorpay

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/railtest"
)

// Every label member is reported, notes by key; all are free text; the
// stamp is not a label. A payout purpose other than Razorpay's defaults
// (one made in the Dashboard, or text the model composed) is keyed and
// also reported as free text, so the mandate's free_text sees it.
func TestLabels(t *testing.T) {
	text := func(v string) rail.Label { return rail.Label{Value: v, FreeText: true} }
	for _, tc := range []struct {
		name string
		req  rail.Request
		want map[string]rail.Label
	}{
		{"none", post(refundPath, `{"amount":100}`), nil},
		{"null notes and the stamp are none", post(refundPath, `{"amount":100,"notes":{"countersign_sik":"x"}}`), nil},
		{"refund receipt and notes", post(refundPath, `{"amount":100,"receipt":"R 31","notes":{"ticket":"T-77","countersign_sik":"x"}}`),
			map[string]rail.Label{"receipt": text("R 31"), "notes.ticket": text("T-77")}},
		{"payout reference, narration, notes", post("/v1/payouts", payoutBody),
			map[string]rail.Label{"reference_id": text("Acme Transaction ID 12345"), "narration": text("Acme Corp Fund Transfer"), "notes.notes_key_1": text("Tea, Earl Grey, Hot")}},
		{"payout default purpose is no label", post("/v1/payouts", payoutWithPurpose(`"utility bill"`)), nil},
		{"payout Dashboard purpose is free text", post("/v1/payouts", payoutWithPurpose(`"office rent 2"`)),
			map[string]rail.Label{"purpose": text("office rent 2")}},
		{"payout purpose of digits after a letter is free text", post("/v1/payouts", payoutWithPurpose(`"a4111111111111111 1229 123"`)),
			map[string]rail.Label{"purpose": text("a4111111111111111 1229 123")}},
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

// TestHiddenLabelTextIsRefused: a receipt or a note (its value or its key)
// holding a character that is not seen (railtest.HiddenText) is refused,
// naming it; text that reads as written is kept.
func TestHiddenLabelTextIsRefused(t *testing.T) {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	for kind, s := range railtest.HiddenText {
		for _, body := range []string{
			`{"amount":100,"receipt":` + q(s) + `}`,
			`{"amount":100,"notes":{"ticket":` + q(s) + `}}`,
			`{"amount":100,"notes":{` + q(s) + `:"T-77"}}`,
		} {
			if _, err := New().Parse(post(refundPath, body)); err == nil || !strings.Contains(err.Error(), "invisible character U+") {
				t.Errorf("%s: Parse(%s) = %v; want a refusal naming the invisible character", kind, body, err)
			}
		}
	}
	for kind, s := range railtest.ShownText {
		p, err := New().Parse(post(refundPath, `{"amount":100,"notes":{"ticket":`+q(s)+`}}`))
		if err != nil || p.Action.Labels["notes.ticket"].Value != s {
			t.Errorf("%s: Parse = %+v, %v; want the label kept", kind, p.Action.Labels, err)
		}
	}
}
