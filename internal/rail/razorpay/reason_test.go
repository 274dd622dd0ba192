package razorpay

import (
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
)

// TestReasonRendersRailTextInert: Razorpay's error description may echo
// the agent's request (a note, a narration). The classification's reason
// becomes the intent's and leaves in the signed intent.failed and
// intent.quarantined webhooks, so none of its markup survives; the words
// do, percent-encoded where needed.
func TestReasonRendersRailTextInert(t *testing.T) {
	const evil = "Invalid note <https://x.example/a|APPROVE> <img src=x onerror=alert(1)>\n`x`"
	for _, tc := range []struct {
		name string
		resp rail.Response
	}{
		{"rejected_description", rail.Response{Status: 400, Body: []byte(rzpErr("BAD_REQUEST_ERROR", evil))}},
		{"gateway_description", rail.Response{Status: 400, Body: []byte(rzpErr("GATEWAY_ERROR", evil))}},
		{"5xx_description", rail.Response{Status: 502, Body: []byte(rzpErr("SERVER_ERROR", evil))}},
		{"unexpected_status_page", rail.Response{Status: 418, Body: []byte("<html>" + evil + "</html>")}},
		{"unreadable_refusal", rail.Response{Status: 400, Body: []byte(`{"error":{"code":"x","<img src=x>":1,"<IMG SRC=X>":2}}`)}},
		{"created_status", rail.Response{Status: 200, Body: []byte(`{"id":"rfnd_1","entity":"refund","amount":500100,"currency":"INR","payment_id":"pay_1","status":"<https://x.example|APPROVE>"}`)}},
		{"created_wrong_entity", rail.Response{Status: 200, Body: []byte(`{"id":"rfnd_1","entity":"<img src=x>","amount":500100}`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := New().Classify(refund, tc.resp)
			if strings.ContainsAny(got.Reason, "<>|`\n") {
				t.Fatalf("reason %q carries the rail's markup", got.Reason)
			}
			if !strings.Contains(got.Reason, "Razorpay") {
				t.Fatalf("reason %q does not say who answered", got.Reason)
			}
		})
	}
	got := New().Classify(refund, rail.Response{Status: 400, Body: []byte(rzpErr("BAD_REQUEST_ERROR", evil))})
	if want := "Invalid note %3Chttps://x.example/a%7CAPPROVE%3E"; got.Outcome != rail.Rejected || !strings.Contains(got.Reason, want) {
		t.Fatalf("Classify = %v (%q); want rejected naming %q", got.Outcome, got.Reason, want)
	}
}
