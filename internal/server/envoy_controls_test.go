package server

import (
	"context"
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
)

// TestEnvoyControlHeadersAreRefused drives Envoy's Check with a refund that
// also asks Envoy's router to send it again, hedge it or cut it short: each
// is blocked, and the refusal names the header. The same refund without
// the header is then allowed, so the header alone was the reason.
func TestEnvoyControlHeadersAreRefused(t *testing.T) {
	h := bareRailHarness(t)
	applyMandateTo(t, h, mandateFor(h))
	check := func(extra map[string]string) *authv3.CheckResponse {
		t.Helper()
		headers := map[string]string{"authorization": "Bearer " + h.secret, "content-type": "application/x-www-form-urlencoded",
			// Envoy's own flag, in every check with a body.
			"x-envoy-auth-partial-body": "false"}
		for k, v := range extra {
			headers[k] = v
		}
		resp, err := h.client.Check(context.Background(), &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			ContextExtensions: map[string]string{"rail_account": "acct_bench"},
			Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
				Id: "r", Method: "POST", Host: "stripe.local", Path: "/v1/refunds", Headers: headers,
				Body: "payment_intent=pi_bench&amount=100"}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, header := range []string{"x-envoy-retry-on", "x-envoy-hedge-on-per-try-timeout", "x-envoy-upstream-stream-duration-ms"} {
		t.Run(header, func(t *testing.T) {
			value := map[string]string{"x-envoy-retry-on": "5xx", "x-envoy-hedge-on-per-try-timeout": "true", "x-envoy-upstream-stream-duration-ms": "1"}[header]
			resp := check(map[string]string{header: value})
			if resp.GetStatus().GetCode() != int32(codes.PermissionDenied) || resp.GetDeniedResponse() == nil {
				t.Fatalf("%s: %s: status %v, want a denial", header, value, resp.GetStatus())
			}
			reason := ""
			for _, hv := range resp.GetDeniedResponse().GetHeaders() {
				if hv.GetHeader().GetKey() == "x-countersign-reason" {
					reason = hv.GetHeader().GetValue()
				}
			}
			if reason != "action_unknown" {
				t.Errorf("reason code %q, want action_unknown", reason)
			}
			for what, s := range map[string]string{"status message": resp.GetStatus().GetMessage(), "body": resp.GetDeniedResponse().GetBody()} {
				if !strings.Contains(s, "header "+header) || !strings.Contains(s, "Envoy's controls of the rail call") {
					t.Errorf("%s %q does not name the header %s and why", what, s, header)
				}
			}
		})
	}
	resp := check(nil)
	if resp.GetStatus().GetCode() != int32(codes.OK) || resp.GetOkResponse() == nil {
		t.Fatalf("the same refund without Envoy's controls: %v, want an ALLOW", resp.GetStatus())
	}
	stamped := false
	for _, hv := range resp.GetOkResponse().GetHeaders() {
		stamped = stamped || (strings.EqualFold(hv.GetHeader().GetKey(), "idempotency-key") && hv.GetHeader().GetValue() != "")
	}
	if !stamped {
		t.Errorf("the ALLOW sets no Idempotency-Key: %v", resp.GetOkResponse().GetHeaders())
	}
}
