// Package sik derives semantic idempotency keys (SIKs) and the stamps that
// carry them to payment rails.
//
// Caller-supplied idempotency keys prove nothing: agents mint a fresh UUID on
// every retry and Stripe's SDKs add a random Idempotency-Key to every POST. A
// SIK is therefore computed from the meaning of the action:
//
//	sik = base32(sha256(JCS(action)))[:32]
//
// where JCS is RFC 8785 canonical JSON and action is the [Action] struct.
// The SIK is the ledger's primary key with the rail account, so two
// proposals with the same meaning resolve to one intent.
//
// Rules the fields encode:
//
//   - Subject is a rail entity id resolved by Countersign (payment, charge,
//     payout target), never free text from the model.
//   - AmountMinor is resolved before keying: a refund without an amount is a
//     full refund and is keyed at the refundable balance.
//   - AmountMinor is at most 2^53-1: JCS writes numbers as IEEE 754 doubles,
//     and a larger integer could share a canonical form with its neighbour.
//   - Refunds have no time window: Window is empty, and [Action.Validate]
//     refuses one on Action "refund". Two identical refunds on one payment
//     are the same action whether 5 seconds or 5 days apart.
//   - Distinct is the only way to make a second identical action. It is a
//     reason, logged verbatim in the audit, not a nonce.
//
// A stamp is the value written into the rail's idempotency header (and into
// the request body's metadata/notes, because neither rail shows the
// idempotency key on the refund object). Generation 0 is the SIK itself;
// the generation increments only when a FAILED_TERMINAL intent is reopened,
// because Stripe stores 4xx results under a key and a reopened action needs a
// new one. See [Stamp] for the encoding.
//
// The package is pure: no I/O, no clocks, no randomness.
package sik
