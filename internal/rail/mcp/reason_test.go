package mcp

import (
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
)

// TestReasonRendersServerTextInert: a tool's or server's error text may
// echo the agent's arguments. The reason becomes the intent's and leaves
// in the signed intent.failed and intent.quarantined webhooks, so none of
// its markup survives, whatever path reads it.
func TestReasonRendersServerTextInert(t *testing.T) {
	const evil = "Invalid metadata key <https://x.example/a|APPROVE> <img src=x onerror=alert(1)>\n`x`"
	for _, tc := range []struct {
		name string
		resp rail.Response
	}{
		{"tool_is_error", jsonResp(200, result("StripeInvalidRequestError: "+evil, true))},
		{"jsonrpc_error_200", jsonResp(200, rpcError(-32603, evil, nil))},
		{"transport_refusal", jsonResp(400, transportRefusal(-32000, "Bad Request: "+evil))},
		{"error_after_dispatch_4xx", jsonResp(403, rpcError(-32000, evil, nil))},
		{"refusal_extra_member", jsonResp(400, `{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"x"},"<img src=x>":1}`)},
		{"5xx_page", jsonResp(502, "<html>"+evil+"</html>")},
		{"encoded", rail.Response{Status: 200, Headers: map[string]string{"content-encoding": "<img src=x>"}, Body: []byte("x")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mustNew(t, StripeDefaults())().Classify(refundPI, tc.resp)
			if strings.ContainsAny(got.Reason, "<>|`\n") {
				t.Fatalf("reason %q carries the server's markup", got.Reason)
			}
			if !strings.Contains(got.Reason, "MCP") && !strings.Contains(got.Reason, "tool") {
				t.Fatalf("reason %q does not say who answered", got.Reason)
			}
		})
	}
	got := mustNew(t, StripeDefaults())().Classify(refundPI, jsonResp(200, result("StripeInvalidRequestError: "+evil, true)))
	if want := "Invalid metadata key %3Chttps://x.example/a%7CAPPROVE%3E"; got.Outcome != rail.Rejected || !strings.Contains(got.Reason, want) {
		t.Fatalf("Classify = %v (%q); want rejected naming %q", got.Outcome, got.Reason, want)
	}
}

// TestRefusalOnlyBeforeDispatch: a 4xx is Rejected on the body alone only
// when it is what the SDKs' HTTP transports write before a message reaches
// a handler (id null or "server-error", a transport code). The same error
// after dispatch, relayed with a 4xx by a gateway, reads no more definitely
// than in a 200: a Rejected there reopens the payment under a new key.
func TestRefusalOnlyBeforeDispatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want rail.Outcome
	}{
		{"ts_session_not_found", transportRefusal(-32001, "Session not found"), rail.Rejected},
		{"ts_parse_error", transportRefusal(-32700, "Parse error: Invalid JSON"), rail.Rejected},
		{"python_invalid_request_old_id", `{"jsonrpc":"2.0","id":"server-error","error":{"code":-32600,"message":"Bad Request: Missing session ID"}}`, rail.Rejected},
		{"python_validation_input_side", transportRefusal(-32602, "Invalid arguments: unknown tool create_refund"), rail.Rejected},
		{"null_id_internal_error", transportRefusal(-32603, "Internal error: Failed to create refund"), rail.Ambiguous},
		{"null_id_output_validation", transportRefusal(-32602, "Output validation error: no structured content"), rail.Ambiguous},
		{"null_id_relayed_timeout", transportRefusal(-32000, "upstream request timed out"), rail.Ambiguous},
		{"call_id_transport_code", rpcError(-32000, "Failed to create refund", nil), rail.Ambiguous},
		{"call_id_session", rpcError(-32001, "Session not found", nil), rail.Ambiguous},
		{"call_id_internal_error", rpcError(-32603, "Internal error: Failed to create refund", nil), rail.Ambiguous},
		{"call_id_output_validation", rpcError(-32602, "MCP error -32602: Output validation error: Tool create_refund has an output schema but no structured content was provided", nil), rail.Ambiguous},
		{"string_call_id", `{"jsonrpc":"2.0","id":"1","error":{"code":-32001,"message":"Request cancelled by upstream gateway"}}`, rail.Ambiguous},
		{"other_string_id", `{"jsonrpc":"2.0","id":"server-error ","error":{"code":-32600,"message":"x"}}`, rail.Ambiguous},
		{"call_id_rail_refusal", rpcError(-32000, "StripeCardError: Your card was declined.", nil), rail.Rejected},
		{"call_id_key_in_use", rpcError(-32000, "idempotency_key_in_use", nil), rail.InProgress},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ad := mustNew(t, StripeDefaults())()
			in200 := ad.Classify(refundPI, jsonResp(200, tc.body))
			for _, status := range []int{400, 401, 403, 404, 429} {
				got := ad.Classify(refundPI, jsonResp(status, tc.body))
				if got.Outcome != tc.want {
					t.Fatalf("%d %s = %v (%s), want %v", status, tc.body, got.Outcome, got.Reason, tc.want)
				}
				if !transportID([]byte(tc.body)) && got.Outcome == rail.Rejected && in200.Outcome != rail.Rejected {
					t.Fatalf("%d %s = rejected, but %v in a 200", status, tc.body, in200.Outcome)
				}
			}
		})
	}
}
