package mandate

// validYAML is a mandate using every field. Line numbers matter: the
// rejection cases replace one line and expect the problem on it.
const validYAML = `rail: stripe
rail_account: acct_1Nv0FGQ9RKHgCVdK
agent_id: agt_k3v9q2m1x7c4b8n6z5wd
purpose: Refunds and supplier payouts
valid_from: 2026-01-01T00:00:00Z
valid_until: 2026-04-01T00:00:00Z
mode: budgeted
grants:
  - action_kind: refund
    max_amount_minor: 50000
    currencies: [USD]
  - action_kind: payout
    min_amount_minor: 100
    max_amount_minor: 1000000
    currencies: [USD, EUR]
    reversible: true
allowed_payees: [ba_1001, ba_1002]
budgets:
  - {amount_minor: 5000000, currency: USD}
windows:
  - scope: agent
    duration: 24h
    max_amount: {amount_minor: 2500000, currency: USD}
  - scope: payee
    duration: 7d
    max_calls: 3
fee_budget: {amount_minor: 10000, currency: USD}
recurrence_limit: 2
idempotency:
  - action_kind: refund
  - action_kind: payout
    window: 24h
provenance:
  rail_host: api.stripe.com
  api_version: "2024-06-20"
advisory:
  enabled: true
  gates: [first_payee]
approval_ttl: 1h
free_text: hold
`
