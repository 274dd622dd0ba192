package mcp

import (
	"errors"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/railtest"
	"github.com/countersign/countersign/internal/rail/stripe"
	"github.com/countersign/countersign/internal/sik"
)

// payoutConfig is a hypothetical Stripe MCP server with a payout and a
// transfer tool, to exercise what the shipped defaults do not map.
func payoutConfig() Config {
	return Config{
		Rail: sik.RailStripe, Endpoint: "/v2/mcp", Underlying: stripe.New(),
		Tools: map[string]Tool{
			"create_payout": {Kind: sik.KindPayout, Subject: "destination", Amount: "amount", Currency: "currency",
				Metadata: "metadata", Extra: []string{"method", "instant"}, Defaults: map[string]string{"method": "standard"},
				Ignored: []string{"description"}},
			"create_transfer": {Kind: sik.KindTransfer, Subject: "destination", Amount: "amount", Currency: "currency",
				Metadata: "metadata", Extra: []string{"source_transaction"}},
		},
		ReadOnlyTools: []string{"list_payouts"},
	}
}

func TestParse(t *testing.T) {
	at := func(r rail.Request) rail.Request { r.Path = "/v2/mcp"; return r }
	for _, tc := range []struct {
		name string
		req  rail.Request
		want rail.Parsed
	}{
		{"payout_defaults_method", at(call("create_payout", `{"destination":"ba_1","amount":5000,"currency":"usd"}`)),
			rail.Parsed{Kind: rail.KindAction, Action: rail.Action{Kind: sik.KindPayout, Subject: "ba_1", Payee: "ba_1", AmountMinor: ptr(5000), Currency: "USD",
				Extra: map[string]string{"method": "standard"}}}},
		{"payout_explicit_standard_is_the_same", at(call("create_payout", `{"destination":"ba_1","amount":5000,"currency":"USD","method":"standard","description":"rent"}`)),
			rail.Parsed{Kind: rail.KindAction, Action: rail.Action{Kind: sik.KindPayout, Subject: "ba_1", Payee: "ba_1", AmountMinor: ptr(5000), Currency: "USD",
				Extra: map[string]string{"method": "standard"}}}},
		{"boolean_and_integer_extras", at(call("create_payout", `{"destination":"ba_1","amount":5000,"currency":"eur","method":"instant","instant":true}`)),
			rail.Parsed{Kind: rail.KindAction, Action: rail.Action{Kind: sik.KindPayout, Subject: "ba_1", Payee: "ba_1", AmountMinor: ptr(5000), Currency: "EUR",
				Extra: map[string]string{"method": "instant", "instant": "true"}}}},
		{"integer_and_false_extras", at(call("create_payout", `{"destination":"ba_1","amount":5000,"currency":"eur","method":-5,"instant":false}`)),
			rail.Parsed{Kind: rail.KindAction, Action: rail.Action{Kind: sik.KindPayout, Subject: "ba_1", Payee: "ba_1", AmountMinor: ptr(5000), Currency: "EUR",
				Extra: map[string]string{"method": "-5", "instant": "false"}}}},
		{"largest_exact_integer_extra", at(call("create_payout", `{"destination":"ba_1","amount":5000,"currency":"eur","instant":9007199254740991}`)),
			rail.Parsed{Kind: rail.KindAction, Action: rail.Action{Kind: sik.KindPayout, Subject: "ba_1", Payee: "ba_1", AmountMinor: ptr(5000), Currency: "EUR",
				Extra: map[string]string{"method": "standard", "instant": "9007199254740991"}}}},
		{"ignored_argument_may_read_as_a_literal", at(call("create_payout", `{"destination":"ba_1","amount":5000,"currency":"eur","description":"123"}`)),
			rail.Parsed{Kind: rail.KindAction, Action: rail.Action{Kind: sik.KindPayout, Subject: "ba_1", Payee: "ba_1", AmountMinor: ptr(5000), Currency: "EUR",
				Extra: map[string]string{"method": "standard"}}}},
		{"transfer", at(call("create_transfer", `{"destination":"acct_1","amount":2500,"currency":"eur","metadata":{"k":"v"}}`)),
			rail.Parsed{Kind: rail.KindAction, Action: rail.Action{Kind: sik.KindTransfer, Subject: "acct_1", Payee: "acct_1", AmountMinor: ptr(2500), Currency: "EUR"}}},
		{"read_only_tool", at(call("list_payouts", `{}`)), rail.Parsed{Kind: rail.KindRead}},
		{"read_only_tool_without_arguments", at(post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_payouts"}}`)), rail.Parsed{Kind: rail.KindRead}},
		{"get_stream", rail.Request{Method: "GET", Path: "/v2/mcp"}, rail.Parsed{Kind: rail.KindRead}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := mustNew(t, payoutConfig())().Parse(tc.req)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got.Kind != tc.want.Kind || !railtest.EqualAction(got.Action, tc.want.Action) {
				t.Fatalf("Parse = %+v\nwant %+v", got, tc.want)
			}
			if err := railtest.CheckParsed(got, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	at := func(r rail.Request) rail.Request { r.Path = "/v2/mcp"; return r }
	for _, tc := range []struct {
		name    string
		req     rail.Request
		wantErr error
		naming  string
	}{
		{"payout_without_amount", at(call("create_payout", `{"destination":"ba_1","currency":"usd"}`)), rail.ErrMalformed, "params.arguments.amount: required"},
		{"payout_without_currency", at(call("create_payout", `{"destination":"ba_1","amount":1}`)), rail.ErrMalformed, "params.arguments.currency: required"},
		{"payout_currency_not_iso", at(call("create_payout", `{"destination":"ba_1","amount":1,"currency":"us"}`)), rail.ErrMalformed, "params.arguments.currency"},
		{"payout_currency_number", at(call("create_payout", `{"destination":"ba_1","amount":1,"currency":840}`)), rail.ErrMalformed, "params.arguments.currency"},
		{"amount_float_names_argument", at(call("create_payout", `{"destination":"ba_1","amount":50.00,"currency":"usd"}`)), rail.ErrMalformed, "params.arguments.amount: 50.00 is not an integer"},
		{"amount_string_names_argument", at(call("create_payout", `{"destination":"ba_1","amount":"5000","currency":"usd"}`)), rail.ErrMalformed, `params.arguments.amount: "5000" is a string`},
		{"amount_negative_zero", at(call("create_payout", `{"destination":"ba_1","amount":-0,"currency":"usd"}`)), rail.ErrMalformed, "negative"},
		{"amount_exponent", at(call("create_payout", `{"destination":"ba_1","amount":5E3,"currency":"usd"}`)), rail.ErrMalformed, "params.arguments.amount"},
		{"amount_above_2_53", at(call("create_payout", `{"destination":"ba_1","amount":9007199254740992,"currency":"usd"}`)), rail.ErrMalformed, "out of range"},
		{"extra_array", at(call("create_payout", `{"destination":"ba_1","amount":1,"currency":"usd","method":["instant"]}`)), rail.ErrMalformed, "params.arguments.method"},
		// An Extra's rendering is its key: a string that reads as a literal
		// would key alike with the literal, which a server reads otherwise.
		{"extra_string_false", at(call("create_payout", `{"destination":"ba_1","amount":1,"currency":"usd","instant":"false"}`)), rail.ErrMalformed, `params.arguments.instant: the string "false" reads as a JSON literal`},
		{"extra_string_true", at(call("create_payout", `{"destination":"ba_1","amount":1,"currency":"usd","instant":"true"}`)), rail.ErrMalformed, "reads as a JSON literal"},
		{"extra_string_integer", at(call("create_payout", `{"destination":"ba_1","amount":1,"currency":"usd","method":"-12"}`)), rail.ErrMalformed, "params.arguments.method"},
		// …and two literals that are one value at the server must not key
		// apart.
		{"extra_negative_zero", at(call("create_payout", `{"destination":"ba_1","amount":1,"currency":"usd","instant":-0}`)), rail.ErrMalformed, "-0 is 0 to the server"},
		{"extra_beyond_2_53", at(call("create_payout", `{"destination":"ba_1","amount":1,"currency":"usd","instant":9007199254740993}`)), rail.ErrMalformed, "reads exactly"},
		{"extra_below_minus_2_53", at(call("create_payout", `{"destination":"ba_1","amount":1,"currency":"usd","instant":-9007199254740993}`)), rail.ErrMalformed, "reads exactly"},
		{"kelvin_sign_twin_key", at(call("create_payout", "{\"destination\":\"ba_1\",\"amount\":1,\"currency\":\"usd\",\"metadata\":{\"kind\":\"a\",\"\u212aind\":\"b\"}}")),
			rail.ErrMalformed, "servers that ignore case read them as one"},
		{"long_s_twin_top_level", at(post("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"\u017fomething\":1,\"Something\":2}")), rail.ErrMalformed, "sent twice"},
		{"unknown_tool", at(call("create_refund", `{}`)), rail.ErrUnrecognised, `"create_refund"`},
		{"wrong_endpoint", call("create_payout", `{}`), rail.ErrUnrecognised, "/mcp"},
		{"put", withMethod(at(call("list_payouts", `{}`)), "PUT"), rail.ErrUnrecognised, "PUT"},
		{"delete_session", withMethod(at(call("list_payouts", `{}`)), "DELETE"), rail.ErrUnrecognised, "DELETE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := mustNew(t, payoutConfig())().Parse(tc.req)
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.naming) {
				t.Fatalf("Parse = %+v, %v; want %v naming %q", got, err, tc.wantErr, tc.naming)
			}
		})
	}
}

func withMethod(r rail.Request, m string) rail.Request { r.Method = m; return r }

// TestExtraTakesOnlyItsValues: an Extra with listed values takes only those,
// exactly: a lenient server may read "Normal" as "normal", which would key
// as another action; omitted is the default.
func TestExtraTakesOnlyItsValues(t *testing.T) {
	ad := mustNew(t, RazorpayDefaults())()
	at := func(args string) rail.Request {
		r := call("create_refund", args)
		r.Path = DefaultEndpoint
		return r
	}
	for _, tc := range []struct {
		args, speed, refused string
	}{
		{`{"payment_id":"pay_1","amount":100}`, "normal", ""},
		{`{"payment_id":"pay_1","amount":100,"speed":"normal"}`, "normal", ""},
		{`{"payment_id":"pay_1","amount":100,"speed":"optimum"}`, "optimum", ""},
		{`{"payment_id":"pay_1","amount":100,"speed":"Normal"}`, "", `params.arguments.speed: "Normal" is not one of ["normal" "optimum"]`},
		{`{"payment_id":"pay_1","amount":100,"speed":"instant"}`, "", "is not one of"},
		{`{"payment_id":"pay_1","amount":100,"speed":true}`, "", "is not one of"},
		{`{"payment_id":"pay_1","amount":100,"speed":1}`, "", "is not one of"},
	} {
		got, err := ad.Parse(at(tc.args))
		switch {
		case tc.refused != "":
			if !errors.Is(err, rail.ErrMalformed) || !strings.Contains(err.Error(), tc.refused) {
				t.Errorf("%s: %+v, %v; want refused naming %q", tc.args, got, err, tc.refused)
			}
		case err != nil || got.Action.Extra["speed"] != tc.speed:
			t.Errorf("%s: %+v, %v; want speed %q", tc.args, got.Action.Extra, err, tc.speed)
		}
	}
}
