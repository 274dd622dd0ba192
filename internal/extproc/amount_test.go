package extproc

import (
	"encoding/json"
	"errors"
	"strconv"
	"testing"

	"github.com/countersign/countersign/internal/engine"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/mcp"
	"github.com/countersign/countersign/internal/rail/razorpay"
	"github.com/countersign/countersign/internal/rail/stripe"
	"github.com/countersign/countersign/internal/sik"
)

// fullRefunds are full refunds (no amount) as each adapter reads them.
func fullRefunds(t testing.TB) []struct {
	name string
	ad   rail.Adapter
	req  rail.Request
} {
	mcpStripe, err := mcp.New(mcp.StripeDefaults())
	if err != nil {
		t.Fatal(err)
	}
	form := map[string]string{"content-type": "application/x-www-form-urlencoded"}
	js := map[string]string{"content-type": "application/json"}
	call := func(tool, args string) []byte {
		return []byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + args + `}}`)
	}
	return []struct {
		name string
		ad   rail.Adapter
		req  rail.Request
	}{
		{"stripe", stripe.New(), rail.Request{Method: "POST", Host: "api.stripe.com", Path: "/v1/refunds", Headers: form,
			Body: []byte("payment_intent=pi_1&reason=requested_by_customer&metadata[ticket]=T-1")}},
		{"razorpay", razorpay.New(), rail.Request{Method: "POST", Host: "api.razorpay.com", Path: "/v1/payments/pay_1/refund", Headers: js,
			Body: []byte(`{"speed":"normal","notes":{"ticket":"T-1"}}`)}},
		{"razorpay empty object", razorpay.New(), rail.Request{Method: "POST", Host: "api.razorpay.com", Path: "/v1/payments/pay_1/refund", Headers: js,
			Body: []byte(`{}`)}},
		{"stripe mcp (no metadata argument)", mcpStripe, rail.Request{Method: "POST", Path: mcp.DefaultEndpoint, Headers: js,
			Body: call("create_refund", `{"payment_intent":"pi_1"}`)}},
	}
}

// TestAFullRefundLeavesForTheAmountItsIntentHolds: a refund without an
// amount is valued at what is refundable when it is decided, and held at
// that; it leaves with that amount written in, as the rail's own parser
// reads the body that goes out, so the rail cannot refund more than the
// hold should the refundable balance grow before it arrives. Everything
// else the request said reads the same.
func TestAFullRefundLeavesForTheAmountItsIntentHolds(t *testing.T) {
	const key = sik.SIK("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567")
	for _, tc := range fullRefunds(t) {
		t.Run(tc.name, func(t *testing.T) {
			before, err := tc.ad.Parse(tc.req)
			if err != nil || before.Kind != rail.KindAction || before.Action.AmountMinor != nil {
				t.Fatalf("Parse = %+v, %v; want a full refund", before, err)
			}
			st, err := tc.ad.Stamp(before.Action, key, 0)
			if err != nil {
				t.Fatal(err)
			}
			if st.AmountField == "" {
				t.Fatalf("Stamp of a full refund names no amount field: %+v", st)
			}
			ref := engine.IntentRef{BodyField: st.BodyField, BodyValue: st.BodyValue, AmountField: st.AmountField, Amount: 4000}
			out, err := OutgoingBody(tc.req.Body, ref)
			if err != nil {
				t.Fatalf("OutgoingBody: %v", err)
			}
			sent := tc.req
			sent.Body = out
			if mt := rail.BodyMediaType(st.BodyField); mt != "" {
				sent.Headers = map[string]string{"content-type": mt}
			}
			after, err := tc.ad.Parse(sent)
			if err != nil {
				t.Fatalf("the rail's parser refuses the body that leaves (%s): %v", out, err)
			}
			if after.Action.AmountMinor == nil || *after.Action.AmountMinor != 4000 {
				t.Fatalf("the body that leaves (%s) reads as amount %v, want 4000", out, after.Action.AmountMinor)
			}
			after.Action.AmountMinor = nil
			if before.Action.Subject != after.Action.Subject || before.Action.Kind != after.Action.Kind || len(before.Action.Extra) != len(after.Action.Extra) {
				t.Fatalf("the body that leaves reads as %+v, was %+v", after.Action, before.Action)
			}
			for k, v := range before.Action.Extra {
				if after.Action.Extra[k] != v {
					t.Fatalf("extra %s = %q after, %q before", k, after.Action.Extra[k], v)
				}
			}

			// An action with an amount leaves as it was decided.
			amt := int64(100)
			with := before.Action
			with.AmountMinor = &amt
			if st, err := tc.ad.Stamp(with, key, 0); err != nil || st.AmountField != "" {
				t.Fatalf("Stamp of a refund with an amount = %+v, %v; want no amount field", st, err)
			}
		})
	}
}

func TestPinAmountRefusesWhatItCannotWrite(t *testing.T) {
	for _, tc := range []struct {
		name, body, stampField, field string
		amount                        int64
	}{
		{"no field", "a=1", "metadata[countersign_sik]", "", 5},
		{"zero", "a=1", "metadata[countersign_sik]", "amount", 0},
		{"negative", `{}`, "notes.countersign_sik", "amount", -1},
		{"json body not an object", `[1]`, "notes.countersign_sik", "amount", 5},
		{"json path with an empty key", `{}`, "notes.countersign_sik", "params..amount", 5},
		{"inner member not an object", `{"params":"x"}`, "", "params.arguments.amount", 5},
		{"no media type", `{}`, "", "amount", 5},
	} {
		if out, err := PinAmount([]byte(tc.body), tc.stampField, tc.field, tc.amount); !errors.Is(err, ErrBodyStamp) {
			t.Errorf("%s: PinAmount = %s, %v; want ErrBodyStamp", tc.name, out, err)
		}
	}
}

// FuzzOutgoingBody: whatever body an agent sends for a full refund, the one
// that leaves reads, to the rail's own parser, as that refund for the held
// amount, or it does not leave (an error stops it).
func FuzzOutgoingBody(f *testing.F) {
	cases := fullRefunds(f)
	for i, tc := range cases {
		f.Add(i, tc.req.Body)
	}
	f.Add(0, []byte("payment_intent=pi_1&amount="))
	f.Add(1, []byte(`{"amount":null}`))
	f.Fuzz(func(t *testing.T, which int, body []byte) {
		if which < 0 {
			which = -which
		}
		tc := cases[which%len(cases)]
		req := tc.req
		req.Body = body
		before, err := tc.ad.Parse(req)
		if err != nil || before.Kind != rail.KindAction || before.Action.AmountMinor != nil {
			return
		}
		st, err := tc.ad.Stamp(before.Action, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 1)
		if err != nil || st.AmountField == "" {
			return
		}
		out, err := OutgoingBody(body, engine.IntentRef{BodyField: st.BodyField, BodyValue: st.BodyValue, AmountField: st.AmountField, Amount: 123,
			CallID: st.CallID})
		if err != nil {
			return // stopped: it does not leave
		}
		if st.CallID != "" {
			// An MCP call leaves under Countersign's id, and is otherwise
			// the agent's call: with the agent's id back, the adapter
			// reads it as before.
			var left map[string]json.RawMessage
			if err := json.Unmarshal(out, &left); err != nil || string(left["id"]) != strconv.Quote(st.CallID) {
				t.Fatalf("%s: the body that leaves (%q) is not under the id %q", tc.name, out, st.CallID)
			}
			agent, err := CallIDOf(body)
			if err != nil {
				t.Fatalf("%s: a parsed call (%q) has no id: %v", tc.name, body, err)
			}
			left["id"] = agent
			if out, err = json.Marshal(left); err != nil {
				t.Fatal(err)
			}
		}
		req.Body = out
		if mt := rail.BodyMediaType(st.BodyField); mt != "" {
			req.Headers = map[string]string{"content-type": mt}
		}
		after, err := tc.ad.Parse(req)
		if err != nil {
			t.Fatalf("%s: the body that leaves (%q) does not parse: %v", tc.name, out, err)
		}
		if after.Action.AmountMinor == nil || *after.Action.AmountMinor != 123 || after.Action.Subject != before.Action.Subject {
			t.Fatalf("%s: the body that leaves (%q) reads as %+v, want %s for 123", tc.name, out, after.Action, before.Action.Subject)
		}
	})
}
