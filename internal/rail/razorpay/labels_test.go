package razorpay

import (
	"reflect"
	"testing"

	"github.com/countersign/countersign/internal/rail"
)

// Every label member is reported, notes by key; all are free text; the
// stamp is not a label.
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
