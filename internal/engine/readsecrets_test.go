package engine

import (
	"context"
	"testing"
)

// TestPaymentIntentReadNeedsExtProc: a Stripe PaymentIntent's answer
// carries its client_secret, which only ext_proc removes, so the read is
// refused where no ext_proc will see the answer (a native caller's, ext_proc
// out of the path, a route naming no rail account: found by a review), and
// allowed where one will; a refund list's answer carries none and is
// allowed either way.
func TestPaymentIntentReadNeedsExtProc(t *testing.T) {
	for _, tc := range []struct {
		name        string
		source      Source
		extProc     bool
		railAccount string
		path        string
		want        string
	}{
		{"ext_proc in the path", SourceExtAuthz, true, "acct_1", "/v1/payment_intents/pi_1", ReasonReadAllowed},
		{"ext_proc out of the path", SourceExtAuthz, false, "acct_1", "/v1/payment_intents/pi_1", ReasonReadNeedsExtProc},
		{"a route naming no rail account", SourceExtAuthz, true, "", "/v1/payment_intents/pi_1", ReasonReadNeedsExtProc},
		{"a native caller", SourceDecide, true, "acct_1", "/v1/payment_intents/pi_1", ReasonReadNeedsExtProc},
		{"a refund list without ext_proc", SourceExtAuthz, false, "acct_1", "/v1/refunds?limit=3", ReasonReadAllowed},
		// A charge carries the card's and its holder's details, which only
		// ext_proc removes (found by a review).
		{"a charge with ext_proc", SourceExtAuthz, true, "acct_1", "/v1/charges/ch_1", ReasonReadAllowed},
		{"a charge without ext_proc", SourceExtAuthz, false, "acct_1", "/v1/charges/ch_1", ReasonReadNeedsExtProc},
		{"a charge for a native caller", SourceDecide, true, "acct_1", "/v1/charges/ch_1", ReasonReadNeedsExtProc},
		{"a refund without ext_proc", SourceExtAuthz, false, "acct_1", "/v1/refunds/re_1", ReasonReadAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.e.opts.ExtProcInPath = tc.extProc
			req := r.refund()
			req.Method, req.Path, req.Body, req.Headers = "GET", tc.path, nil, map[string]string{}
			req.Source, req.RailAccount = tc.source, tc.railAccount
			if out := r.e.Decide(context.Background(), req); out.ReasonCode != tc.want {
				t.Fatalf("%s: %s %s: %s; want %s", tc.path, out.Verdict, out.ReasonCode, out.Reason, tc.want)
			}
		})
	}
}

// TestMCPToolReadNeedsExtProc: on an MCP server that fronts Stripe, a
// read-only tool's answer is the rail's objects as the server renders
// them (list_payment_intents, which an owner may list read-only, renders
// whole PaymentIntents, client_secret included: found by a review), and
// only ext_proc removes the secrets, so a read-only tools/call is refused
// where no ext_proc will see its answer, and allowed where one will; the
// session's other reads (initialize, ping) carry no rail object and are
// allowed either way.
func TestMCPToolReadNeedsExtProc(t *testing.T) {
	const (
		toolCall   = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"retrieve_balance","arguments":{}}}`
		ping       = `{"jsonrpc":"2.0","id":1,"method":"ping"}`
		initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"agent","version":"1"}}}`
	)
	for _, tc := range []struct {
		name        string
		body        string
		source      Source
		extProc     bool
		railAccount string
		want        string
	}{
		{"tool call, ext_proc in the path", toolCall, SourceExtAuthz, true, "acct_mcp", ReasonReadAllowed},
		{"tool call, ext_proc out of the path", toolCall, SourceExtAuthz, false, "acct_mcp", ReasonReadNeedsExtProc},
		{"tool call, a route naming no rail account", toolCall, SourceExtAuthz, true, "", ReasonReadNeedsExtProc},
		{"tool call, a native caller", toolCall, SourceDecide, true, "acct_mcp", ReasonReadNeedsExtProc},
		{"ping without ext_proc", ping, SourceExtAuthz, false, "acct_mcp", ReasonReadAllowed},
		{"initialize from a native caller", initialize, SourceDecide, true, "acct_mcp", ReasonReadAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newMCPRig(t, nil)
			r.e.opts.ExtProcInPath = tc.extProc
			req := r.call(1, "create_refund", 1)
			req.Body, req.Source, req.RailAccount = []byte(tc.body), tc.source, tc.railAccount
			out := r.e.Decide(context.Background(), req)
			if out.ReasonCode != tc.want {
				t.Fatalf("%s %s: %s; want %s", out.Verdict, out.ReasonCode, out.Reason, tc.want)
			}
			if tc.want == ReasonReadNeedsExtProc && (out.Verdict == Allow || out.SetHeaders["authorization"] != "") {
				t.Fatalf("refused as %s, yet %s with the rail key set: %v", out.ReasonCode, out.Verdict, out.SetHeaders["authorization"] != "")
			}
		})
	}
}

// TestRazorpayPaymentReadNeedsExtProc: a Razorpay payment's answer
// carries its payer's UPI address, which only ext_proc removes: read
// where ext_proc sees the answer, refused where none will; its refund
// list carries none.
func TestRazorpayPaymentReadNeedsExtProc(t *testing.T) {
	for _, tc := range []struct {
		extProc bool
		path    string
		want    string
	}{
		{true, "/v1/payments/pay_1", ReasonReadAllowed},
		{false, "/v1/payments/pay_1", ReasonReadNeedsExtProc},
		{false, "/v1/payments/pay_1/refunds", ReasonReadAllowed},
	} {
		r := newRazorpayRig(t)
		r.e.opts.ExtProcInPath = tc.extProc
		req := Request{Source: SourceExtAuthz, RequestID: "req", Credential: r.secret, Method: "GET", Host: "api.razorpay.com",
			Path: tc.path, RailAccount: "rzp_1"}
		if out := r.e.Decide(context.Background(), req); out.ReasonCode != tc.want {
			t.Errorf("%s (ext_proc %v): %s %s: %s; want %s", tc.path, tc.extProc, out.Verdict, out.ReasonCode, out.Reason, tc.want)
		}
	}
}
