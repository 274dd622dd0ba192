package gate

import (
	"time"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/sik"
)

// Input is everything one decision needs, resolved and loaded before the
// gates run: the engine fills the request, credential and referent facts,
// the ledger fills Usage and the other ledger facts inside the deciding
// transaction (see the package doc: G3's facts must be read under the
// budget row lock, B1). Amounts are integer minor units of Action.Currency.
type Input struct {
	// Now is the decision time; the gates never read a clock.
	Now        time.Time
	Credential Credential
	Agent      Agent

	// Mandate is the agent's mandate for RailAccount; nil when it has none.
	Mandate        *countersignv1.Mandate
	MandateHash    string // hash of the mandate's canonical form, for reasons
	MandateRevoked bool

	RailAccount string
	Rail        sik.Rail // "stripe", "razorpay" or "mcp"
	Host        string   // API host the request goes to (any port is ignored)
	APIVersion  string   // version the request carries (Stripe-Version), "" if none
	// MCP: the rail account is reached through an MCP server (its Rail is
	// the underlying rail's). MCPTool names the tools/call tool ("" for a
	// request that names none), and MCPToolDescriptionHash is
	// mcp.DescriptionHash of its description as Countersign itself read it
	// from the server's tools/list for this decision ("" if not read);
	// never a value the agent supplied. MCPToolEntryHash and
	// MCPToolsListHash are mcp.EntryHash of the tool's whole entry and
	// mcp.ListHash of the whole list, from the same read ("" if not read,
	// or if the server's JSON has no RFC 8785 canonical form).
	MCP                    bool
	MCPTool                string
	MCPToolDescriptionHash string
	MCPToolEntryHash       string
	MCPToolsListHash       string

	Action   Action
	Referent Referent
	// LedgerOutstandingMinor is what the ledger holds against Action.Subject
	// that the rail's RefundableMinor does not yet reflect: refunds
	// IN_FLIGHT, UNKNOWN or RECONCILING, and APPLIED ones the rail's read
	// has not caught up with. G2 subtracts it from the refundable balance.
	LedgerOutstandingMinor int64
	Usage                  Usage
	// PayeeSeenBefore: the ledger has an APPLIED payout or transfer to
	// Action.Payee on this rail account (the new_payee advisor's fact).
	PayeeSeenBefore bool

	// Fingerprint identifies this exact request. ApprovedFingerprint is the
	// fingerprint of the unused owner approval the ledger found for it (""
	// if none), usable until ApprovalExpiresAt. A matching, unexpired
	// approval lifts the HOLDs that wait for the owner (propose-only
	// credential, approval_required mode, advisory holds); it never lifts a
	// BLOCK, so an approval cannot widen the mandate.
	Fingerprint         string
	ApprovedFingerprint string
	ApprovalExpiresAt   time.Time
	// Labels is the canonical JSON (RFC 8785) of this request's label
	// members ("{}" or "" for none); ApprovedLabels is that of the request
	// the approval covers. The SIK leaves labels out (one refund is one
	// refund whatever its metadata says), but an approval covers the exact
	// request: other labels are not the approved request.
	Labels         string
	ApprovedLabels string
	// FreeText names, in order, the label members that carry free text
	// (the mandate's free_text policy applies to them).
	FreeText []string
}

// Credential is the agent credential that presented the request.
type Credential struct {
	ID        string
	Scope     credential.Scope // propose or execute
	ExpiresAt time.Time
	Revoked   bool
}

// Agent is the agent the credential belongs to.
type Agent struct {
	ID      string
	Revoked bool
}

// Action is the money-moving action after resolution and valuation.
type Action struct {
	Kind    sik.Kind // refund, payout, transfer
	Subject string   // the referent's own id (pay_…, pi_…, the destination)
	// AmountMinor is the action's value: the requested amount, or for a
	// full refund the refundable balance it was valued at.
	AmountMinor int64
	FullRefund  bool   // the request named no amount
	Currency    string // the request's, or the referent's when it named none
	Payee       string // destination of a payout/transfer; "" for refunds
	// Reversible: the rail can still reverse this action (e.g. a queued
	// payout); a grant marked reversible permits only such actions.
	Reversible bool
	// Extra is the rail's key members beyond amount, currency and subject
	// (sik.Action.Extra: a Razorpay refund's speed, a payout's mode), as
	// the adapter keyed them; nil when the caller did not fill it.
	Extra map[string]string
}

// Referent is the action's subject as read from the rail.
type Referent struct {
	AmountMinor     int64 // captured amount (refunds)
	RefundableMinor int64 // still refundable according to the rail (refunds)
	Currency        string
	Payee           string
}

// Usage is what already counts against the mandate's limits, computed by
// the ledger in the deciding transaction. Holds count while reserved or
// posted (UNKNOWN included); voided holds and HELD intents still waiting
// for approval do not (an approved one is re-checked when it executes).
type Usage struct {
	// Windows[i] counts against Mandate.Windows[i]: same order and length,
	// each filled for the WindowSpec that [WindowSpecs] returns for it.
	Windows []WindowUsage
	// BudgetHeldMinor and BudgetSpentMinor are the mandate's reserved and
	// posted holds in Action.Currency.
	BudgetHeldMinor  int64
	BudgetSpentMinor int64
	// FeeSpentMinor is the fees the rail reported on the mandate's applied
	// actions, in the fee budget's currency.
	FeeSpentMinor int64
	// SubjectActions is how many of the mandate's actions on Action.Subject
	// are reserved or posted (the recurrence limit's count).
	SubjectActions int64
}

// WindowUsage is what one sliding window already holds.
type WindowUsage struct {
	WindowSpec
	Calls       int64 // actions counted
	AmountMinor int64 // their total in WindowSpec.Currency
}
