// Package mandate turns an owner's mandate between its YAML form, the
// countersign.v1.Mandate proto and its canonical, hashed form.
//
// # Identity
//
// A mandate is identified by [Hash]: the lower-case hex SHA-256 of its
// [Canonical] form, which is the RFC 8785 (JCS) canonical JSON of the
// mandate's protojson encoding (proto field names, unpopulated fields left
// out). The hash identifies the policy, not the file: comments, key order,
// quoting and the order of set-like lists (allowed payees, grants, currencies,
// budgets, windows, idempotency settings) do not change it, while any change
// to what the mandate permits does. Mandates are immutable, so a changed
// policy is a new mandate with a new hash; the old one stays on record (and
// should be revoked) because decisions taken under it name it.
//
// Because the canonical form spells fields and enum values by their proto
// names, the Mandate schema may grow (a new field left unset does not change
// any existing hash) but a field or enum value must never be renamed or
// removed: stored mandates would change identity or stop decoding in
// [FromCanonical]. Reserve retired names instead.
//
// # The YAML form
//
// Keys are the proto field names. Values:
//
//   - enums are their short lower-case names: rail stripe|razorpay|mcp, mode
//     approval_required|budgeted, action_kind refund|payout|transfer, scope
//     agent|payee;
//   - timestamps are RFC 3339 with a zone (2026-01-01T00:00:00Z), at most
//     microsecond precision;
//   - durations are Go durations (24h, 90m) or whole days (7d);
//   - amounts (every *_minor field) are plain decimal integers in the
//     currency's minor units: 1250 for 12.50. A float (12.50), a quoted string
//     ("1250"), an exponent (1e3), hex, octal or underscores are rejected, so
//     that no amount is ever rounded or guessed;
//   - money is a mapping {amount_minor, currency}.
//
// Unknown keys, duplicate keys, wrong types, anchors and aliases, and more
// than one YAML document are errors. Every [Problem] carries the field path
// and the line and column it was found at.
//
// A minimal mandate:
//
//	rail: stripe
//	rail_account: acct_1Nv0FGQ9RKHgCVdK
//	agent_id: agt_k3v9q2m1x7c4b8n6z5wd
//	purpose: Refund duplicate charges reported to support
//	valid_from: 2026-01-01T00:00:00Z
//	valid_until: 2026-04-01T00:00:00Z
//	mode: budgeted
//	grants:
//	  - action_kind: refund
//	    max_amount_minor: 50000
//	    currencies: [USD]
//	windows:
//	  - scope: agent
//	    duration: 24h
//	    max_amount: {amount_minor: 200000, currency: USD}
//
// [Parse] validates with the proto's protovalidate rules and with the
// semantic checks the proto cannot express (see [Validate]).
package mandate
