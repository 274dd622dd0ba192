package mcp

import (
	"github.com/countersign/countersign/internal/rail/razorpay"
	"github.com/countersign/countersign/internal/rail/stripe"
	"github.com/countersign/countersign/internal/sik"
)

// DefaultEndpoint is the streamable HTTP path the shipped configurations
// expect; change Config.Endpoint to the server's own.
const DefaultEndpoint = "/mcp"

// StripeDefaults maps the tools of Stripe's MCP server as published in
// github.com/stripe/agent-toolkit (npm @stripe/mcp, which serves the
// toolkit's tools; it speaks stdio, so it runs behind a streamable HTTP
// bridge or inside a host's own HTTP server).
//
// What the source says (typescript/src/shared/refunds/createRefund.ts,
// typescript/src/modelcontextprotocol/toolkit.ts, typescript/src/shared/api.ts):
//
//   - create_refund is the only tool that moves money out. Its zod schema
//     declares payment_intent (string) and amount (int, optional: a full
//     refund when omitted); its description also offers reason, which the
//     schema does not declare, so the MCP SDK may strip it before Stripe
//     sees it. reason is a label (DESIGN §3), accepted and left out of the
//     SIK as the REST adapter leaves it, so one refund has one SIK by
//     either path.
//   - It takes no metadata: nothing can be stamped, and an ambiguous
//     outcome cannot be proven absent (docs/mcp.md says what to do).
//   - It calls stripe.refunds.create with no idempotency key of its own
//     (the Stripe Node SDK may add a random one, which protects only its
//     own network retries), and a stdio tool never sees the HTTP
//     request's Idempotency-Key header.
//   - Success is text content JSON.stringify({id, status, amount}); any
//     failure is the text "Failed to create refund" with isError unset.
//   - charge, refund_application_fee, reverse_transfer and Stripe-Account
//     (the toolkit's --stripe-account) are not arguments, so they are
//     refused if sent.
//
// Read-only tools are those whose source performs only list or retrieve
// calls: list_customers, list_products, list_prices, list_invoices,
// list_coupons, list_subscriptions, list_disputes,
// list_payment_method_configs, retrieve_balance and
// search_stripe_documentation. get_stripe_account_info is not in the
// toolkit source; it appears in third-party listings of Stripe's hosted
// server (mcp.stripe.com) and is read-only by every account of it.
//
// list_payment_intents is read-only too, but not listed (found by a
// review): its answer is every PaymentIntent JSON.stringify'd whole into
// text content, each with its client_secret, which with the account's
// publishable key confirms the PaymentIntent without Countersign. Listed
// by an owner (Config.ReadOnlyTools), it is a read like the others:
// ext_proc then empties every value holding a client secret (the whole
// text item), and where no ext_proc sees the answer the engine refuses
// any read-only tools/call on a Stripe MCP account.
//
// Not confirmed, so not mapped: the hosted server's own create_refund
// arguments (third-party notes say its tools also take stripe_context and
// livemode, which this mapping refuses) and its generic stripe_api_write,
// which names the API operation in an argument; an unmapped tool is
// refused. Writes that move no money out (create_customer,
// create_payment_link, finalize_invoice, cancel_subscription, …) are
// refused too until an owner lists them in ReadOnlyTools.
func StripeDefaults() Config {
	return Config{
		Rail:     sik.RailStripe,
		Endpoint: DefaultEndpoint,
		Tools: map[string]Tool{
			"create_refund": {Kind: sik.KindRefund, Subject: "payment_intent", Amount: "amount", Ignored: []string{"reason"}},
		},
		ReadOnlyTools: []string{
			"list_customers", "list_products", "list_prices", "list_invoices", "list_coupons",
			"list_subscriptions", "list_disputes", "list_payment_method_configs",
			"retrieve_balance", "search_stripe_documentation", "get_stripe_account_info",
		},
		Underlying: stripe.New(),
	}
}

// RazorpayDefaults maps the tools of Razorpay's official MCP server,
// github.com/razorpay/razorpay-mcp-server (Go). It speaks stdio, legacy
// HTTP+SSE (`sse`: the result arrives on a separate GET stream, which
// Countersign cannot tie to the call, so do not use it) and `http`: plain
// JSON-RPC POSTs on any path, answering tools/list and tools/call only,
// with the rail key per request as Authorization: Bearer
// base64(key_id:key_secret). Run stdio behind a streamable HTTP bridge for
// a full MCP session, or `http` for clients that skip initialize.
//
// What the source says (pkg/razorpay/refunds.go, pkg/razorpay/tools.go,
// pkg/razorpay/payouts.go, and razorpay-go's Payment.Refund):
//
//   - create_refund takes payment_id (string, required), amount (number),
//     speed (string; Razorpay's default "normal"), notes (object) and
//     receipt (string, the merchant's own reference). notes reaches the
//     refund entity, so the stamp goes to notes.countersign_sik.
//   - An omitted amount is sent to Razorpay as amount 0 (razorpay-go sets
//     data["amount"] unconditionally), not left out, so "omitted" does not
//     mean "full refund" here: the amount is required.
//   - Success is text content holding the refund entity's JSON (with
//     notes); failure is isError text "creating refund failed: <the
//     rail's description>", without Razorpay's error code, so failures are
//     Ambiguous unless the text carries the code, and the reconciler
//     settles them by the notes stamp.
//   - The server has no payout-creating tool: its payouts toolset is
//     read-only (fetch_payout_with_id, fetch_all_payouts). The README names
//     the first fetch_payout_by_id; both names are listed read-only.
//
// Read-only tools are the fetch_* tools of tools.go. Writes that move no
// money out (capture_payment, create_order, create_payment_link,
// create_qr_code, …) are refused until an owner lists them; update_refund
// must never be listed: it rewrites a refund's notes, and with them the
// stamp. create_instant_settlement moves money to the merchant and is not
// a refund, payout or transfer, so it is refused.
func RazorpayDefaults() Config {
	return Config{
		Rail:     sik.RailRazorpay,
		Endpoint: DefaultEndpoint,
		Tools: map[string]Tool{
			"create_refund": {
				Kind: sik.KindRefund, Subject: "payment_id", Amount: "amount", AmountRequired: true,
				Metadata: "notes", Extra: []string{"speed"}, Defaults: map[string]string{"speed": "normal"},
				Values:  map[string][]string{"speed": {"normal", "optimum"}},
				Ignored: []string{"receipt"},
			},
		},
		ReadOnlyTools: []string{
			// Not fetch_payment_card_details: the cardholder's name,
			// network, issuer and last digits, which a REST read's
			// expand[]=card is refused for (an owner may list it).
			"fetch_payment", "fetch_all_payments",
			"fetch_payment_link", "fetch_all_payment_links",
			"fetch_order", "fetch_all_orders", "fetch_order_payments",
			"fetch_refund", "fetch_all_refunds", "fetch_multiple_refunds_for_payment", "fetch_specific_refund_for_payment",
			"fetch_qr_code", "fetch_all_qr_codes", "fetch_qr_codes_by_customer_id", "fetch_qr_codes_by_payment_id", "fetch_payments_for_qr_code",
			"fetch_all_settlements", "fetch_settlement_with_id", "fetch_settlement_recon_details",
			"fetch_all_instant_settlements", "fetch_instant_settlement_with_id",
			// Not fetch_all_payouts: it lists the payouts of whatever
			// business account its account_number names, which a REST
			// payout list is refused for when the rails file lists
			// payout_account_numbers (found by a review; an owner may list
			// it).
			"fetch_payout_with_id", "fetch_payout_by_id",
		},
		Underlying: razorpay.New(),
	}
}
