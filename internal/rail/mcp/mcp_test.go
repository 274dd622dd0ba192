package mcp

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/railtest"
	"github.com/countersign/countersign/internal/rail/razorpay"
	"github.com/countersign/countersign/internal/rail/stripe"
	"github.com/countersign/countersign/internal/sik"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformanceStripeDefaults(t *testing.T) {
	railtest.Run(t, mustNew(t, StripeDefaults()), stripeFixtures())
}

func TestConformanceStripeWithMetadata(t *testing.T) {
	railtest.Run(t, mustNew(t, stripeWithMetadata()), stripeMetadataFixtures())
}

func TestConformanceRazorpayDefaults(t *testing.T) {
	railtest.Run(t, mustNew(t, RazorpayDefaults()), razorpayFixtures())
}

// Razorpay's server: create_refund(payment_id, amount, speed, notes,
// receipt); success is the refund entity's JSON as text.

var rzpRefund = rail.Action{Kind: sik.KindRefund, Subject: "pay_1", AmountMinor: ptr(29500), Extra: map[string]string{"speed": "normal"}}

func rzpEntity(id string, amount int64, stamp string) string {
	notes := `[]`
	if stamp != "" {
		notes = fmt.Sprintf(`{"countersign_sik":%q,"order":"1"}`, stamp)
	}
	return fmt.Sprintf(`{"id":%q,"entity":"refund","amount":%d,"currency":"INR","payment_id":"pay_1","notes":%s,"receipt":null,"status":"processed","speed_requested":"normal","created_at":1760000000}`,
		id, amount, notes)
}

func razorpayFixtures() railtest.Fixtures {
	field := "params.arguments.notes.countersign_sik"
	resolve := rzpRefund
	refund := func(args string) rail.Request { return call("create_refund", args) }
	return railtest.Fixtures{
		Rail: sik.RailRazorpay,
		Actions: []railtest.ActionCase{
			{Name: "refund", Req: refund(`{"payment_id":"pay_1","amount":29500}`), Want: rzpRefund},
			{Name: "explicit_normal_speed", Req: refund(`{"payment_id":"pay_1","amount":29500,"speed":"normal"}`), Want: rzpRefund},
			{Name: "optimum_speed_notes_receipt", Req: refund(`{"payment_id":"pay_1","amount":29500,"speed":"optimum","notes":{"ticket":"T-9"},"receipt":"r-1"}`),
				Want: rail.Action{Kind: sik.KindRefund, Subject: "pay_1", AmountMinor: ptr(29500), Extra: map[string]string{"speed": "optimum"}}},
		},
		Reads: []railtest.RequestCase{
			{Name: "tools_list", Req: post(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)},
			{Name: "fetch_payment", Req: call("fetch_payment", `{"payment_id":"pay_1"}`)},
			{Name: "fetch_multiple_refunds_for_payment", Req: call("fetch_multiple_refunds_for_payment", `{"payment_id":"pay_1"}`)},
			{Name: "fetch_payout_with_id", Req: call("fetch_payout_with_id", `{"payout_id":"pout_1"}`)},
		},
		Malformed: []railtest.MalformedCase{
			{Name: "amount_omitted_is_sent_as_zero", Req: refund(`{"payment_id":"pay_1"}`), Field: "amount"},
			{Name: "notes_array", Req: refund(`{"payment_id":"pay_1","amount":1,"notes":[]}`), Field: "notes"},
			{Name: "notes_full", Req: refund(`{"payment_id":"pay_1","amount":1,"notes":` + manyKeys(15) + `}`), Field: "notes"},
			{Name: "speed_number_fraction", Req: refund(`{"payment_id":"pay_1","amount":1,"speed":1.5}`), Field: "speed"},
			{Name: "undeclared_argument", Req: refund(`{"payment_id":"pay_1","amount":1,"account_number":"7878"}`), Field: "account_number"},
		},
		MalformedAmounts: map[string]rail.Request{
			"fraction":    refund(`{"payment_id":"pay_1","amount":295.5}`),
			"exponent":    refund(`{"payment_id":"pay_1","amount":2.95e4}`),
			"negative":    refund(`{"payment_id":"pay_1","amount":-29500}`),
			"non_numeric": refund(`{"payment_id":"pay_1","amount":"29500"}`),
			"duplicate":   refund(`{"payment_id":"pay_1","amount":1,"amount":29500}`),
			"overflow":    refund(`{"payment_id":"pay_1","amount":1e400}`),
		},
		Unrecognised: []railtest.RequestCase{
			{Name: "update_refund_rewrites_notes", Req: call("update_refund", `{"refund_id":"rfnd_1","notes":{}}`)},
			{Name: "create_instant_settlement", Req: call("create_instant_settlement", `{"amount":100}`)},
			{Name: "capture_payment", Req: call("capture_payment", `{"payment_id":"pay_1","amount":100,"currency":"INR"}`)},
		},
		HeaderRule: func(_ sik.Kind, name, value string) error {
			if name != sik.HeaderRazorpayRefund || len(value) < 10 {
				return fmt.Errorf("header %s=%q, want X-Refund-Idempotency of at least 10", name, value)
			}
			return nil
		},
		BodyField: field, WithBodyStamp: withBodyStamp(field),
		Classify: []railtest.ClassifyCase{
			{Name: "applied/entity_with_stamp", Action: rzpRefund, Resp: jsonResp(200, result(rzpEntity("rfnd_1", 29500, stampA), false)),
				Want: rail.Applied, WantEntityID: "rfnd_1", WantStamp: stampA},
			{Name: "applied/sse", Action: rzpRefund, Resp: sseResp(event(result(rzpEntity("rfnd_2", 29500, ""), false))),
				Want: rail.Applied, WantEntityID: "rfnd_2"},
			{Name: "in_progress/idempotency_in_progress", Action: rzpRefund,
				Resp: jsonResp(200, result("creating refund failed: Request with the same idempotency key is being processed", true)), Want: rail.InProgress},
			{Name: "fingerprint_mismatch/key_reused", Action: rzpRefund,
				Resp: jsonResp(200, result("creating refund failed: Different request with the same idempotency key has already been processed.", true)), Want: rail.FingerprintMismatch},
			{Name: "rejected/code_in_text", Action: rzpRefund,
				Resp: jsonResp(200, result(`creating refund failed: {"error":{"code":"BAD_REQUEST_ERROR","description":"The payment has been fully refunded already"}}`, true)), Want: rail.Rejected},
			{Name: "ambiguous/description_without_code", Action: rzpRefund,
				Resp: jsonResp(200, result("creating refund failed: The refund amount provided is greater than amount captured", true)), Want: rail.Ambiguous},
			{Name: "ambiguous/gateway_error", Action: rzpRefund,
				Resp: jsonResp(200, result(`creating refund failed: GATEWAY_ERROR BAD_REQUEST_ERROR`, true)), Want: rail.Ambiguous},
			{Name: "ambiguous/tool_execution_failed", Action: rzpRefund, Resp: jsonResp(200, rpcError(-32603, "Tool execution failed", "context canceled")), Want: rail.Ambiguous},
			{Name: "ambiguous/other_payment", Action: rzpRefund,
				Resp: jsonResp(200, result(strings.Replace(rzpEntity("rfnd_3", 29500, ""), "pay_1", "pay_2", 1), false)), Want: rail.Ambiguous},
		},
		FindActions: []rail.Action{rzpRefund}, PageSize: 100, List: razorpayList,
		ResolveAction: &resolve,
	}
}

func razorpayList(c railtest.ListCall) (int, []byte, error) {
	r, a := c.Req, c.Action
	q := r.URL.Query()
	if r.Method != http.MethodGet || r.URL.Path != "/v1/payments/"+a.Subject+"/refunds" || q.Get("count") != "100" {
		return 0, nil, fmt.Errorf("%s %s", r.Method, r.URL.RequestURI())
	}
	skip, err := strconv.Atoi(q.Get("skip"))
	if err != nil || skip < 0 {
		return 0, nil, fmt.Errorf("skip %q", q.Get("skip"))
	}
	page := railtest.OffsetPage(c.Items, skip, 100)
	items := make([]json.RawMessage, 0, len(page))
	for _, e := range page {
		var notes any = []any{}
		if e.Stamp != "" {
			notes = map[string]string{sik.StampKey: e.Stamp}
		}
		b, _ := json.Marshal(map[string]any{"id": e.ID, "entity": "refund", "amount": e.AmountMinor, "currency": e.Currency,
			"status": e.Status, "created_at": e.Created.Unix(), "notes": notes, "payment_id": a.Subject})
		items = append(items, b)
	}
	body, _ := json.Marshal(map[string]any{"entity": "collection", "count": len(items), "items": items})
	return http.StatusOK, body, nil
}

func TestNewRefusesBadConfig(t *testing.T) {
	refund := Tool{Kind: sik.KindRefund, Subject: "payment_intent", Amount: "amount"}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no_underlying", func(c *Config) { c.Underlying = nil }, "underlying adapter is required"},
		{"underlying_other_rail", func(c *Config) { c.Underlying = razorpay.New() }, `underlying adapter is for "razorpay"`},
		{"unknown_rail", func(c *Config) { c.Rail = "paypal" }, `rail "paypal"`},
		{"endpoint_empty", func(c *Config) { c.Endpoint = "" }, "endpoint"},
		{"endpoint_relative", func(c *Config) { c.Endpoint = "mcp" }, "endpoint"},
		{"endpoint_trailing_slash", func(c *Config) { c.Endpoint = "/mcp/" }, "endpoint"},
		{"endpoint_dot_segment", func(c *Config) { c.Endpoint = "/a/../mcp" }, "endpoint"},
		{"endpoint_query", func(c *Config) { c.Endpoint = "/mcp?x=1" }, "endpoint"},
		{"no_tools", func(c *Config) { c.Tools = nil }, "no money-moving tools"},
		{"bad_kind", func(c *Config) { c.Tools = map[string]Tool{"t": {Kind: "charge", Subject: "s"}} }, `kind "charge"`},
		{"no_subject", func(c *Config) { c.Tools = map[string]Tool{"t": {Kind: sik.KindRefund}} }, "subject argument is required"},
		{"payout_without_currency", func(c *Config) {
			c.Tools = map[string]Tool{"t": {Kind: sik.KindPayout, Subject: "destination", Amount: "amount"}}
		}, "needs amount and currency"},
		{"required_amount_unnamed", func(c *Config) {
			c.Tools = map[string]Tool{"t": {Kind: sik.KindRefund, Subject: "p", AmountRequired: true}}
		}, "no amount argument"},
		{"argument_two_roles", func(c *Config) {
			c.Tools = map[string]Tool{"t": {Kind: sik.KindRefund, Subject: "p", Amount: "p"}}
		}, `argument "p" is both subject and amount`},
		{"dotted_metadata", func(c *Config) {
			c.Tools = map[string]Tool{"t": {Kind: sik.KindRefund, Subject: "p", Metadata: "a.b"}}
		}, "dot"},
		{"reserved_extra", func(c *Config) {
			c.Tools = map[string]Tool{"t": {Kind: sik.KindRefund, Subject: "p", Extra: []string{"countersign.alias"}}}
		}, "reserves"},
		{"default_for_non_extra", func(c *Config) {
			c.Tools = map[string]Tool{"t": {Kind: sik.KindRefund, Subject: "p", Defaults: map[string]string{"speed": "normal"}}}
		}, `default for "speed"`},
		{"values_for_non_extra", func(c *Config) {
			c.Tools = map[string]Tool{"t": {Kind: sik.KindRefund, Subject: "p", Values: map[string][]string{"speed": {"normal"}}}}
		}, `values for "speed"`},
		{"values_empty", func(c *Config) {
			c.Tools = map[string]Tool{"t": {Kind: sik.KindRefund, Subject: "p", Extra: []string{"speed"}, Values: map[string][]string{"speed": {}}}}
		}, "none listed"},
		{"default_not_a_value", func(c *Config) {
			c.Tools = map[string]Tool{"t": {Kind: sik.KindRefund, Subject: "p", Extra: []string{"speed"}, Defaults: map[string]string{"speed": "normal"},
				Values: map[string][]string{"speed": {"optimum"}}}}
		}, `default "normal" for "speed" is not one of its values`},
		{"kind_stamped_two_ways", func(c *Config) {
			c.Tools = map[string]Tool{"a": refund, "b": {Kind: sik.KindRefund, Subject: "charge", Metadata: "metadata"}}
		}, "stamp different arguments"},
		{"read_only_and_money", func(c *Config) { c.ReadOnlyTools = append(c.ReadOnlyTools, "create_refund") }, "both money-moving and read-only"},
		{"read_only_twice", func(c *Config) { c.ReadOnlyTools = []string{"x", "x"} }, "listed twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := StripeDefaults()
			tc.edit(&cfg)
			_, err := New(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	for name, cfg := range map[string]Config{"stripe": StripeDefaults(), "razorpay": RazorpayDefaults(), "stripe_metadata": stripeWithMetadata()} {
		if _, err := New(cfg); err != nil {
			t.Errorf("%s defaults: %v", name, err)
		}
	}
	root := StripeDefaults()
	root.Endpoint = "/"
	if _, err := New(root); err != nil {
		t.Errorf("endpoint /: %v", err)
	}
}

func TestStamp(t *testing.T) {
	key := sik.SIK(stampA)
	for _, tc := range []struct {
		name      string
		cfg       Config
		action    rail.Action
		header    string
		bodyField string
	}{
		{"stripe_toolkit_has_no_metadata", StripeDefaults(), refundPI, sik.HeaderStripe, ""},
		{"stripe_with_metadata", stripeWithMetadata(), refundPI, sik.HeaderStripe, "params.arguments.metadata.countersign_sik"},
		{"razorpay_notes", RazorpayDefaults(), rzpRefund, sik.HeaderRazorpayRefund, "params.arguments.notes.countersign_sik"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ad := mustNew(t, tc.cfg)()
			st, err := ad.Stamp(tc.action, key, 2)
			if err != nil {
				t.Fatal(err)
			}
			want, _ := sik.Stamp(key, 2)
			if st.Headers[tc.header] != want || len(st.Headers) != 1 {
				t.Errorf("headers %v, want %s=%s", st.Headers, tc.header, want)
			}
			if st.BodyField != tc.bodyField || st.BodyValue != want {
				t.Errorf("body stamp %s=%s, want %s=%s", st.BodyField, st.BodyValue, tc.bodyField, want)
			}
		})
	}
	ad := mustNew(t, StripeDefaults())()
	if _, err := ad.Stamp(rail.Action{Kind: sik.KindPayout, Subject: "ba_1"}, key, 0); err == nil {
		t.Error("Stamp accepted a kind no tool makes")
	}
}

func TestRefusal(t *testing.T) {
	msg := `250000 exceeds the 189900 still refundable on pay_1002 ("quoted" <tag>)`
	type rpcErr struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Data    struct {
				ReasonCode string `json:"reason_code"`
			} `json:"data"`
		} `json:"error"`
	}
	for _, tc := range []struct {
		name   string
		body   []byte
		wantID string
	}{
		{"adapter_refusal_has_null_id", mustNew(t, StripeDefaults())().Refusal(http.StatusForbidden, "amount_over_refundable", msg), "null"},
		{"integer_id", RefusalFor(json.RawMessage("42"), "amount_over_refundable", msg), "42"},
		{"string_id", RefusalFor(json.RawMessage(`"req-7"`), "amount_over_refundable", msg), `"req-7"`},
		{"invalid_id_becomes_null", RefusalFor(json.RawMessage(`{"x":1}`), "amount_over_refundable", msg), "null"},
		{"id_from_request", RefusalFor(RequestID([]byte(callBody(`"abc"`, "create_refund", `{}`))), "amount_over_refundable", msg), `"abc"`},
		{"no_id_in_notification", RefusalFor(RequestID([]byte(`{"jsonrpc":"2.0","method":"notifications/x"}`)), "amount_over_refundable", msg), "null"},
		{"no_id_in_batch", RefusalFor(RequestID([]byte(`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`)), "amount_over_refundable", msg), "null"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r rpcErr
			if err := json.Unmarshal(tc.body, &r); err != nil {
				t.Fatalf("%s: %v", tc.body, err)
			}
			if r.JSONRPC != "2.0" || string(r.ID) != tc.wantID || r.Error.Code != -32001 || r.Error.Message != msg || r.Error.Data.ReasonCode != "amount_over_refundable" {
				t.Fatalf("refusal %s", tc.body)
			}
		})
	}
}

func TestWriteBodyStamp(t *testing.T) {
	const field = "params.arguments.metadata.countersign_sik"
	for _, tc := range []struct{ name, body, want string }{
		{"adds_metadata", `{"jsonrpc":"2.0","id":9007199254740993,"method":"tools/call","params":{"name":"r","arguments":{"amount":1500}}}`,
			`{"id":9007199254740993,"jsonrpc":"2.0","method":"tools/call","params":{"arguments":{"amount":1500,"metadata":{"countersign_sik":"S"}},"name":"r"}}`},
		{"keeps_other_metadata_overwrites_stamp", `{"params":{"arguments":{"metadata":{"countersign_sik":"forged","a":"<b>"}}}}`,
			`{"params":{"arguments":{"metadata":{"a":"<b>","countersign_sik":"S"}}}}`},
		{"null_metadata", `{"params":{"arguments":{"metadata":null}}}`, `{"params":{"arguments":{"metadata":{"countersign_sik":"S"}}}}`},
		{"no_params", `{"id":"x"}`, `{"id":"x","params":{"arguments":{"metadata":{"countersign_sik":"S"}}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := WriteBodyStamp([]byte(tc.body), field, "S")
			if err != nil || string(got) != tc.want {
				t.Fatalf("WriteBodyStamp = %s, %v\nwant %s", got, err, tc.want)
			}
		})
	}
	for _, body := range []string{`[1]`, `"x"`, `{"params":{"arguments":{"metadata":"x"}}}`, `{"params":[]}`, `not json`} {
		if got, err := WriteBodyStamp([]byte(body), field, "S"); err == nil {
			t.Errorf("WriteBodyStamp(%s) = %s, want an error", body, got)
		}
	}
	if _, err := WriteBodyStamp([]byte(`{}`), "a..b", "S"); err == nil {
		t.Error("empty key accepted")
	}
}

// The SIK of a refund is the same whether the agent asked by MCP or by
// REST: same rail, same action.
func TestSameActionAsREST(t *testing.T) {
	for _, tc := range []struct {
		name string
		mcp  Config
		rest rail.Adapter
		call rail.Request
		req  rail.Request
	}{
		{"stripe", StripeDefaults(), stripe.New(),
			call("create_refund", `{"payment_intent":"pi_1","amount":1500,"reason":"duplicate"}`),
			rail.Request{Method: http.MethodPost, Path: "/v1/refunds", Headers: map[string]string{"content-type": "application/x-www-form-urlencoded"},
				Body: []byte("payment_intent=pi_1&amount=1500&reason=duplicate")}},
		{"razorpay", RazorpayDefaults(), razorpay.New(),
			call("create_refund", `{"payment_id":"pay_1","amount":29500}`),
			rail.Request{Method: http.MethodPost, Path: "/v1/payments/pay_1/refund", Headers: map[string]string{"content-type": "application/json"},
				Body: []byte(`{"amount":29500}`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			viaMCP, err := mustNew(t, tc.mcp)().Parse(tc.call)
			if err != nil {
				t.Fatal(err)
			}
			viaREST, err := tc.rest.Parse(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if !railtest.EqualAction(viaMCP.Action, viaREST.Action) {
				t.Fatalf("MCP %+v\nREST %+v", viaMCP.Action, viaREST.Action)
			}
		})
	}
}
