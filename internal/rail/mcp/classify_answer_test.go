package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
)

// TestClassifyEncodedAnswerIsAmbiguous: an answer in a content coding is
// bytes Countersign cannot read; not a refusal it can vouch for (whatever
// the status), nor a result. In identity, a 200 carrying the tool's result
// is read, and so is a 4xx carrying the SDK's JSON-RPC refusal.
func TestClassifyEncodedAnswerIsAmbiguous(t *testing.T) {
	ok := result(toolkitRefund("re_1", 1500), false)
	refused := transportRefusal(-32000, "Bad Request: No valid session ID provided")
	for _, status := range []int{200, 400, 401, 404, 429} {
		body, want := ok, rail.Applied
		if status != 200 {
			body, want = refused, rail.Rejected
		}
		for coding, encoded := range map[string]bool{"": false, "identity": false, "gzip": true, "br": true} {
			r := jsonResp(status, body)
			if coding != "" {
				r.Headers["Content-Encoding"] = coding
			}
			got := mustNew(t, StripeDefaults())().Classify(refundPI, r)
			if encoded && got.Outcome != rail.Ambiguous {
				t.Errorf("%d in %q = %v (%q), want ambiguous", status, coding, got.Outcome, got.Reason)
			}
			if !encoded && got.Outcome != want {
				t.Errorf("%d in %q = %v (%q), want %v", status, coding, got.Outcome, got.Reason, want)
			}
		}
	}
}

// TestClassifyRefusalReadFromBody: a 4xx is a refusal before the tool ran
// only when its body, read strictly, is the JSON-RPC error an MCP SDK
// writes. A proxy or WAF may answer 4xx after the tool ran, with its own
// page, nothing, or the server's result; Rejected there would reopen the
// identical request under a new idempotency key at the rail.
func TestClassifyRefusalReadFromBody(t *testing.T) {
	applied := result(toolkitRefund("re_1", 1500), false)
	for _, tc := range []struct {
		name string
		body string
		want rail.Outcome
	}{
		// The SDKs' refusals (TypeScript: id null; Python: "server-error").
		{"ts_sdk_no_session", `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}`, rail.Rejected},
		{"python_sdk_session", `{"jsonrpc":"2.0","id":"server-error","error":{"code":-32600,"message":"Session not found"}}`, rail.Rejected},
		{"null_id_with_data", `{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Unauthorized","data":{"hint":"token"}}}`, rail.Rejected},
		{"surrounding_space", " \n" + transportRefusal(-32000, "Too many requests") + "\n", rail.Rejected},
		{"python_sdk_parse_error", `{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error: Expecting value"}}`, rail.Rejected},
		{"invalid_params_input_side", `{"jsonrpc":"2.0","id":null,"error":{"code":-32602,"message":"Invalid arguments for tool create_refund"}}`, rail.Rejected},
		// The rail's vocabulary, relayed, means what it says.
		{"relayed_key_in_use", rpcError(-32000, "StripeIdempotencyError: idempotency_key_in_use", nil), rail.InProgress},
		{"relayed_idempotency_error", rpcError(-32000, "x", map[string]string{"type": "idempotency_error"}), rail.FingerprintMismatch},
		{"relayed_api_error", rpcError(-32000, "StripeAPIError: something went wrong", nil), rail.Ambiguous},
		{"relayed_timeout", rpcError(-32000, "upstream request timed out", nil), rail.Ambiguous},

		// A JSON-RPC error the transports never write before dispatch:
		// under the call's own id, or with a code or wording of an error
		// after the tool ran. It reads as its text says, as in a 200.
		{"integer_id_with_data", `{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"Unauthorized","data":{"hint":"token"}}}`, rail.Ambiguous},
		{"call_id_session", rpcError(-32000, "Bad Request: No valid session ID provided", nil), rail.Ambiguous},
		{"string_id_not_server_error", `{"jsonrpc":"2.0","id":"1","error":{"code":-32001,"message":"Request cancelled by upstream gateway"}}`, rail.Ambiguous},
		{"null_id_internal_error", `{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"Internal error: Failed to create refund"}}`, rail.Ambiguous},
		{"null_id_method_not_found", `{"jsonrpc":"2.0","id":null,"error":{"code":-32601,"message":"Method not found"}}`, rail.Ambiguous},
		{"null_id_application_code", `{"jsonrpc":"2.0","id":null,"error":{"code":1,"message":"Failed to create refund"}}`, rail.Ambiguous},
		{"null_id_output_validation", `{"jsonrpc":"2.0","id":null,"error":{"code":-32602,"message":"MCP error -32602: Output validation error: Tool create_refund has an output schema but no structured content was provided"}}`, rail.Ambiguous},
		{"null_id_invalid_params_unworded", `{"jsonrpc":"2.0","id":null,"error":{"code":-32602,"message":"Validation error"}}`, rail.Ambiguous},
		{"call_id_rail_refusal", rpcError(-32000, "StripeCardError: Your card was declined.", nil), rail.Rejected},

		// Not the SDK's refusal: no proof the tool never ran.
		{"tool_result_created_refund", applied, rail.Ambiguous},
		{"tool_result_is_error", result("StripeCardError: declined", true), rail.Ambiguous},
		{"result_and_error", `{"jsonrpc":"2.0","id":1,"result":{},"error":{"code":-32000,"message":"x"}}`, rail.Ambiguous},
		{"proxy_html", "<html><body>Request blocked by WAF</body></html>", rail.Ambiguous},
		{"empty", "", rail.Ambiguous},
		{"only_space", " \r\n", rail.Ambiguous},
		{"plain_text", "Too many requests, please try again later.", rail.Ambiguous},
		{"oauth_error", `{"error":"invalid_token","error_description":"expired"}`, rail.Ambiguous},
		{"not_jsonrpc_2", `{"jsonrpc":"1.0","id":1,"error":{"code":-32000,"message":"x"}}`, rail.Ambiguous},
		{"no_jsonrpc", `{"id":1,"error":{"code":-32000,"message":"x"}}`, rail.Ambiguous},
		{"no_id", `{"jsonrpc":"2.0","error":{"code":-32000,"message":"x"}}`, rail.Ambiguous},
		{"id_object", `{"jsonrpc":"2.0","id":{},"error":{"code":-32000,"message":"x"}}`, rail.Ambiguous},
		{"id_fraction", `{"jsonrpc":"2.0","id":1.5,"error":{"code":-32000,"message":"x"}}`, rail.Ambiguous},
		{"code_string", `{"jsonrpc":"2.0","id":1,"error":{"code":"-32000","message":"x"}}`, rail.Ambiguous},
		{"code_fraction", `{"jsonrpc":"2.0","id":1,"error":{"code":-32000.0,"message":"x"}}`, rail.Ambiguous},
		{"code_exponent", `{"jsonrpc":"2.0","id":1,"error":{"code":-3.2e4,"message":"x"}}`, rail.Ambiguous},
		{"code_missing", `{"jsonrpc":"2.0","id":1,"error":{"message":"x"}}`, rail.Ambiguous},
		{"message_missing", `{"jsonrpc":"2.0","id":1,"error":{"code":-32000}}`, rail.Ambiguous},
		{"message_number", `{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":5}}`, rail.Ambiguous},
		{"error_string", `{"jsonrpc":"2.0","id":1,"error":"boom"}`, rail.Ambiguous},
		{"error_extra_member", `{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x","result":{}}}`, rail.Ambiguous},
		{"extra_top_member", `{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x"},"content":[]}`, rail.Ambiguous},
		{"error_twice", `{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x"},"error":{"code":-32000,"message":"y"}}`, rail.Ambiguous},
		{"error_case_variant", `{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x"},"ERROR":{"code":1,"message":"y"}}`, rail.Ambiguous},
		{"result_case_variant", `{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x"},"Result":{}}`, rail.Ambiguous},
		{"code_case_variant", `{"jsonrpc":"2.0","id":1,"error":{"Code":-32000,"message":"x"}}`, rail.Ambiguous},
		{"two_messages", rpcError(-32000, "x", nil) + rpcError(-32000, "y", nil), rail.Ambiguous},
		{"batch", "[" + rpcError(-32000, "x", nil) + "]", rail.Ambiguous},
		{"sse_event", event(rpcError(-32000, "x", nil)), rail.Ambiguous},
		{"not_utf8", `{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"\xff"}}`, rail.Ambiguous},
		{"lone_surrogate", `{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"\ud800"}}`, rail.Ambiguous},
		{"truncated", rpcError(-32000, "x", nil)[:30], rail.Ambiguous},
	} {
		for _, status := range []int{400, 401, 403, 404, 405, 406, 413, 415, 429} {
			t.Run(fmt.Sprintf("%s/%d", tc.name, status), func(t *testing.T) {
				r := jsonResp(status, tc.body)
				if tc.name == "not_utf8" {
					r.Body = []byte(strings.Replace(tc.body, `\xff`, "\xff", 1))
				}
				got := mustNew(t, StripeDefaults())().Classify(refundPI, r)
				if got.Outcome != tc.want {
					t.Fatalf("Classify(%d %q) = %v (%q), want %v", status, r.Body, got.Outcome, got.Reason, tc.want)
				}
				if got.CallID != "" {
					t.Errorf("an HTTP refusal carries CallID %q; it is the exchange's own", got.CallID)
				}
				if got.Outcome == rail.Ambiguous && !strings.Contains(got.Reason, fmt.Sprint(status)) {
					t.Errorf("reason %q does not name the status", got.Reason)
				}
			})
		}
	}
}

// TestClassifyRefusesMembersReadTwoWays: a member named twice, or in two
// cases, is read one way here and another by the agent's client.
func TestClassifyRefusesMembersReadTwoWays(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
		want rail.Outcome
	}{
		{"as_sent", result(toolkitRefund("re_1", 1500), false), rail.Applied},
		{"entity_amount_twice", result(`{"id":"re_1","amount":99,"amount":1500}`, false), rail.Ambiguous},
		{"entity_amount_case_variant", result(`{"id":"re_1","amount":1500,"AMOUNT":99}`, false), rail.Ambiguous},
		{"entity_amount_in_other_case", result(`{"id":"re_1","Amount":99}`, false), rail.Ambiguous},
		{"entity_id_in_other_case", result(`{"ID":"re_1","id":"re_2","amount":1500}`, false), rail.Ambiguous},
		{"is_error_case_variant", strings.Replace(result(toolkitRefund("re_1", 1500), false), `"result":{"content"`, `"result":{"isError":true,"ISERROR":false,"content"`, 1), rail.Ambiguous},
		{"result_twice", `{"jsonrpc":"2.0","id":1,"result":{"content":[]},"result":{"content":[{"type":"text","text":"{\"id\":\"re_1\",\"amount\":1500}"}]}}`, rail.Ambiguous},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mustNew(t, StripeDefaults())().Classify(refundPI, jsonResp(200, tc.body))
			if got.Outcome != tc.want {
				t.Fatalf("Classify(%s) = %v (%q), want %v", tc.body, got.Outcome, got.Reason, tc.want)
			}
		})
	}
}

// FuzzClassifyAnswer: Classify never panics; a 4xx is never Applied, and
// Rejected only when its body is the SDK's JSON-RPC refusal (sdkRefusal,
// written again with generic decoding), and, unless under the transports'
// ids (null, "server-error"), only when the same body in a 200 is; an
// encoded answer is Ambiguous; a JSON body the strict reader refuses is
// neither Rejected nor Applied at any status; no reason carries < > | `
// or a line break, whatever the server wrote.
func FuzzClassifyAnswer(f *testing.F) {
	ok := result(toolkitRefund("re_1", 1500), false)
	for _, status := range []int{200, 400, 404, 429} {
		for _, body := range []string{
			ok, rpcError(-32000, "Bad Request: No valid session ID provided", nil),
			`{"jsonrpc":"2.0","error":{"code":-32000,"message":"x"},"id":null}`,
			`{"jsonrpc":"2.0","id":"server-error","error":{"code":-32600,"message":"Session not found"}}`,
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x"},"result":{}}`,
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x"},"ERROR":{}}`,
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32000.0,"message":"x"}}`,
			`{"jsonrpc":"2.0","id":1,"error":{"code":"1","message":"x"}}`,
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"Internal error: Failed to create refund"}}`,
			`{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"Output validation error: no structured content"}}`,
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32602,"message":"Invalid arguments for tool create_refund"}}`,
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Bad Request: <https://x.example|APPROVE> <img src=x>"}}`,
			rpcError(-32000, "x", map[string]string{"type": "idempotency_error"}),
			"<html>blocked</html>", "", event(ok),
		} {
			f.Add(status, "application/json", false, []byte(body))
		}
	}
	f.Add(400, "application/json", true, []byte(rpcError(-32000, "x", nil)))
	f.Add(200, "text/event-stream", false, []byte(event(progress)+event(ok)))
	adapters := []rail.Adapter{mustNew(f, StripeDefaults())(), mustNew(f, stripeWithMetadata())(), mustNew(f, RazorpayDefaults())()}
	f.Fuzz(func(t *testing.T, status int, contentType string, encoded bool, body []byte) {
		resp := rail.Response{Status: status, Headers: map[string]string{"content-type": contentType}, Body: body}
		if encoded {
			resp.Headers["content-encoding"] = "gzip"
		}
		for _, ad := range adapters {
			c := ad.Classify(refundPI, resp)
			definite := c.Outcome == rail.Rejected || c.Outcome == rail.Applied
			switch {
			case encoded && c.Outcome != rail.Ambiguous:
				t.Fatalf("encoded %d %q = %v (%s)", status, body, c.Outcome, c.Reason)
			case status >= 400 && status <= 499 && c.Outcome == rail.Applied:
				t.Fatalf("%d %q = applied (%s)", status, body, c.Reason)
			case status >= 400 && status <= 499 && c.Outcome == rail.Rejected && !sdkRefusal(body):
				t.Fatalf("%d %q = rejected (%s), but the body is not a JSON-RPC refusal", status, body, c.Reason)
			case definite && bytes.HasPrefix(rail.TrimJSONSpace(body), []byte("{")) && rail.CheckAnswerJSON(body) != nil &&
				!strings.Contains(contentType, "event-stream"):
				t.Fatalf("%d %q = %v (%s), though the strict reader refuses it", status, body, c.Outcome, c.Reason)
			case strings.ContainsAny(c.Reason, "<>|`\n\r"):
				t.Fatalf("%d %q: reason %q carries the server's markup", status, body, c.Reason)
			}
			// An error not under the transports' own ids is one after
			// dispatch, relayed: never more definite in a 4xx than in a 200.
			if !encoded && status >= 400 && status <= 499 && c.Outcome == rail.Rejected && !transportID(body) && contentType == "application/json" {
				if ok := ad.Classify(refundPI, rail.Response{Status: 200, Headers: resp.Headers, Body: body}); ok.Outcome != rail.Rejected {
					t.Fatalf("%d %q = rejected (%s), but in a 200 %v (%s)", status, body, c.Reason, ok.Outcome, ok.Reason)
				}
			}
		}
	})
}

// transportID says whether body is a JSON object whose id is null or
// "server-error", the ids the SDKs' transports refuse under.
func transportID(body []byte) bool {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil {
		return false
	}
	id, ok := m["id"]
	return ok && (id == nil || id == "server-error")
}

var jsonInteger = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// sdkRefusal says whether body is one JSON-RPC 2.0 error response: read
// strictly, members jsonrpc "2.0", id (null, string or integer) and
// error only; the error's code an integer, message a string, data any.
func sdkRefusal(body []byte) bool {
	if rail.CheckAnswerJSON(body) != nil {
		return false
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var msg map[string]any
	if d.Decode(&msg) != nil {
		return false
	}
	integer := func(v any) bool {
		n, ok := v.(json.Number)
		return ok && jsonInteger.MatchString(string(n))
	}
	e, _ := msg["error"].(map[string]any)
	_, hasID := msg["id"]
	_, idString := msg["id"].(string)
	_, message := e["message"].(string)
	for k := range msg {
		if k != "jsonrpc" && k != "id" && k != "error" {
			return false
		}
	}
	for k := range e {
		if k != "code" && k != "message" && k != "data" {
			return false
		}
	}
	return msg["jsonrpc"] == "2.0" && hasID && (msg["id"] == nil || idString || integer(msg["id"])) &&
		e != nil && integer(e["code"]) && message
}

// TestParseRefusesStampKeyVariantInMetadata: checkJSON refuses metadata
// keys equal up to case; a case variant of the stamp key is refused too,
// as the server would echo it beside the stamp ext_proc writes and the
// strict answer reader would refuse the applied answer.
func TestParseRefusesStampKeyVariantInMetadata(t *testing.T) {
	for _, tc := range []struct {
		name, metadata, refused string
	}{
		{"distinct keys", `{"ticket":"a","order":"b"}`, ""},
		{"the stamp key exactly", `{"ticket":"a","countersign_sik":"x"}`, ""},
		{"stamp key in upper case", `{"COUNTERSIGN_SIK":"x"}`, "COUNTERSIGN_SIK"},
		{"stamp key with long s", `{"countersign_\u017fik":"x"}`, "countersign_\u017fik"},
		{"case pair", `{"ticket":"a","TICKET":"b"}`, "TICKET"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mustNew(t, stripeWithMetadata())().Parse(call("create_refund", `{"payment_intent":"pi_1","amount":1500,"metadata":`+tc.metadata+`}`))
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				return
			}
			if !errors.Is(err, rail.ErrMalformed) || !strings.Contains(err.Error(), "\""+tc.refused+"\"") {
				t.Fatalf("Parse = %v; want a malformed error naming %q", err, tc.refused)
			}
		})
	}
}
