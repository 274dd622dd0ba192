package mcp

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
)

// TestStripeDefaultsListNoPaymentIntentTool: list_payment_intents answers
// with whole PaymentIntents, each with its client_secret (found by a
// review), so the Stripe mapping does not list it read-only: a call of it
// is refused as not recognised. Every other read-only default stays, and
// an owner who lists it in ReadOnlyTools gets it as a read (its answer
// then goes through ext_proc's scrubbing, or is refused where no ext_proc
// sees it: engine.secretsUnscrubbed).
func TestStripeDefaultsListNoPaymentIntentTool(t *testing.T) {
	cfg := StripeDefaults()
	if slices.Contains(cfg.ReadOnlyTools, "list_payment_intents") {
		t.Fatalf("StripeDefaults lists list_payment_intents read-only: %v", cfg.ReadOnlyTools)
	}
	want := []string{"list_customers", "list_products", "list_prices", "list_invoices", "list_coupons",
		"list_subscriptions", "list_disputes", "list_payment_method_configs",
		"retrieve_balance", "search_stripe_documentation", "get_stripe_account_info"}
	if !slices.Equal(slices.Sorted(slices.Values(cfg.ReadOnlyTools)), slices.Sorted(slices.Values(want))) {
		t.Fatalf("StripeDefaults read-only tools = %v, want %v", cfg.ReadOnlyTools, want)
	}
	req := call("list_payment_intents", `{"limit":100}`)
	if p, err := mustNew(t, cfg)().Parse(req); !errors.Is(err, rail.ErrUnrecognised) {
		t.Fatalf("list_payment_intents under StripeDefaults parsed as %+v, %v; want ErrUnrecognised", p, err)
	}

	owner := StripeDefaults()
	owner.ReadOnlyTools = append(owner.ReadOnlyTools, "list_payment_intents")
	if p, err := mustNew(t, owner)().Parse(req); err != nil || p.Kind != rail.KindRead {
		t.Fatalf("list_payment_intents listed by the owner parsed as %+v, %v; want a read", p, err)
	}
}

// TestRazorpayDefaultsListNoPayoutListTool: fetch_all_payouts lists the
// payouts of any business account its account_number names (a REST payout
// list is held to payout_account_numbers), so it is no default read-only
// tool; nor is fetch_payment_card_details. An owner may list either.
func TestRazorpayDefaultsListNoPayoutListTool(t *testing.T) {
	cfg := RazorpayDefaults()
	for _, tool := range []string{"fetch_all_payouts", "fetch_payment_card_details"} {
		if slices.Contains(cfg.ReadOnlyTools, tool) {
			t.Errorf("RazorpayDefaults lists %s read-only", tool)
		}
		req := call(tool, `{"account_number":"1111222233334444"}`)
		if p, err := mustNew(t, cfg)().Parse(req); !errors.Is(err, rail.ErrUnrecognised) {
			t.Errorf("%s under RazorpayDefaults parsed as %+v, %v; want ErrUnrecognised", tool, p, err)
		}
	}
	if !slices.Contains(cfg.ReadOnlyTools, "fetch_payout_with_id") {
		t.Error("RazorpayDefaults no longer reads a payout by its id")
	}
}

// TestReadOnlyToolIDsAreIDs: a read-only tool's id arguments must be rail
// ids. Razorpay's server puts fetch_order's order_id and
// fetch_payment_link's payment_link_id into the rail's path unescaped
// (razorpay-go's Order.Fetch, PaymentLink.Fetch), so a path or a query in
// one read what the tool was not listed for (found by a review); other
// arguments are the server's to read.
func TestReadOnlyToolIDsAreIDs(t *testing.T) {
	rz := mustNew(t, RazorpayDefaults())()
	for _, tc := range []struct{ tool, args string }{
		{"fetch_order", `{"order_id":"../payments/pay_1/card"}`},
		{"fetch_order", `{"order_id":"order_1?expand[]=payments.card"}`},
		{"fetch_payment_link", `{"payment_link_id":"../payouts?account_number=1111222233334444"}`},
		{"fetch_order_payments", `{"Order_Id":"order_1/../../payments"}`},
		{"fetch_payment", `{"payment_id":""}`},
		{"fetch_payment", `{"payment_id":"pay_1%2F..%2Fx"}`},
		{"fetch_order", `[1]`},
		// Under another case (a Go server reads it as its id field).
		{"fetch_order", `{"ID":"../payments/pay_1/card"}`},
		{"fetch_order", `{"iD":"order_1?expand[]=payments.card"}`},
		{"fetch_order", `{"Order_ID":"../payouts"}`},
	} {
		if p, err := rz.Parse(call(tc.tool, tc.args)); !errors.Is(err, rail.ErrMalformed) {
			t.Errorf("%s %s parsed as %+v, %v; want it refused", tc.tool, tc.args, p, err)
		}
	}
	// Arguments under another case of the name (or with a long s) are read
	// by a Go server (mcp-go's CallToolParams decodes with encoding/json)
	// and would reach it unchecked: params holds only what Countersign
	// reads (found by a review).
	for _, member := range []string{"Arguments", "ARGUMENTS", "argumentſ", "task"} {
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fetch_order","` + member + `":{"order_id":"../payments/pay_1/card"}}}`
		if p, err := rz.Parse(post(body)); !errors.Is(err, rail.ErrMalformed) || !strings.Contains(err.Error(), "params."+member) {
			t.Errorf("%s parsed as %+v, %v; want params.%s refused", body, p, err, member)
		}
	}
	for _, tc := range []struct{ tool, args string }{
		{"fetch_order", `{"order_id":"order_IluGWxBm9U8zJ8"}`},
		{"fetch_all_payments", `{"count":10,"skip":0,"from":1700000000}`},
		{"fetch_payment", `{"payment_id":"pay_1"}`},
		{"fetch_payment", `null`},
	} {
		if p, err := rz.Parse(call(tc.tool, tc.args)); err != nil || p.Kind != rail.KindRead {
			t.Errorf("%s %s parsed as %+v, %v; want a read", tc.tool, tc.args, p, err)
		}
	}
	st := mustNew(t, StripeDefaults())()
	if p, err := st.Parse(call("search_stripe_documentation", `{"question":"how do I refund? see /docs/refunds?x=1 and ../api"}`)); err != nil || p.Kind != rail.KindRead {
		t.Errorf("a documentation search parsed as %+v, %v; want a read", p, err)
	}
}
