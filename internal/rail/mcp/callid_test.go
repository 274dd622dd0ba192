package mcp

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
	ssepkg "github.com/countersign/countersign/internal/sse"
)

// minted is the id a first attempt under stamp stampA leaves with.
const minted = CallIDPrefix + stampA + "#1"

// withID is a JSON-RPC response (result or rpcError) naming id instead.
func withID(msg, id string) string {
	return strings.Replace(msg, `"id":1,`, `"id":`+id+`,`, 1)
}

// TestStampMintsTheCallID: every money-moving call leaves under an id of
// Countersign's, one per stamp, with or without a body stamp.
func TestStampMintsTheCallID(t *testing.T) {
	for name, cfg := range map[string]Config{"stripe": StripeDefaults(), "stripe with metadata": stripeWithMetadata(), "razorpay": RazorpayDefaults()} {
		ad := mustNew(t, cfg)()
		for gen, want := range map[uint32]string{0: CallIDPrefix + stampA, 2: CallIDPrefix + stampA + "-2"} {
			st, err := ad.Stamp(refundPI, stampA, gen)
			if err != nil || st.CallID != want || st.CallID != CallIDPrefix+st.BodyValue {
				t.Errorf("%s gen %d: Stamp = %+v, %v; want the call id %q", name, gen, st, err, want)
			}
			if !reservedID(json.RawMessage(`"` + st.CallID + `#1"`)) {
				t.Errorf("%s: the call id %q is not one Parse refuses", name, st.CallID)
			}
		}
	}
}

// TestParseRefusesCountersignsIDs: no message an agent sends may carry an
// id of the shape Countersign gives money-moving calls, in any case or
// spelling (a request beside the call under its id would have its answer
// handed to the call, or be handed the call's), nor cancel a request by
// such an id.
func TestParseRefusesCountersignsIDs(t *testing.T) {
	ad := mustNew(t, stripeWithMetadata())()
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":"` + minted + `","method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":"` + minted + `","method":"ping"}`,
		`{"jsonrpc":"2.0","id":"` + minted + `","method":"tools/call","params":{"name":"list_refunds","arguments":{}}}`,
		callBody(`"`+minted+`"`, "create_refund", `{"payment_intent":"pi_1","amount":1}`),
		`{"jsonrpc":"2.0","id":"COUNTERSIGN-x","method":"ping"}`,
		`{"jsonrpc":"2.0","id":"\u0063ountersign-x","method":"ping"}`,
		`{"jsonrpc":"2.0","id":"countersign","method":"ping"}`,
		`{"jsonrpc":"2.0","id":"` + minted + `","result":{}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"` + minted + `","reason":"x"}}`,
		// A Go server reads requestId under any case (found by a review).
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"RequestId":"` + minted + `"}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"REQUESTID":"` + minted + `"}}`,
	} {
		if p, err := ad.Parse(post(body)); !errors.Is(err, rail.ErrMalformed) {
			t.Errorf("Parse(%s) = %+v, %v; want malformed", body, p, err)
		}
	}
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":"counter-7","method":"ping"}`,
		`{"jsonrpc":"2.0","id":7,"method":"ping"}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`,
		callBody("7", "create_refund", `{"payment_intent":"pi_1","amount":1}`),
	} {
		if _, err := ad.Parse(post(body)); err != nil {
			t.Errorf("Parse(%s) = %v", body, err)
		}
	}
}

// TestAnswerIsBoundToItsCall: an answer counts for the call only when it
// names the id the call left with. Another request's (the agent's read
// under the agent's own id, handed to the call by a server that routes
// answers by id, or an earlier attempt's) is ambiguous, whatever it says:
// a -32601 for a method the server never had must not prove the tool
// never ran. An HTTP refusal is the exchange's own and keeps its meaning.
func TestAnswerIsBoundToItsCall(t *testing.T) {
	ad := mustNew(t, stripeWithMetadata())()
	applied := result(stripeRefund("re_3", "pi_1", 1500, stampA), false)
	notFound := rpcError(-32601, "Method not found", nil)
	invalid := rpcError(-32602, "Invalid arguments: payment not found", nil)
	declined := result(stripeErrText("card_error", "card_declined", "declined"), true)
	for _, tc := range []struct {
		name string
		resp rail.Response
		want rail.Outcome
	}{
		{"rejected under the call's id", jsonResp(200, withID(notFound, `"`+minted+`"`)), rail.Rejected},
		{"rejected under the call's id, escaped", jsonResp(200, withID(notFound, `"\u0063ountersign-`+stampA+`#1"`)), rail.Rejected},
		{"rejected in sse under the call's id", sseResp(event(progress) + event(withID(invalid, `"`+minted+`"`))), rail.Rejected},
		{"tool error under the call's id", jsonResp(200, withID(declined, `"`+minted+`"`)), rail.Rejected},
		{"applied under the call's id", jsonResp(200, withID(applied, `"`+minted+`"`)), rail.Applied},
		{"http 404 refusal", jsonResp(404, transportRefusal(-32001, "Session not found")), rail.Rejected},

		{"another request's id", jsonResp(200, withID(notFound, "7")), rail.Ambiguous},
		{"the id as a string of digits", jsonResp(200, withID(notFound, `"7"`)), rail.Ambiguous},
		{"another id, not found", jsonResp(200, withID(invalid, "99")), rail.Ambiguous},
		{"no id", jsonResp(200, withID(notFound, "null")), rail.Ambiguous},
		{"an earlier attempt's id", jsonResp(200, withID(notFound, `"`+CallIDPrefix+stampA+`#0"`)), rail.Ambiguous},
		{"another id in sse", sseResp(event(withID(invalid, "7"))), rail.Ambiguous},
		{"tool error under another id", jsonResp(200, withID(declined, "7")), rail.Ambiguous},
		{"applied under another id", jsonResp(200, withID(applied, "7")), rail.Ambiguous},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ad.Classify(refundPI, tc.resp).CheckCall(minted)
			if c.Outcome != tc.want {
				t.Fatalf("Classify then CheckCall = %s (%s); want %s", c.Outcome, c.Reason, tc.want)
			}
			if tc.want == rail.Ambiguous && strings.Contains(c.Reason, `7`) && !strings.Contains(c.Reason, minted) {
				t.Fatalf("the reason quotes the other id: %s", c.Reason)
			}
		})
	}
	// Without an id of Countersign's (a REST call, a reported answer)
	// nothing is checked.
	if c := ad.Classify(refundPI, jsonResp(200, notFound)).CheckCall(""); c.Outcome != rail.Rejected {
		t.Fatalf("CheckCall(\"\") = %s", c.Outcome)
	}
}

// TestReaddress: the answer naming the call's id is given the agent's id
// back, as a JSON body or in an SSE stream whose other bytes are kept;
// anything else is left as it came.
func TestReaddress(t *testing.T) {
	agent := json.RawMessage("7")
	ok := withID(result("done", false), `"`+minted+`"`)
	for _, tc := range []struct {
		name    string
		resp    rail.Response
		want    string
		changed bool
	}{
		{"json", jsonResp(200, ok), `{"id":7,"jsonrpc":"2.0","result":{"content":[{"text":"done","type":"text"}]}}`, true},
		{"json with space", jsonResp(200, " \n"+ok+"\n"), `{"id":7,"jsonrpc":"2.0","result":{"content":[{"text":"done","type":"text"}]}}`, true},
		{"sse after a progress event, lf",
			sseResp(": hi\n\n" + event(progress) + event(ok)),
			": hi\n\n" + event(progress) + event(`{"id":7,"jsonrpc":"2.0","result":{"content":[{"text":"done","type":"text"}]}}`), true},
		{"sse split data, cr", sseResp("data: {\"jsonrpc\":\"2.0\",\rdata: \"id\":\"" + minted + "\",\"result\":{}}\r\r: end\n"),
			"data: {\"id\":7,\"jsonrpc\":\"2.0\",\"result\":{}}\r\r: end\n", true},
		{"sse, unfinished event left", sseResp(event(ok) + "data: {\"jsonrpc\":\"2.0\",\"id\":\"" + minted + "\""),
			event(`{"id":7,"jsonrpc":"2.0","result":{"content":[{"text":"done","type":"text"}]}}`) + "data: {\"jsonrpc\":\"2.0\",\"id\":\"" + minted + "\"", true},
		{"another id", jsonResp(200, result("done", false)), result("done", false), false},
		{"sse, another id", sseResp(event(result("done", false))), event(result("done", false)), false},
		{"sse, only unfinished", sseResp("data: " + ok), "data: " + ok, false},
		{"other event type", sseResp("event: other\ndata: " + ok + "\n\n"), "event: other\ndata: " + ok + "\n\n", false},
		{"a request under the id", jsonResp(200, `{"jsonrpc":"2.0","id":"`+minted+`","method":"ping"}`), `{"jsonrpc":"2.0","id":"` + minted + `","method":"ping"}`, false},
		{"not json", jsonResp(502, "upstream gone"), "upstream gone", false},
		{"empty", jsonResp(200, ""), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, changed, err := Readdress(tc.resp, minted, agent)
			if err != nil || changed != tc.changed || string(got) != tc.want {
				t.Fatalf("Readdress = %q, %v, %v\nwant %q, %v", got, changed, err, tc.want, tc.changed)
			}
			if changed {
				// What the agent gets classifies as the server's answer did.
				before := mustNew(t, stripeWithMetadata())().Classify(refundPI, tc.resp)
				after := mustNew(t, stripeWithMetadata())().Classify(refundPI, rail.Response{Status: tc.resp.Status, Headers: tc.resp.Headers, Body: got})
				if before.Outcome != after.Outcome || after.CallID != "7" {
					t.Fatalf("re-addressed answer classifies as %s under %s; was %s", after.Outcome, after.CallID, before.Outcome)
				}
			}
		})
	}
	if _, _, err := Readdress(jsonResp(200, ok), minted, json.RawMessage("null")); err == nil {
		t.Fatal("re-addressed to a null id")
	}
}

// FuzzReaddress: whatever the server answers, Readdress never panics;
// what it leaves unchanged comes back byte for byte; what it changes names
// the agent's id where it named the call's, and names the call's id no
// more, and classifies as the server's answer did.
func FuzzReaddress(f *testing.F) {
	ok := withID(result("done", false), `"`+minted+`"`)
	for _, s := range []string{ok, event(progress) + event(ok), "data: x\r\n\r\n" + ok, withID(rpcError(-32601, "x", nil), `"`+minted+`"`), result("done", false)} {
		f.Add(s, true)
		f.Add(s, false)
	}
	ad := mustNew(f, stripeWithMetadata())()
	f.Fuzz(func(t *testing.T, body string, sse bool) {
		resp := jsonResp(200, body)
		if sse {
			resp = sseResp(body)
		}
		got, changed, err := Readdress(resp, minted, json.RawMessage(`"agent-1"`))
		if sse && errors.Is(err, ssepkg.ErrEventTooLong) {
			return // refused whole: the answer keeps the call's id, and CheckOwnAnswer withholds it
		}
		if err != nil {
			t.Fatalf("Readdress(%q): %v", body, err)
		}
		if !changed {
			if string(got) != body {
				t.Fatalf("unchanged, but %q became %q", body, got)
			}
			return
		}
		after := rail.Response{Status: 200, Headers: resp.Headers, Body: got}
		if _, again, _ := Readdress(after, minted, json.RawMessage(`"agent-1"`)); again {
			t.Fatalf("%q still names the call's id after re-addressing: %q", body, got)
		}
		b, a := ad.Classify(refundPI, resp), ad.Classify(refundPI, after)
		if b.Outcome != a.Outcome || b.CallID == `"`+minted+`"` && a.CallID != `"agent-1"` {
			t.Fatalf("%q: %s under %s before, %s under %s after (%q)", body, b.Outcome, b.CallID, a.Outcome, a.CallID, got)
		}
	})
}

// TestAFullRefundThatCannotBePinnedIsRefused: a full refund leaves for the
// amount it was valued and held at, written into the call; a refund tool
// that takes no amount, or refund tools naming it differently (so Stamp,
// which sees the action, has no one place for it), would leave it for
// whatever is refundable when the call arrives. Such a full refund is
// refused, naming why; one naming its amount passes (found by a review).
func TestAFullRefundThatCannotBePinnedIsRefused(t *testing.T) {
	for name, tools := range map[string]map[string]Tool{
		"a refund tool without an amount argument": {
			"refund_in_full": {Kind: sik.KindRefund, Subject: "payment_intent"},
		},
		"two refund tools naming the amount differently": {
			"create_refund":  {Kind: sik.KindRefund, Subject: "payment_intent", Amount: "amount"},
			"refund_payment": {Kind: sik.KindRefund, Subject: "payment_intent", Amount: "amount_minor"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := StripeDefaults()
			cfg.Tools = tools
			ad := mustNew(t, cfg)()
			for tool, spec := range tools {
				p, err := ad.Parse(post(callBody("7", tool, `{"payment_intent":"pi_1"}`)))
				if !errors.Is(err, rail.ErrMalformed) || !strings.Contains(err.Error(), "amount") {
					t.Errorf("tool %s: a full refund = %+v, %v; want refused, naming the amount", tool, p, err)
				}
				if spec.Amount == "" {
					continue
				}
				p, err = ad.Parse(post(callBody("8", tool, `{"payment_intent":"pi_1","`+spec.Amount+`":500}`)))
				if err != nil || p.Action.AmountMinor == nil || *p.Action.AmountMinor != 500 {
					t.Errorf("tool %s: a refund of 500 = %+v, %v; want it parsed", tool, p, err)
				}
			}
		})
	}
}
