package mcp

import (
	"errors"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
)

// TestClientAnswers: on an account with money-moving tools, a client's
// answer to a server request is a read only when it carries nothing a tool
// could act on: a declining error, {} (ping), roots, or a declined or
// cancelled elicitation; under an id as the SDKs number requests, with an
// error's message and roots' names and URIs short printable text with
// fewer digits than a card number. An accepted elicitation or a sampling result
// would hand a payout tool a destination or an amount no gate saw.
func TestClientAnswers(t *testing.T) {
	configs := map[string]Config{"stripe": StripeDefaults(), "razorpay": RazorpayDefaults(), "payout": payoutConfig()}
	answer := func(member string) string { return `{"jsonrpc":"2.0","id":"12",` + member + `}` }
	card := "4111111111111111 12/29 123"
	long := func(n int) string { return strings.Repeat("a", n) }
	for _, tc := range []struct {
		name, body string
		refused    string // "" for a read; else the field the refusal names
	}{
		{"error_declining", answer(`"error":{"code":-32601,"message":"Method not found"}`), ""},
		{"ping", answer(`"result":{}`), ""},
		{"ping_integer_id", `{"jsonrpc":"2.0","id":7,"result":{ }}`, ""},
		{"roots", answer(`"result":{"roots":[{"uri":"file:///home/me/project","name":"project"},{"uri":"FILE:///tmp"}]}`), ""},
		{"roots_empty", answer(`"result":{"roots":[]}`), ""},
		{"elicitation_declined", answer(`"result":{"action":"decline"}`), ""},
		{"elicitation_cancelled", answer(`"result":{"action":"cancel"}`), ""},
		{"elicitation_declined_empty_content", answer(`"result":{"action":"decline","content":{}}`), ""},

		// The walk-around: values the tool takes, given where no gate looks.
		{"elicitation_accepted_with_destination", answer(`"result":{"action":"accept","content":{"destination":"ba_attacker","amount":900000}}`), "result.action"},
		// Even empty, an accept confirms what the server asked (a fee, another amount).
		{"elicitation_accepted_empty", answer(`"result":{"action":"accept","content":{}}`), "result.action"},
		{"elicitation_accepted_no_content", answer(`"result":{"action":"accept"}`), "result.action"},
		{"elicitation_action_other_case", answer(`"result":{"action":"Decline"}`), "result.action"},
		{"elicitation_action_not_string", answer(`"result":{"action":1}`), "result.action"},
		{"elicitation_declined_with_content", answer(`"result":{"action":"decline","content":{"destination":"ba_attacker"}}`), "result.content"},
		{"elicitation_declined_null_content", answer(`"result":{"action":"cancel","content":null}`), "result.content"},
		{"elicitation_declined_extra_member", answer(`"result":{"action":"decline","destination":"ba_attacker"}`), "result.destination"},
		{"sampling_result", answer(`"result":{"role":"assistant","content":{"type":"text","text":"ba_attacker"},"model":"m","stopReason":"endTurn"}`), "result.content"},
		{"other_result", answer(`"result":{"destination":"ba_attacker"}`), "result.destination"},
		{"action_in_other_case", answer(`"result":{"Action":"decline"}`), "result.Action"},
		{"result_meta", answer(`"result":{"_meta":{"destination":"ba_attacker"}}`), "result._meta"},
		{"decline_with_meta", answer(`"result":{"action":"decline","_meta":{"amount":900000}}`), "result._meta"},
		{"roots_with_meta", answer(`"result":{"roots":[],"_meta":{}}`), "result._meta"},
		{"result_null", answer(`"result":null`), "result"},
		{"result_array", answer(`"result":[]`), "result"},
		{"roots_and_action", answer(`"result":{"roots":[],"action":"decline"}`), "result.action"},
		{"roots_not_array", answer(`"result":{"roots":{"uri":"file:///x"}}`), "result.roots"},
		{"roots_null", answer(`"result":{"roots":null}`), "result.roots"},
		{"root_not_object", answer(`"result":{"roots":["file:///x"]}`), "result.roots[0]"},
		{"root_without_uri", answer(`"result":{"roots":[{"name":"x"}]}`), "result.roots[0].uri"},
		{"root_not_file_uri", answer(`"result":{"roots":[{"uri":"file:///x"},{"uri":"https://pay.example/ba_attacker"}]}`), "result.roots[1].uri"},
		{"root_extra_member", answer(`"result":{"roots":[{"uri":"file:///x","amount":900000}]}`), "result.roots[0].amount"},
		{"root_meta", answer(`"result":{"roots":[{"uri":"file:///x","_meta":{}}]}`), "result.roots[0]._meta"},
		{"root_name_not_string", answer(`"result":{"roots":[{"uri":"file:///x","name":{"destination":"ba_attacker"}}]}`), "result.roots[0].name"},
		{"error_with_data", answer(`"error":{"code":-1,"message":"x","data":{"destination":"ba_attacker"}}`), "error.data"},
		{"error_null", answer(`"error":null`), "error"},
		{"error_code_fraction", answer(`"error":{"code":1.5,"message":"x"}`), "error.code"},
		{"error_code_string", answer(`"error":{"code":"1","message":"x"}`), "error.code"},
		{"error_code_a_card_number", answer(`"error":{"code":4111111111111111,"message":"no"}`), "error.code"},
		{"error_code_a_negative_card_number", answer(`"error":{"code":-4111111111111111,"message":"no"}`), "error.code"},
		{"error_code_seven_digits", answer(`"error":{"code":-1000000,"message":"no"}`), "error.code"},
		{"error_card_split_between_code_and_message", answer(`"error":{"code":411111,"message":"1111111"}`), "error.message"},
		{"error_code_six_digits", answer(`"error":{"code":-999999,"message":"no"}`), ""},
		{"error_without_message", answer(`"error":{"code":1}`), "error.message"},
		// The SDKs' own refusals (TypeScript and Python: no handler, a
		// capability not offered; the spec's sampling example).
		{"error_ts_wrapped", answer(`"error":{"code":-32601,"message":"MCP error -32601: Method not found"}`), ""},
		{"error_py_sampling", answer(`"error":{"code":-32600,"message":"Sampling not supported"}`), ""},
		{"error_py_elicitation", answer(`"error":{"code":-32600,"message":"Elicitation not supported"}`), ""},
		{"error_py_roots", answer(`"error":{"code":-32600,"message":"List roots not supported"}`), ""},
		{"error_user_rejected", answer(`"error":{"code":-1,"message":"User rejected sampling request"}`), ""},
		{"error_message_at_bound", answer(`"error":{"code":-1,"message":"` + long(maxAnswerText) + `"}`), ""},
		{"error_message_empty", answer(`"error":{"code":-1,"message":""}`), ""},
		// Ids as the SDKs number a server's requests, and nothing else.
		{"id_zero", `{"jsonrpc":"2.0","id":0,"result":{}}`, ""},
		{"id_nine_digits", `{"jsonrpc":"2.0","id":999999999,"result":{}}`, ""},
		{"id_string_text", `{"jsonrpc":"2.0","id":"srv-1","result":{}}`, "id"},
		{"id_string_card", `{"jsonrpc":"2.0","id":"` + card + `","result":{}}`, "id"},
		{"id_ten_digits", `{"jsonrpc":"2.0","id":4111111111,"result":{}}`, "id"},
		{"id_long_string_digits", `{"jsonrpc":"2.0","id":"4111111111111111","error":{"code":-1,"message":"no"}}`, "id"},
		// Text the awaiting code is handed: short, printable, few digits.
		{"error_message_text", answer(`"error":{"code":-1,"message":"destination ba_attacker amount 900000 card ` + card + `"}`), "error.message"},
		{"error_message_over_bound", answer(`"error":{"code":-1,"message":"` + long(maxAnswerText+1) + `"}`), "error.message"},
		{"error_message_card", answer(`"error":{"code":-1,"message":"` + card + `"}`), "error.message"},
		{"error_message_card_spaced", answer(`"error":{"code":-1,"message":"4111 1111 1111 1111"}`), "error.message"},
		{"error_message_not_ascii", answer(`"error":{"code":-1,"message":"no\u00a0thanks"}`), "error.message"},
		{"error_message_control", answer(`"error":{"code":-1,"message":"no\nba_attacker"}`), "error.message"},
		{"roots_at_bounds", answer(`"result":{"roots":[` + strings.Repeat(`{"uri":"file:///x"},`, maxRoots-1) + `{"uri":"file:///` + long(maxRootURI-len("file:///")) + `","name":"` + long(maxAnswerText) + `"}]}`), ""},
		{"roots_with_a_year", answer(`"result":{"roots":[{"uri":"file:///home/me/2024/q3-report","name":"q3 2024"}]}`), ""},
		{"roots_too_many", answer(`"result":{"roots":[` + strings.Repeat(`{"uri":"file:///x"},`, maxRoots) + `{"uri":"file:///x"}]}`), "result.roots"},
		{"root_uri_over_bound", answer(`"result":{"roots":[{"uri":"file:///` + long(maxRootURI-len("file:///")+1) + `"}]}`), "result.roots[0].uri"},
		{"root_uri_data", answer(`"result":{"roots":[{"uri":"file:///ba_attacker/900000/4111111111111111"}]}`), "result.roots[0].uri"},
		{"root_uri_not_ascii", answer(`"result":{"roots":[{"uri":"file:///caf\u00e9"}]}`), "result.roots[0].uri"},
		{"root_name_text", answer(`"result":{"roots":[{"uri":"file:///x","name":"destination ba_attacker amount 900000 card ` + card + `"}]}`), "result.roots[0].name"},
		{"root_name_over_bound", answer(`"result":{"roots":[{"uri":"file:///x","name":"` + long(maxAnswerText+1) + `"}]}`), "result.roots[0].name"},
		{"root_name_control", answer(`"result":{"roots":[{"uri":"file:///x","name":"a\tb"}]}`), "result.roots[0].name"},
		// A card split across roots is still more digits than the answer may carry.
		{"roots_card_split", answer(`"result":{"roots":[{"uri":"file:///a/41111111"},{"uri":"file:///b","name":"11111111"}]}`), "result.roots[1].name"},
		// The shape checks already there stay.
		{"response_with_params", answer(`"result":{},"params":{}`), "params"},
	} {
		for cname, cfg := range configs {
			t.Run(tc.name+"/"+cname, func(t *testing.T) {
				req := post(tc.body)
				req.Path = cfg.Endpoint
				got, err := mustNew(t, cfg)().Parse(req)
				if tc.refused == "" {
					if err != nil || got.Kind != rail.KindRead {
						t.Fatalf("Parse(%s) = %+v, %v; want a read", tc.body, got, err)
					}
					return
				}
				if !errors.Is(err, rail.ErrMalformed) || !strings.Contains(err.Error(), ": "+tc.refused+": ") {
					t.Fatalf("Parse(%s) = %+v, %v; want malformed naming %s", tc.body, got, err, tc.refused)
				}
			})
		}
	}
}

// TestClientAnswerRefusalSaysWhy: the refusal tells the agent, and the
// owner reading the decision, why an answer is refused and what the
// server must do instead.
func TestClientAnswerRefusalSaysWhy(t *testing.T) {
	_, err := mustNew(t, StripeDefaults())().Parse(post(`{"jsonrpc":"2.0","id":3,"result":{"action":"accept","content":{"amount":1}}}`))
	for _, want := range []string{"no gate judged", "as the tool's arguments"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse = %v; want it to say %q", err, want)
		}
	}
}

// TestClientAnswersWithoutMoneyTools: with no money-moving tool configured
// (New refuses that, so only a bare adapter has none) no answer is
// checked: nothing the client says can reach a tool that moves money.
func TestClientAnswersWithoutMoneyTools(t *testing.T) {
	ad := &adapter{endpoint: DefaultEndpoint}
	body := `{"jsonrpc":"2.0","id":"srv-1","result":{"action":"accept","content":{"destination":"ba_1"}}}`
	if got, err := ad.Parse(post(body)); err != nil || got.Kind != rail.KindRead {
		t.Fatalf("Parse(%s) = %+v, %v; want a read", body, got, err)
	}
}
