package engine

import (
	"context"
	"errors"
	"net/http"
	"time"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/chaos"
	"github.com/countersign/countersign/internal/gate"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
)

// proposal is a resolved, keyed action on its way to the ledger.
type proposal struct {
	req       Request
	principal *ledger.Principal
	acct      *rails.Account
	action    rail.Action
	ref       rail.Referent
	value     int64
	currency  string
	key       ledger.Key
	s         sik.SIK
	canonical string
	alias     string
	// family is the new intent's family (an action under an idempotency
	// window: its alias); "" for none.
	family    string
	tokenHash []byte
	facts     ledger.DecisionFacts
	now       time.Time
	// readAt is when the rail read of ref began (this process's
	// monotonic clock: the ledger takes only a duration from it,
	// ledger.Tx.Outstanding).
	readAt time.Time
	// tool is the MCP tool the request calls ("" if none), and toolHash
	// its pin hashes as Countersign read them from the server (zero when
	// not read: no pins, no tool).
	tool     string
	toolHash rail.ToolHashes
	// factsHeld: fresh's write was refused, but only after its first
	// statement asserted, under their locks, the principal and mandate it
	// decided on (an intent that exists, or a count): those facts are
	// current, even when they were remembered rather than read.
	factsHeld bool
}

// early runs, before any rail read, what needs neither the referent nor
// the ledger's counts: the part of the scope gate that asks whether a
// mandate in force grants the action's kind at all (gate.
// CheckMandateApplies), then the per-action bounds and any window or
// budget the action alone overruns. What it refuses costs no read at the
// rail, so an agent whose mandate was revoked, or that never had one,
// cannot spend the owner's rail rate limit either. Counts only add and the
// referent only narrows, so what fails here fails the ladder too. Facts
// that say no mandate applies were read now, never remembered (decideOnce
// remembers only a mandate in force). An MCP call under MCP pins whose
// answer no ext_proc will check is refused here too (unchecked).
func (e *Engine) early(req Request, p *ledger.Principal, acct *rails.Account, a rail.Action, facts ledger.DecisionFacts) (Outcome, bool) {
	now := e.now()
	in := principalInput(now, p, acct)
	in.Action = gate.Action{Kind: a.Kind, Subject: a.Subject, Currency: a.Currency, Payee: a.Payee, Reversible: reversible(acct, a), Extra: a.Extra}
	if facts.MandateFound {
		m, err := e.mandates.get(facts.Mandate)
		if err != nil {
			return Outcome{}, true // the ladder reports it
		}
		withMandate(&in, facts.Mandate, m)
	}
	r, ok := gate.CheckMandateApplies(in)
	if ok && facts.MandateFound && a.AmountMinor != nil {
		in.Action.AmountMinor = *a.AmountMinor
		r = gate.CheckLimits(gate.Uncounted(in))
		ok = r.Verdict != gate.Block
	}
	if ok {
		// Under MCP pins the call's answer, like a read's, must reach the
		// agent checked by ext_proc (toolslist.go): refused before any read
		// at the rail when nothing will check it.
		if out := unchecked(req, e.opts, acct, in.Mandate); out != nil {
			return *out, false
		}
		return Outcome{}, true
	}
	out := refuseRail(acct, req, r.ReasonCode, r.Reason, http.StatusForbidden)
	out.Gates = []ledger.GateRecord{{Gate: r.Gate, Verdict: string(Block), ReasonCode: r.ReasonCode, Reason: r.Reason}}
	return out, false
}

// fresh decides a new intent in one round trip: the gates run in Go on
// what was read with the credential (counting nothing yet against the
// mandate), and one pipelined transaction writes the intent, its attempt
// or approval, the decision and the hold, asserting at its end — under the
// mandate's lock, taken last — that the counts the gates did not see still
// leave room (gate.HeadroomOf). done is false when the ledger refused what
// fresh relied on (the intent exists, a count or a revocation moved): then
// nothing was written, and propose decides with its locks taken first.
func (e *Engine) fresh(ctx context.Context, pr *proposal) (out Outcome, done bool) {
	acct, req, a, p := pr.acct, pr.req, pr.action, pr.principal
	g := e.gateRun(pr)
	in := g.input(a.Subject, pr.canonical)
	in.PayeeSeenBefore = pr.facts.PayeePaidBefore
	var m *countersignv1.Mandate
	if pr.facts.MandateFound {
		var err error
		if m, err = e.mandates.get(pr.facts.Mandate); err != nil {
			return Outcome{}, false // propose reports it
		}
		withMandate(&in, pr.facts.Mandate, m)
	}
	in = gate.Uncounted(in)
	v := g.evaluate(ctx, in)
	if v.Verdict == Block {
		// Counts can only add to a refusal. But the action may exist
		// already under another alias (a refund named by its charge, the
		// same action as one named by its payment): its answer is the
		// intent's (a replay), not the gates'. An early refusal never gets
		// here; this read is for a refusal after the rail read.
		switch _, err := e.ledger.Intent(ctx, pr.key); {
		case err == nil:
			return Outcome{}, false
		case !errors.Is(err, ledger.ErrNotFound):
			return e.ledgerFailed(acct, req, "intent", err), true
		}
		// Recorded by record: one write.
		return e.answer(acct, req, decided{gates: &v}, rail.Stamped{}), true
	}
	if m != nil {
		v.Approval = ledger.ApprovalSpec{AgentID: pr.principal.Agent.ID, MandateHash: pr.facts.Mandate.Hash, TTL: m.GetApprovalTtl().AsDuration(), Gates: v.Gates, Labels: in.Labels,
			MaxPending: e.opts.MaxPendingApprovals}
	}

	w := e.ledger.NewWrite()
	// What the gates relied on about who asks: share locks, which decisions
	// never wait on each other for (only a revocation waits, and then every
	// later decision sees it); taken first, they also make the foreign-key
	// checks of the inserts below free.
	w.AssertPrincipal(p.Credential.ID, p.Agent.ID)
	if m != nil {
		w.AssertMandate(p.Agent.ID, acct.ID, pr.facts.Mandate.Hash, pr.now)
	}

	path, reason := []intent.Event{intent.GatesPassed, intent.AttemptStarted}, ""
	if v.Verdict == Hold {
		path, reason = []intent.Event{intent.GatesHeld}, v.Reason
	}
	it, err := w.NewIntent(pr.newIntent(), reason, path...)
	if err != nil {
		return e.ledgerFailed(acct, req, "new intent", err), true
	}
	if pr.alias != "" {
		w.AddAlias(pr.key, pr.alias)
	}
	d := e.decisionOf(req, p, v.ReasonCode, v.Reason)
	d.Verdict, d.Gates, d.RailAccount, d.SIK = string(v.Verdict), v.Gates, pr.key.RailAccount, pr.key.SIK
	var attempt *ledger.Attempt
	var stamped rail.Stamped
	if v.Verdict == Allow {
		stamp, err := e.stamp(pr, 0, &stamped)
		if errors.Is(err, errForeignStamp) {
			return foreignStampRefusal(acct, req), true
		}
		if err != nil {
			return e.ledgerFailed(acct, req, "stamp", err), true
		}
		s := pr.attemptStart(e.opts, stamp)
		s.Seq = it.AttemptCount
		if attempt, err = w.StartAttempt(s); err != nil {
			return e.ledgerFailed(acct, req, "attempt", err), true
		}
		d.ReasonCode, d.Reason, d.AttemptSeq, d.Gates = ReasonAllowed, "attempt allowed", attempt.Seq, stored(v.Gates)
	}
	decisionID, err := w.RecordDecision(*d)
	if err != nil {
		return e.ledgerFailed(acct, req, "decision", err), true
	}
	// What the gates relied on about the counts, asserted last, under the
	// lock that makes decisions take turns: held only while PostgreSQL
	// finishes the batch and commits.
	if m != nil {
		assertHeadroom(w, pr, m, in, v.Verdict == Allow)
		if v.Verdict == Allow {
			w.PlaceHold(*it, *g.holdSpec(pr.facts.Mandate.Hash, m, in.Action))
		}
	}
	// A HOLD's approval opens after the mandate's and the subject's locks,
	// in the locking path's order (its ladder takes those, then
	// OpenApproval the agent's approvals lock): never the other way round,
	// or a held request sent again and a new one would deadlock.
	if v.Verdict == Hold {
		if err := w.OpenApproval(*it, v.Approval); err != nil {
			return e.ledgerFailed(acct, req, "approval", err), true
		}
	}
	err = e.ledger.Apply(ctx, w)
	var guard *ledger.GuardError
	switch {
	case errors.Is(err, ledger.ErrIntentExists), errors.As(err, &guard):
		e.log.Debug("fresh decision refused by the ledger; deciding with locks", "request_id", req.RequestID, "err", err)
		pr.factsHeld = guard == nil || !guard.Moved()
		return Outcome{}, false
	case err != nil:
		return e.ledgerFailed(acct, req, "decision write", err), true
	}
	if attempt != nil {
		chaos.Point(chaos.AfterWALBeforeCall)
	}
	out = e.answer(acct, req, decided{intent: *it, attempt: attempt, decisionID: *decisionID, gates: &v}, stamped)
	out.DecisionID = *decisionID
	return out, true
}

// assertHeadroom queues the assertions that the counts the gates did not
// see leave the action room, after the mandate's lock when its limits
// accumulate.
func assertHeadroom(w *ledger.Write, pr *proposal, m *countersignv1.Mandate, in gate.Input, holds bool) {
	h := gate.HeadroomOf(in)
	hash := pr.facts.Mandate.Hash
	if stateful(m) {
		w.LockMandateLineage(hash)
		for _, wh := range h.Windows {
			if wh.MaxCalls < gate.Unlimited || wh.MaxAmountMinor < gate.Unlimited {
				w.AssertWindow(hash, wh.Scope == countersignv1.WindowScope_WINDOW_SCOPE_PAYEE, wh.Key, wh.Since, wh.Currency,
					wh.MaxCalls, wh.MaxAmountMinor, wh.Name+" has no room left")
			}
		}
		if h.MaxSubjectActions < gate.Unlimited {
			w.AssertSubjectActions(hash, in.Action.Subject, h.MaxSubjectActions)
		}
		if h.MaxFeeSpent < gate.Unlimited {
			w.AssertFeeSpent(hash, h.MaxFeeSpent)
		}
		// An ALLOW's hold is refused by the budget row's CHECK; a HOLD
		// places none, so its room is asserted.
		if !holds && h.MaxBudgetUsed < gate.Unlimited {
			w.AssertBudget(hash, in.Action.Currency, h.MaxBudgetUsed)
		}
	}
	if h.MaxOutstanding < gate.Unlimited {
		w.LockSubject(pr.key.RailAccount, in.Action.Subject)
		w.AssertOutstanding(pr.key.RailAccount, in.Action.Subject, pr.key.SIK, h.MaxOutstanding, pr.readAt)
	}
}
