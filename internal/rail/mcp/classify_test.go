package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
)

func TestClassify(t *testing.T) {
	ok := result(toolkitRefund("re_1", 1500), false)
	elicit := `{"jsonrpc":"2.0","id":"srv-1","method":"elicitation/create","params":{"message":"confirm?"}}`
	for _, tc := range []struct {
		name      string
		action    rail.Action
		resp      rail.Response
		want      rail.Outcome
		wantID    string
		wantStamp string
		reason    string // a word the reason must carry
	}{
		// Applied: the created entity in the result.
		{name: "json/toolkit_entity", action: refundPI, resp: jsonResp(200, ok), want: rail.Applied, wantID: "re_1"},
		{name: "json/full_entity_checked_by_stripe_adapter", action: refundPI, resp: jsonResp(200, result(stripeRefund("re_3", "pi_1", 1500, stampA), false)),
			want: rail.Applied, wantID: "re_3", wantStamp: stampA, reason: "Stripe created refund"},
		{name: "json/structured_content", action: refundPI,
			resp: jsonResp(200, `{"jsonrpc":"2.0","id":1,"result":{"content":[],"structuredContent":{"id":"re_4","object":"refund","amount":1500,"metadata":{"countersign_sik":"`+stampA+`"}}}}`),
			want: rail.Applied, wantID: "re_4", wantStamp: stampA},
		{name: "json/text_and_structured_agree", action: refundPI,
			resp: jsonResp(200, `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"{\"id\":\"re_5\",\"amount\":1500}"}],"structuredContent":{"id":"re_5"}}}`),
			want: rail.Applied, wantID: "re_5"},
		{name: "json/no_content_type_sniffed", action: refundPI, resp: rail.Response{Status: 200, Body: []byte(ok)}, want: rail.Applied, wantID: "re_1"},
		{name: "sse/one_message", action: refundPI, resp: sseResp(event(ok)), want: rail.Applied, wantID: "re_1"},
		{name: "sse/crlf_lines", action: refundPI, resp: sseResp(strings.ReplaceAll(event(ok), "\n", "\r\n")), want: rail.Applied, wantID: "re_1"},
		{name: "sse/cr_lines", action: refundPI, resp: sseResp(strings.ReplaceAll(event(ok), "\n", "\r") + ": end\n"), want: rail.Applied, wantID: "re_1"},
		// A CR as the stream's last byte may be half a CRLF: the client's
		// parser (eventsource-parser) holds it unfinished, so the event it
		// would end never reaches the client; nor is it read here.
		{name: "sse/cr_at_the_end_unfinished", action: refundPI, resp: sseResp(strings.ReplaceAll(event(ok), "\n", "\r")), want: rail.Ambiguous},
		{name: "sse/no_event_field_no_space", action: refundPI, resp: sseResp("data:" + ok + "\n\n"), want: rail.Applied, wantID: "re_1"},
		{name: "sse/data_split_over_lines", action: refundPI,
			resp: sseResp("data: {\"jsonrpc\":\"2.0\",\"id\":1,\ndata: \"result\":{\"content\":[{\"type\":\"text\",\"text\":\"{\\\"id\\\":\\\"re_6\\\"}\"}]}}\n\n"),
			want: rail.Applied, wantID: "re_6"},
		{name: "sse/progress_and_elicitation_before_result", action: refundPI, resp: sseResp(event(progress) + event(elicit) + event(ok)), want: rail.Applied, wantID: "re_1"},
		{name: "sse/other_event_type_ignored", action: refundPI, resp: sseResp("event: endpoint\ndata: /messages?s=1\n\n" + event(ok)), want: rail.Applied, wantID: "re_1"},
		{name: "sse/comments_and_retry", action: refundPI, resp: sseResp(": hi\nretry: 1000\n\n" + event(ok)), want: rail.Applied, wantID: "re_1"},

		// Ambiguous: no proof either way.
		{name: "sse/cut_before_blank_line", action: refundPI, resp: sseResp(event(progress) + "event: message\ndata: " + ok + "\n"), want: rail.Ambiguous, reason: "never arrived"},
		{name: "sse/cut_mid_line", action: refundPI, resp: sseResp("data: " + ok[:40]), want: rail.Ambiguous},
		{name: "sse/only_progress", action: refundPI, resp: sseResp(event(progress)), want: rail.Ambiguous, reason: "never arrived"},
		{name: "sse/two_responses", action: refundPI, resp: sseResp(event(ok) + event(result(toolkitRefund("re_2", 1500), false))), want: rail.Ambiguous, reason: "more than one"},
		{name: "sse/garbage_event", action: refundPI, resp: sseResp(event("not json") + event(ok)), want: rail.Ambiguous},
		{name: "http_202_empty", action: refundPI, resp: rail.Response{Status: 202}, want: rail.Ambiguous, reason: "no body"},
		{name: "json/batch_answer", action: refundPI, resp: jsonResp(200, "["+ok+"]"), want: rail.Ambiguous, reason: "batch"},
		{name: "json/not_jsonrpc", action: refundPI, resp: jsonResp(200, `{"id":"re_1","object":"refund","amount":1500}`), want: rail.Ambiguous},
		{name: "json/result_and_error", action: refundPI, resp: jsonResp(200, `{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":1,"message":"x"}}`), want: rail.Ambiguous},
		{name: "result/task_handle", action: refundPI, resp: jsonResp(200, `{"jsonrpc":"2.0","id":1,"result":{"task":{"taskId":"t1","status":"working"}}}`), want: rail.Ambiguous, reason: "task"},
		{name: "result/not_object", action: refundPI, resp: jsonResp(200, `{"jsonrpc":"2.0","id":1,"result":"done"}`), want: rail.Ambiguous},
		{name: "result/empty_content", action: refundPI, resp: jsonResp(200, `{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`), want: rail.Ambiguous},
		{name: "result/prose_success", action: refundPI, resp: jsonResp(200, result("Refund created!", false)), want: rail.Ambiguous, reason: "without the created entity"},
		{name: "result/toolkit_failure_string", action: refundPI, resp: jsonResp(200, result(`"Failed to create refund"`, false)), want: rail.Ambiguous},
		{name: "result/entity_is_the_payment", action: refundPI, resp: jsonResp(200, result(`{"id":"pi_1","amount":1500}`, false)), want: rail.Ambiguous, reason: "subject"},
		{name: "result/wrong_object", action: refundPI, resp: jsonResp(200, result(`{"id":"po_1","object":"payout","amount":1500}`, false)), want: rail.Ambiguous},
		{name: "result/other_payment", action: refundPI, resp: jsonResp(200, result(stripeRefund("re_7", "pi_2", 1500, ""), false)), want: rail.Ambiguous},
		{name: "result/other_amount", action: refundPI, resp: jsonResp(200, result(toolkitRefund("re_8", 99), false)), want: rail.Ambiguous},
		{name: "result/amount_as_string", action: refundPI, resp: jsonResp(200, result(`{"id":"re_9","amount":"1500"}`, false)), want: rail.Ambiguous},
		{name: "result/id_not_an_id", action: refundPI, resp: jsonResp(200, result(`{"id":"re 1"}`, false)), want: rail.Ambiguous},
		{name: "result/two_entities", action: refundPI,
			resp: jsonResp(200, `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"{\"id\":\"re_1\"}"},{"type":"text","text":"{\"id\":\"re_2\"}"}]}}`),
			want: rail.Ambiguous, reason: "two entities"},
		{name: "is_error/toolkit_text", action: refundPI, resp: jsonResp(200, result("Failed to create refund", true)), want: rail.Ambiguous, reason: "not a refusal Countersign can prove"},
		{name: "is_error/empty", action: refundPI, resp: jsonResp(200, result("", true)), want: rail.Ambiguous},
		{name: "is_error/api_error_beats_refusal_words", action: refundPI,
			resp: jsonResp(200, result("StripeAPIError after invalid_request_error retry", true)), want: rail.Ambiguous},
		{name: "is_error/timeout", action: refundPI, resp: jsonResp(200, result("StripeInvalidRequestError? no: request timed out", true)), want: rail.Ambiguous},
		{name: "rpc/internal_error", action: refundPI, resp: jsonResp(200, rpcError(-32603, "Internal error", nil)), want: rail.Ambiguous},
		{name: "rpc/output_schema_after_run", action: refundPI,
			resp: jsonResp(200, rpcError(-32602, "MCP error -32602: Invalid structured content for tool create_refund: output validation failed", nil)), want: rail.Ambiguous},
		{name: "rpc/invalid_params_unexplained", action: refundPI, resp: jsonResp(200, rpcError(-32602, "Invalid params", nil)), want: rail.Ambiguous},
		{name: "rpc/unreadable_error", action: refundPI, resp: jsonResp(200, `{"jsonrpc":"2.0","id":1,"error":"boom"}`), want: rail.Ambiguous},
		{name: "http_500", action: refundPI, resp: jsonResp(500, rpcError(-32603, "boom", nil)), want: rail.Ambiguous},
		{name: "http_502_html", action: refundPI, resp: rail.Response{Status: 502, Body: []byte("<html>")}, want: rail.Ambiguous},
		{name: "http_408_proxy", action: refundPI, resp: rail.Response{Status: 408}, want: rail.Ambiguous},
		{name: "http_409", action: refundPI, resp: rail.Response{Status: 409}, want: rail.Ambiguous},
		{name: "http_307", action: refundPI, resp: rail.Response{Status: 307}, want: rail.Ambiguous},
		{name: "transport_reset", action: refundPI, resp: rail.Response{TransportErr: errors.New("connection reset by peer")}, want: rail.Ambiguous},
		{name: "transport_deadline", action: refundPI, resp: rail.Response{Status: 200, Body: []byte(ok), TransportErr: context.DeadlineExceeded}, want: rail.Ambiguous},

		// Rejected: the tool never ran, or the rail said no.
		{name: "rpc/method_not_found", action: refundPI, resp: jsonResp(200, rpcError(-32601, "Method not found", nil)), want: rail.Rejected},
		{name: "rpc/parse_error", action: refundPI, resp: jsonResp(200, rpcError(-32700, "Parse error", nil)), want: rail.Rejected},
		{name: "rpc/invalid_arguments", action: refundPI,
			resp: jsonResp(200, rpcError(-32602, "MCP error -32602: Invalid arguments for tool create_refund: amount: Expected number", nil)), want: rail.Rejected},
		{name: "rpc/error_in_sse", action: refundPI, resp: sseResp(event(rpcError(-32601, "Method not found", nil))), want: rail.Rejected},
		{name: "is_error/stripe_card_error", action: refundPI, resp: jsonResp(200, result("StripeCardError: Your card was declined.", true)), want: rail.Rejected},
		{name: "is_error/stripe_rate_limit", action: refundPI, resp: jsonResp(200, result("StripeRateLimitError: Too many requests", true)), want: rail.Rejected},
		{name: "http_400_no_session", action: refundPI, resp: jsonResp(400, transportRefusal(-32000, "Bad Request: No valid session ID provided")), want: rail.Rejected},
		{name: "http_406_accept", action: refundPI,
			resp: jsonResp(406, `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Not Acceptable: Client must accept both application/json and text/event-stream"},"id":null}`), want: rail.Rejected},
		{name: "http_429_python_sdk_id", action: refundPI,
			resp: jsonResp(429, `{"jsonrpc":"2.0","id":"server-error","error":{"code":-32000,"message":"Too many requests"}}`), want: rail.Rejected},
		// A 4xx without the SDK's JSON-RPC refusal may be a proxy's,
		// answered after the tool ran.
		{name: "http_401_no_body", action: refundPI, resp: rail.Response{Status: 401}, want: rail.Ambiguous, reason: "does not prove"},
		{name: "http_406_no_body", action: refundPI, resp: rail.Response{Status: 406}, want: rail.Ambiguous},
		{name: "http_429_no_body", action: refundPI, resp: rail.Response{Status: 429}, want: rail.Ambiguous},

		// The rail's idempotency vocabulary, relayed by a server that
		// forwards the key.
		{name: "is_error/key_in_use_in_sse", action: refundPI,
			resp: sseResp(event(result(stripeErrText("invalid_request_error", "idempotency_key_in_use", "in use"), true))), want: rail.InProgress},
		{name: "rpc/idempotency_error_in_data", action: refundPI,
			resp: jsonResp(200, rpcError(-32000, "Stripe error", map[string]string{"type": "idempotency_error"})), want: rail.FingerprintMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mustNew(t, StripeDefaults())().Classify(tc.action, tc.resp)
			if got.Outcome != tc.want {
				t.Fatalf("Outcome = %v (%s), want %v", got.Outcome, got.Reason, tc.want)
			}
			if got.EntityID != tc.wantID || got.Stamp != tc.wantStamp {
				t.Errorf("entity %q stamp %q, want %q %q", got.EntityID, got.Stamp, tc.wantID, tc.wantStamp)
			}
			if got.Reason == "" || !strings.Contains(got.Reason, tc.reason) {
				t.Errorf("Reason %q does not say %q", got.Reason, tc.reason)
			}
			if got.Outcome != rail.Applied && got.FeeMinor != 0 {
				t.Errorf("%v carries fee %d", got.Outcome, got.FeeMinor)
			}
		})
	}
}

// A body-stamped request whose answer shows no stamp is not proven this
// request's entity: the engine's CheckStamp makes it Ambiguous.
func TestClassifyThenCheckStamp(t *testing.T) {
	ad := mustNew(t, RazorpayDefaults())()
	c := ad.Classify(rzpRefund, jsonResp(200, result(rzpEntity("rfnd_1", 29500, ""), false))).CheckStamp(stampA)
	if c.Outcome != rail.Ambiguous {
		t.Fatalf("unstamped entity after a stamped request = %v, want Ambiguous", c.Outcome)
	}
	c = ad.Classify(rzpRefund, jsonResp(200, result(rzpEntity("rfnd_1", 29500, stampA), false))).CheckStamp(stampA)
	if c.Outcome != rail.Applied || c.EntityID != "rfnd_1" {
		t.Fatalf("stamped entity = %+v, want Applied rfnd_1", c)
	}
}

func TestReplayFor(t *testing.T) {
	stored := result(toolkitRefund("re_1", 1500), false)
	for _, tc := range []struct {
		name   string
		id     string
		stored rail.Response
		want   string
	}{
		{"json", `"req-2"`, jsonResp(200, stored), strings.Replace(stored, `"id":1`, `"id":"req-2"`, 1)},
		{"sse", `8`, sseResp(event(progress) + event(stored)), strings.Replace(stored, `"id":1`, `"id":8`, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReplayFor(json.RawMessage(tc.id), tc.stored)
			if err != nil {
				t.Fatal(err)
			}
			var g, w any
			_ = json.Unmarshal(got, &g)
			_ = json.Unmarshal([]byte(tc.want), &w)
			if !reflect.DeepEqual(g, w) {
				t.Fatalf("ReplayFor = %s\nwant %s", got, tc.want)
			}
		})
	}
	if _, err := ReplayFor(json.RawMessage("null"), jsonResp(200, stored)); err == nil {
		t.Error("null id accepted")
	}
	if _, err := ReplayFor(json.RawMessage("1"), sseResp(event(progress))); err == nil {
		t.Error("a stream without a response replayed")
	}
}
