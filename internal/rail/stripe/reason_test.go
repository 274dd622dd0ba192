package stripe

import (
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
)

// TestReasonRendersRailTextInert: Stripe's error message may echo the
// agent's request (a metadata key, a description). The classification's
// reason becomes the intent's and leaves in the signed intent.failed and
// intent.quarantined webhooks, so none of its markup survives; the words
// do, percent-encoded where needed.
func TestReasonRendersRailTextInert(t *testing.T) {
	const evil = "Invalid metadata key <https://x.example/a|APPROVE> <img src=x onerror=alert(1)>\n`x`"
	for _, tc := range []struct {
		name string
		resp rail.Response
	}{
		{"rejected_message", rail.Response{Status: 400, Body: []byte(stripeErr("invalid_request_error", "", evil))}},
		{"idempotency_message", rail.Response{Status: 400, Body: []byte(stripeErr("idempotency_error", "", evil))}},
		{"5xx_message", rail.Response{Status: 500, Body: []byte(stripeErr("api_error", "", evil))}},
		{"unexpected_status_page", rail.Response{Status: 418, Body: []byte("<html>" + evil + "</html>")}},
		{"unreadable_refusal", rail.Response{Status: 400, Body: []byte(`{"error":{"type":"x","<img src=x>":1,"<IMG SRC=X>":2}}`)}},
		{"created_status", rail.Response{Status: 200, Body: []byte(`{"id":"re_1","object":"refund","amount":1500,"currency":"usd","payment_intent":"pi_1","status":"<https://x.example|APPROVE>"}`)}},
		{"created_wrong_object", rail.Response{Status: 200, Body: []byte(`{"id":"re_1","object":"<img src=x>","amount":1500}`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := New().Classify(refundPI, tc.resp)
			if strings.ContainsAny(got.Reason, "<>|`\n") {
				t.Fatalf("reason %q carries the rail's markup", got.Reason)
			}
			if !strings.Contains(got.Reason, "Stripe") || got.Reason == "" {
				t.Fatalf("reason %q does not say who answered", got.Reason)
			}
		})
	}
	got := New().Classify(refundPI, rail.Response{Status: 400, Body: []byte(stripeErr("invalid_request_error", "", evil))})
	if want := "Invalid metadata key %3Chttps://x.example/a%7CAPPROVE%3E"; got.Outcome != rail.Rejected || !strings.Contains(got.Reason, want) {
		t.Fatalf("Classify = %v (%q); want rejected naming %q", got.Outcome, got.Reason, want)
	}
}
