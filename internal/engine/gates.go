package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/gate"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/mandate"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// gateRun is what the gate ladder needs: the proposal, and the server's
// advisors and mandate cache.
type gateRun struct {
	*proposal
	advisors []gate.Advisor
	mandates *mandateCache
	tracer   trace.Tracer
	// maxPending bounds the agent's approvals pending at once (0: none).
	maxPending int
}

// mandateCache keeps decoded mandates by hash: a mandate never changes, so
// its canonical bytes are decoded once per process.
type mandateCache struct{ m sync.Map }

func (c *mandateCache) get(rec ledger.MandateRecord) (*countersignv1.Mandate, error) {
	if v, ok := c.m.Load(rec.Hash); ok {
		return v.(*countersignv1.Mandate), nil
	}
	m, err := mandate.FromCanonical(rec.Canonical)
	if err != nil {
		return nil, fmt.Errorf("mandate %s: %w", rec.Hash, err)
	}
	c.m.Store(rec.Hash, m)
	return m, nil
}

// ladder runs the gates inside the deciding transaction: the mandate is
// share-locked, its lineage's lock is taken (so no other decision under it,
// or under another mandate of the agent on the account, whose windows count
// each other's holds, reads usage until this one commits, B1), the usage is
// counted, and the pure gates decide.
func (g gateRun) ladder(ctx context.Context, tx *ledger.Tx, it ledger.Intent) (verdict, error) {
	in := g.input(it.Subject, it.Canonical)
	approval, hasApproval, err := tx.LiveApproval(ctx, it.Key)
	if err != nil {
		return verdict{}, err
	}
	rec, err := tx.LatestMandate(ctx, g.principal.Agent.ID, g.acct.ID, g.now)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return g.evaluate(ctx, in), nil
	case err != nil:
		return verdict{}, err
	}
	m, err := g.mandates.get(rec)
	if err != nil {
		return verdict{}, err
	}
	withMandate(&in, rec, m)
	approved := g.withApproval(&in, approval, hasApproval, rec.Hash)
	// Only limits that accumulate need the decisions under a mandate to
	// take turns; a mandate of grants alone decides in parallel.
	if stateful(m) {
		if err := tx.LockMandateLineage(ctx, rec.Hash); err != nil {
			return verdict{}, err
		}
	}
	if err := g.usage(ctx, tx, rec.Hash, it, &in); err != nil {
		return verdict{}, err
	}
	v := g.evaluate(ctx, in)
	v.Approval = ledger.ApprovalSpec{AgentID: g.principal.Agent.ID, MandateHash: rec.Hash, TTL: m.GetApprovalTtl().AsDuration(), Gates: v.Gates, Labels: in.Labels,
		MaxPending: g.maxPending}
	if v.Verdict != Allow {
		return v, nil
	}
	v.UsesApproval = approved
	v.Hold = g.holdSpec(rec.Hash, m, in.Action)
	return v, nil
}

// withApproval puts into in the intent's live approval, if the ladder may
// use it, and reports whether it is an approval given and still usable.
// It may when it is the asking agent's and was opened under the mandate in
// force (hash). Another agent's: the owner approved that agent's request,
// under its mandate, and only it may use the approval (a sibling sending
// the identical request waits for an approval of its own). One opened
// under a mandate since replaced: the owner decided under that mandate's
// limits and usage, and it would live that mandate's approval lifetime, so
// the request is held afresh under the new one, whose approval replaces it
// (Tx.OpenApproval). Before, an approval given, or still pending, under a
// replaced mandate lifted the hold under the new one, for as long as the
// old one let approvals live (found by a review).
func (g gateRun) withApproval(in *gate.Input, a ledger.Approval, found bool, hash string) (approved bool) {
	if !found || a.AgentID != g.principal.Agent.ID || a.MandateHash != hash {
		return false
	}
	switch a.State {
	case "approved":
		in.ApprovedFingerprint, in.ApprovalExpiresAt, in.ApprovedLabels = a.Fingerprint, a.ExpiresAt, a.Labels
		return true
	case "expired":
		// Approved, but it ran out (by the ledger's clock) before this
		// request came back: the gates say so. Its expiry is taken as no
		// later than now, so it can never lift the hold.
		in.ApprovedFingerprint, in.ApprovalExpiresAt, in.ApprovedLabels = a.Fingerprint, minTime(a.ExpiresAt, g.now), a.Labels
	}
	return false
}

// input is the gate input of the action on subject, before the mandate and
// what the ledger counts.
func (g gateRun) input(subject, canonical string) gate.Input {
	in := principalInput(g.now, g.principal, g.acct)
	in.Host, in.APIVersion = g.railHost(), g.req.Headers["stripe-version"]
	_, in.MCP = g.acct.Adapter.(rail.ToolDescriber)
	in.MCPTool, in.MCPToolDescriptionHash = g.tool, g.toolHash.Description
	in.MCPToolEntryHash, in.MCPToolsListHash = g.toolHash.Entry, g.toolHash.List
	in.Action = gate.Action{Kind: g.action.Kind, Subject: subject, AmountMinor: g.value, FullRefund: g.action.AmountMinor == nil,
		Currency: g.currency, Payee: g.action.Payee, Reversible: reversible(g.acct, g.action), Extra: g.action.Extra}
	in.Referent = gate.Referent{AmountMinor: g.ref.AmountMinor, RefundableMinor: g.ref.RefundableMinor, Currency: g.ref.Currency, Payee: g.ref.Payee}
	in.Fingerprint = ledger.Fingerprint(canonical)
	in.Labels, in.FreeText = rail.CanonicalLabels(g.action.Labels), rail.FreeTextMembers(g.action.Labels)
	return in
}

// holdSpec is the budget hold an ALLOW under the mandate places.
func (g gateRun) holdSpec(hash string, m *countersignv1.Mandate, a gate.Action) *ledger.HoldSpec {
	h := &ledger.HoldSpec{MandateHash: hash, AgentID: g.principal.Agent.ID, PayeeKey: payeeKey(a),
		Currency: g.currency, AmountMinor: g.value}
	for _, b := range m.GetBudgets() {
		if b.GetCurrency() == g.currency {
			h.BudgetMinor = b.GetAmountMinor()
		}
	}
	h.NoAgentWindow, h.NoPayeeWindow = true, true
	for _, w := range m.GetWindows() {
		if w.GetScope() == countersignv1.WindowScope_WINDOW_SCOPE_PAYEE {
			h.NoPayeeWindow = false
		} else {
			h.NoAgentWindow = false
		}
	}
	return h
}

// usage counts what G2, G3 and G5 compare against.
func (g gateRun) usage(ctx context.Context, tx *ledger.Tx, hash string, it ledger.Intent, in *gate.Input) error {
	for _, spec := range gate.WindowSpecs(*in) {
		calls, amount, err := tx.WindowUsage(ctx, hash, spec.Scope == countersignv1.WindowScope_WINDOW_SCOPE_PAYEE, spec.Key, spec.Since, spec.Currency)
		if err != nil {
			return err
		}
		in.Usage.Windows = append(in.Usage.Windows, gate.WindowUsage{WindowSpec: spec, Calls: calls, AmountMinor: amount})
	}
	var err error
	m := in.Mandate
	if len(m.GetBudgets()) > 0 {
		if in.Usage.BudgetHeldMinor, in.Usage.BudgetSpentMinor, err = tx.BudgetUsage(ctx, hash, g.currency); err != nil {
			return err
		}
	}
	if m.GetFeeBudget() != nil {
		if in.Usage.FeeSpentMinor, err = tx.FeeSpent(ctx, hash); err != nil {
			return err
		}
	}
	if m.GetRecurrenceLimit() > 0 {
		if in.Usage.SubjectActions, err = tx.SubjectActions(ctx, hash, it.Subject); err != nil {
			return err
		}
	}
	if g.action.Kind == sik.KindRefund {
		if err := tx.LockSubject(ctx, g.acct.ID, it.Subject); err != nil {
			return err
		}
		if in.LedgerOutstandingMinor, err = tx.Outstanding(ctx, g.acct.ID, it.Subject, it.SIK, g.readAt); err != nil {
			return err
		}
	}
	if p := payeeKey(in.Action); p != "" && g.action.Kind != sik.KindRefund {
		if in.PayeeSeenBefore, err = tx.PayeePaidBefore(ctx, g.acct.ID, p); err != nil {
			return err
		}
	}
	return nil
}

// railHost is the host the request really goes to: the route's rail host
// (Envoy's context extension), else the account's first host.
func (g gateRun) railHost() string {
	if g.req.RailHost != "" {
		return g.req.RailHost
	}
	if len(g.acct.Hosts) > 0 {
		return g.acct.Hosts[0]
	}
	return g.req.Host
}

// payeeKey is what per-payee windows count by: the payee, or the subject
// for refunds (the money goes back to that payment's payer).
func payeeKey(a gate.Action) string {
	if a.Payee != "" {
		return a.Payee
	}
	return a.Subject
}

func kindName(k countersignv1.ActionKind) string {
	switch k {
	case countersignv1.ActionKind_ACTION_KIND_REFUND:
		return string(sik.KindRefund)
	case countersignv1.ActionKind_ACTION_KIND_PAYOUT:
		return string(sik.KindPayout)
	case countersignv1.ActionKind_ACTION_KIND_TRANSFER:
		return string(sik.KindTransfer)
	}
	return ""
}

// verdictOf turns the ladder's answer into the engine's verdict, with the
// gate records the ledger stores.
func verdictOf(v gate.Verdict, results []gate.Result) verdict {
	out := verdict{Verdict: verdictName(v)}
	for _, r := range results {
		out.Gates = append(out.Gates, ledger.GateRecord{Gate: r.Gate, Verdict: string(verdictName(r.Verdict)), ReasonCode: r.ReasonCode, Reason: r.Reason})
	}
	p := gate.Primary(results)
	out.ReasonCode, out.Reason = p.ReasonCode, p.Reason
	return out
}

func verdictName(v gate.Verdict) Verdict {
	switch v {
	case gate.Allow:
		return Allow
	case gate.Hold:
		return Hold
	}
	return Block
}

// stateful reports whether a mandate has limits that accumulate across
// decisions (budgets, windows, a fee budget, a recurrence limit).
func stateful(m *countersignv1.Mandate) bool {
	return len(m.GetBudgets()) > 0 || len(m.GetWindows()) > 0 || m.GetFeeBudget() != nil || m.GetRecurrenceLimit() > 0
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// stored is the gate records an ALLOW's decision keeps: every gate's
// verdict and reason code, and the sentence only of a gate that did not
// allow (an advisory hold an approval lifted). A passing gate's sentence
// restates the intent and its mandate, which the ledger keeps already; a
// HOLD or BLOCK keeps every sentence, for the person who reads why.
func stored(gates []ledger.GateRecord) []ledger.GateRecord {
	out := make([]ledger.GateRecord, len(gates))
	for i, g := range gates {
		out[i] = g
		if g.Verdict == string(Allow) {
			out[i].Reason = ""
		}
	}
	return out
}
