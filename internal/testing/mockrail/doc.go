// Package mockrail is a stateful, fault-injecting payment rail that speaks the
// Stripe and Razorpay subsets Countersign guards. It exists to prove "never
// two, never unknown forever": every effect that really happened is journaled,
// idempotency keys behave like the real rails (replay, 409 while running,
// mismatch error), and faults (timeout after apply, reset before apply, 5xx
// after apply, another entity's body, replica lag, latency) can be switched on
// globally or for the next N matching requests.
//
// A Server is an http.Handler: tests mount it on httptest.NewServer, the
// mockrail binary (cmd/mockrail) on a real listener.
//
// # Rails
//
// Which rail a request speaks is decided by its credential: a Stripe secret
// key (Bearer, or Basic with an empty password) or a Razorpay key pair (Basic
// key_id:key_secret). Only the configured keys open an account; anything else
// is a 401 in the rail's error shape. Paths both rails share (/v1/payouts,
// /v1/payouts/{id}, /v1/refunds, /v1/refunds/{id}) are dispatched by the
// credential.
//
// Stripe (form-encoded; unknown parameters are refused like Stripe does):
//
//	GET  /v1/payment_intents/{id}   [expand[]=latest_charge]
//	GET  /v1/charges/{id}
//	POST /v1/payment_intents/{id}/capture  amount_to_capture (absent = all), metadata[k]; status requires_capture only
//	POST /v1/charges/{id}/capture          amount (absent = all), metadata[k]
//	POST /v1/refunds                payment_intent|charge, amount (absent = all that is left), currency, reason, metadata[k]
//	GET  /v1/refunds                payment_intent, charge, limit (1-100, default 10), starting_after, ending_before, created[gt|gte|lt|lte]
//	GET  /v1/refunds/{id}
//	POST /v1/payouts                amount, currency, destination, method, description, metadata[k]
//	GET  /v1/payouts, /v1/payouts/{id}
//	POST /v1/payouts/{id}           metadata[k] only (destination and amount cannot change, as on Stripe)
//	POST /v1/payouts/{id}/cancel    pending payouts only; journaled as a payout_cancel effect
//	POST /v1/transfers              amount, currency, destination (acct_…), transfer_group, source_transaction, metadata[k]
//	GET  /v1/transfers, /v1/transfers/{id}
//
// Razorpay (JSON; unknown fields are refused; empty notes are written as []):
//
//	GET  /v1/payments/{id}
//	POST /v1/payments/{id}/refund       amount (absent = all that is left), notes, receipt, speed, currency
//	GET  /v1/payments/{id}/refunds      count (1-100, default 10), skip, from, to
//	GET  /v1/refunds                    every payment's refunds: count, skip, from, to
//	GET  /v1/payments/{id}/refunds/{rid}, /v1/refunds/{id}
//	POST /v1/payouts                    account_number, fund_account_id (fa_…), amount, currency (INR), mode, purpose, reference_id, narration, notes, queue_if_low_balance
//	GET  /v1/payouts?account_number=…   (required) fund_account_id, reference_id, mode, status, count, skip
//	GET  /v1/payouts/{id}
//
// # Connected accounts
//
// A payment with connected_account puts it on a connected (sub-merchant)
// account of its platform account, which then exists. A request naming it
// in Stripe-Account (acct_…) or X-Razorpay-Account (acc_…) acts on that
// account's own payments, entities and idempotency keys, and its effects
// carry connected_account; naming an unknown one is refused (Stripe 403
// account_invalid, Razorpay 401).
//
// Lists are newest first. Stripe pages by cursor; Razorpay by offset, so an
// insert between two page requests shifts the later pages.
//
// # Idempotency
//
// Keys are scoped per account (API key): Stripe Idempotency-Key (at most 255
// characters) shares one namespace across endpoints; Razorpay
// X-Refund-Idempotency (10+ of [A-Za-z0-9_-]) and X-Payout-Idempotency (4-36
// of them) each have their own. The first response of a key is saved once
// execution begins (2xx, business 4xx, fault 5xx) and replayed for the same
// parameters, with Idempotent-Replayed: true (Stripe) and
// X-Mockrail-Replayed: true (both). A key still running answers 409 (Stripe
// code idempotency_key_in_use); the same key with other parameters answers 400
// (Stripe type idempotency_error; Razorpay "Different request with the same
// idempotency key has already been processed."). Parameter validation errors
// and 401s are not saved. Keys are forgotten after the idempotency TTL
// (default 24 h, on the Server's clock). Requests without a key are never
// deduplicated.
//
// # Control API
//
// Under /_mock/, never faulted, never journaled, unauthenticated:
//
//	GET  /_mock/healthz    {"status":"ok"}
//	POST /_mock/payments   Payment JSON → 201 Payment (409 if an id exists)
//	GET  /_mock/payments   {"payments":[Payment…]}
//	POST /_mock/accounts   Account JSON → 201 (409 if the name or key exists)
//	GET  /_mock/accounts   {"accounts":[Account…]}
//	POST /_mock/fault      a Fault, or {"rules":[Fault…]}: replaces the rules → {"rules":[…]}
//	GET  /_mock/fault      {"rules":[…]} (count = uses left)
//	GET  /_mock/journal    Journal: {"effects":[Effect…],"requests":[RequestRecord…]}
//	POST /_mock/reset      204: forget state, restore the initial payments and faults
//
// Control errors are {"error":"…"} with 400 (or 409 for duplicates).
package mockrail
