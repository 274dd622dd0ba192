package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/countersign/countersign/internal/chaos"
	"github.com/countersign/countersign/internal/gate"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/money"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// verdict is the gate ladder's answer as the engine acts on it.
type verdict struct {
	Verdict    Verdict
	ReasonCode string
	Reason     string
	Gates      []ledger.GateRecord
	// Hold reserves the amount under the mandate on ALLOW.
	Hold *ledger.HoldSpec
	// Approval shapes the approval a HOLD opens.
	Approval ledger.ApprovalSpec
	// UsesApproval marks an ALLOW that an owner's approval made possible:
	// the approval is used by this decision.
	UsesApproval bool
}

// decided is what a decision did to the ledger, for the answer.
type decided struct {
	intent ledger.Intent
	// attempt is the attempt that started (the request may go); nil when
	// none did.
	attempt *ledger.Attempt
	// applied is the attempt that applied an APPLIED intent (replayed).
	applied *ledger.Attempt
	// decisionID is the decision recorded with the writes (0: not yet).
	decisionID int64
	// gates is the ladder's verdict when it ran. On BLOCK of a new intent
	// nothing was written: the intent does not exist.
	gates *verdict
}

// errGateBlocked rolls the deciding transaction back: a request the gates
// block leaves no intent behind, only its decision, so the same request may
// pass once a window slides or a mandate changes.
var errGateBlocked = errors.New("engine: gates blocked the proposal")

// propose is the deciding transaction that locks first: the intent (new
// or existing, I1), then, in the ladder, the approval, the mandate and its
// usage, counted under the lock. It runs for an intent that exists (which
// a new proposal may move on: reopen, retry, release an approved hold,
// expire a lease) and when the ledger refused what fresh relied on.
func (e *Engine) propose(ctx context.Context, pr *proposal) Outcome {
	var res decided
	var stamped rail.Stamped
	g := e.gateRun(pr)
	err := e.ledger.InTx(ctx, func(tx *ledger.Tx) error {
		res, stamped = decided{}, rail.Stamped{}
		// Who asks, as it is now, share-locked: a revocation committed since
		// the credential was read refuses here, and one not yet committed
		// waits for this decision. The gates run on this principal.
		live, err := tx.LivePrincipal(ctx, pr.principal.Credential.ID)
		if err != nil {
			return err
		}
		if code, reason, refused := principalRefusal(live, pr.now); refused {
			res.gates = &verdict{Verdict: Block, ReasonCode: code, Reason: reason,
				Gates: []ledger.GateRecord{{Gate: gate.GateScope, Verdict: string(Block), ReasonCode: code, Reason: reason}}}
			return errGateBlocked
		}
		pr.principal = &live
		it, created, err := tx.CreateIntent(ctx, pr.newIntent())
		switch {
		case err != nil:
			return err
		case created:
			v, err := g.ladder(ctx, tx, it)
			if err != nil {
				return err
			}
			res.gates = &v
			switch v.Verdict {
			case Block:
				return errGateBlocked
			case Hold:
				if res.intent, err = tx.Transition(ctx, it, intent.GatesHeld, ledger.TransitionOpts{Reason: v.Reason}); err != nil {
					return err
				}
				return tx.OpenApproval(ctx, res.intent, v.Approval)
			}
			if it, err = tx.Transition(ctx, it, intent.GatesPassed, ledger.TransitionOpts{}); err != nil {
				return err
			}
			if err := placeHold(ctx, tx, it, v); err != nil {
				return err
			}
		default:
			if it, err = tx.LockIntent(ctx, pr.key); err != nil {
				return err
			}
			// Another owner's intent is neither moved nor described: its
			// approval, its reopening and its answer are its owner's.
			same, err := tx.SameOwner(ctx, pr.principal.Agent.ID, it.AgentID)
			if err != nil {
				return err
			}
			if !same {
				return ledger.ErrForeignIntent
			}
		}
		if pr.alias != "" {
			if err := tx.AddAlias(ctx, pr.key, pr.alias); err != nil {
				return err
			}
		}
		res.intent = it
		return e.advance(ctx, tx, g, pr, &res, &stamped)
	})
	switch {
	case errors.Is(err, errGateBlocked):
		return e.answer(pr.acct, pr.req, res, rail.Stamped{})
	case errors.Is(err, ledger.ErrTooManyPendingApprovals):
		// Held, but the agent already has as many requests waiting for
		// its owner as it may: refused, and nothing written (an existing
		// intent stays as it was), so it may be sent again once the owner
		// has decided some.
		return e.answer(pr.acct, pr.req, decided{gates: tooManyPending(res.gates, pr.principal.Agent.ID, e.opts.MaxPendingApprovals)}, rail.Stamped{})
	case errors.Is(err, ledger.ErrApprovalReplacedTooOften):
		// Held again with other labels more often than an honest agent
		// does: refused, nothing written, the owner's pending approval as
		// it was.
		return e.answer(pr.acct, pr.req, decided{gates: replacedTooOften(res.gates, res.intent)}, rail.Stamped{})
	case errors.Is(err, ledger.ErrForeignIntent):
		return refuseForeign(pr.acct, pr.req)
	case errors.Is(err, errForeignStamp):
		return foreignStampRefusal(pr.acct, pr.req)
	case err != nil:
		return e.ledgerFailed(pr.acct, pr.req, "propose", err)
	}
	if res.attempt != nil {
		chaos.Point(chaos.AfterWALBeforeCall)
	}
	return e.answer(pr.acct, pr.req, res, stamped)
}

// advance moves an intent as far as a new proposal of its action may take
// it, and starts an attempt when the state machine allows.
func (e *Engine) advance(ctx context.Context, tx *ledger.Tx, g gateRun, pr *proposal, res *decided, stamped *rail.Stamped) error {
	it := res.intent
	switch it.State {
	case intent.Applied:
		a, err := tx.AppliedAttempt(ctx, it)
		if err != nil {
			return err
		}
		res.applied = &a
		return nil
	case intent.InFlight:
		// A live lease means the first caller's request may be at the rail
		// right now; an expired one means nobody will commit it: reconcile.
		expired, err := tx.LeaseExpired(ctx, it.Key, it.AttemptCount)
		if err != nil || !expired {
			return err
		}
		delay := e.opts.ReconcileDelay
		res.intent, err = tx.Transition(ctx, it, intent.LeaseExpired, ledger.TransitionOpts{
			Reason: "attempt lease expired before the rail's answer was recorded", ReconcileIn: &delay,
			AttemptOutcome: "lease_expired"})
		return err
	case intent.FailedTerminal, intent.ConfirmedNotApplied:
		// A fresh proposal of an action proven not applied: the gates run
		// again (budgets and windows moved since), then a new attempt.
		if pr.action.AmountMinor == nil {
			// A full refund leaves for the amount its intent holds (answer
			// writes it into the body), whatever is refundable now: it is
			// judged, shown to the owner and held at that (a review: held
			// at 10000 while 4000 left).
			pr.value = it.AmountMinor
		}
		v, err := g.ladder(ctx, tx, it)
		if err != nil {
			return err
		}
		res.gates = &v
		switch v.Verdict {
		case Block:
			return errGateBlocked
		case Hold:
			// Held for the owner: nothing moves, the intent stays as it is,
			// and the owner is asked again (the approval of the first
			// attempt was used by it).
			return tx.OpenApproval(ctx, it, v.Approval)
		}
		if v.UsesApproval {
			if err := tx.SettleApproval(ctx, it.Key, "approved", "used"); err != nil {
				return err
			}
		}
		if it.State == intent.FailedTerminal {
			// A definite rejection: the rail saved that answer under the
			// old key, so the reopened action needs a new stamp generation.
			it, err = tx.Transition(ctx, it, intent.Reopened, ledger.TransitionOpts{BumpGeneration: true, Reason: "reopened by a fresh proposal"})
		} else {
			// Proven absent: retry under the same stamp, so that a late
			// copy of the old request and the retry still deduplicate.
			it, err = tx.Transition(ctx, it, intent.RetryAuthorized, ledger.TransitionOpts{Reason: "retry after proven absence"})
		}
		if err != nil {
			return err
		}
		// Sent without the retry's approval (a mandate that needs none),
		// that approval no longer waits on anything (a review).
		if err := tx.VoidApprovals(ctx, it.Key); err != nil {
			return err
		}
		if err := placeHold(ctx, tx, it, v); err != nil {
			return err
		}
	case intent.Held:
		// The held request is the agent's whose approval it waits on (its
		// live approval's, else its creator's): only that agent's requests
		// settle it. Another agent of the owner sending the identical
		// request is refused, or held, for its own request only; before, a
		// sibling's BLOCK under its own mandate blocked the intent and
		// voided the approval the owner had given.
		mine, err := heldFor(ctx, tx, it, g.principal.Agent.ID)
		if err != nil {
			return err
		}
		if g.value != it.AmountMinor {
			// Only a full refund is valued anew on each send (what is
			// refundable now: its key says "full"). The owner was shown,
			// and approves, the amount it had when it was held; released
			// at another, the approval would move money the owner never
			// saw (a review: 40.00 approved, 100.00 refunded once a
			// merchant's refund failed and the balance grew back).
			v := heldValueChanged(pr, it)
			res.gates = &v
			if !mine {
				return nil
			}
			if res.intent, err = tx.Transition(ctx, it, intent.GatesBlocked, ledger.TransitionOpts{Reason: v.Reason}); err != nil {
				return err
			}
			return tx.VoidApprovals(ctx, it.Key)
		}
		// The identical request again: if the owner approved it, the gates
		// run again against the live limits (an approval never widens a
		// mandate) and the approval is used once.
		v, err := g.ladder(ctx, tx, it)
		if err != nil {
			return err
		}
		res.gates = &v
		switch v.Verdict {
		case Block:
			if !mine {
				return nil
			}
			if res.intent, err = tx.Transition(ctx, it, intent.GatesBlocked, ledger.TransitionOpts{Reason: v.Reason}); err != nil {
				return err
			}
			return tx.VoidApprovals(ctx, it.Key)
		case Hold:
			return tx.OpenApproval(ctx, it, v.Approval) // keeps a live one; reopens an expired one
		}
		reason := "approved by the owner"
		if !v.UsesApproval {
			reason = "sent by the agent under a mandate that needs no approval"
		}
		if it, err = tx.Transition(ctx, it, intent.HoldReleased, ledger.TransitionOpts{Reason: reason}); err != nil {
			return err
		}
		// The approval that released it is used; released without one
		// (another credential of the agent, under a mandate that needs no
		// approval), the ones it waited on are void, never left in the
		// owner's queue for a request already sent (a review).
		if v.UsesApproval {
			if err := tx.SettleApproval(ctx, it.Key, "approved", "used"); err != nil {
				return err
			}
		}
		if err := tx.VoidApprovals(ctx, it.Key); err != nil {
			return err
		}
		if err := placeHold(ctx, tx, it, v); err != nil {
			return err
		}
	case intent.Authorized:
	default:
		return nil // PROPOSED, UNKNOWN, RECONCILING, BLOCKED, QUARANTINED: no attempt
	}
	return e.startAttempt(ctx, tx, pr, it, res, stamped)
}

// startAttempt stamps and writes the next attempt of an AUTHORIZED intent
// with the ALLOW decision, in the deciding transaction (one commit).
func (e *Engine) startAttempt(ctx context.Context, tx *ledger.Tx, pr *proposal, it ledger.Intent, res *decided, stamped *rail.Stamped) error {
	s, err := e.stamp(pr, it.StampGeneration, stamped)
	if err != nil {
		return err
	}
	it, a, err := tx.StartAttempt(ctx, it, pr.attemptStart(e.opts, s))
	if err != nil {
		return err
	}
	res.intent, res.attempt = it, &a
	d := e.decisionOf(pr.req, pr.principal, ReasonAllowed, "attempt allowed")
	d.Verdict, d.RailAccount, d.SIK, d.AttemptSeq = string(Allow), it.RailAccount, it.SIK, a.Seq
	if res.gates != nil {
		d.Gates = stored(res.gates.Gates)
	}
	res.decisionID, err = tx.RecordDecision(ctx, *d)
	return err
}

// stamp is the stamp of the attempt at generation gen, and the headers and
// body member the rail's adapter stamps the request with.
func (e *Engine) stamp(pr *proposal, gen uint32, stamped *rail.Stamped) (string, error) {
	st, err := pr.acct.Adapter.Stamp(pr.action, pr.s, gen)
	if err != nil {
		return "", err
	}
	*stamped = st
	s, err := sik.Stamp(pr.s, gen)
	if err == nil && !stampKept(pr.req, e.opts, pr.action, s) {
		// foreignStamp let a stamp of this SIK pass; this is the
		// generation that leaves.
		return "", errForeignStamp
	}
	return s, err
}

func placeHold(ctx context.Context, tx *ledger.Tx, it ledger.Intent, v verdict) error {
	if v.Hold == nil {
		return nil
	}
	return tx.PlaceHold(ctx, it, *v.Hold)
}

// newIntent is the intent pr proposes.
func (pr *proposal) newIntent() ledger.NewIntent {
	a := pr.action
	return ledger.NewIntent{Key: pr.key, Rail: string(pr.acct.Rail), Action: string(a.Kind), Subject: a.Subject,
		AmountMinor: pr.value, Currency: pr.currency, Payee: a.Payee, DistinctReason: a.Distinct,
		Canonical: pr.canonical, AgentID: pr.principal.Agent.ID, Family: pr.family}
}

// attemptStart is the attempt pr's request starts, stamped with stamp.
// It is through Envoy with ext_proc in the path (so that one ext_proc never
// marked sent never left, which the reconciler settles without a listing)
// only if the configuration says so and Envoy routed the request by one of
// Countersign's own routes, which name the rail account (context extension
// rail_account) and run ext_proc: the contract test and the chart check
// hold every such route to both. A request that names no account came
// through a proxy routing without them (Istio CUSTOM), where no ext_proc
// runs whatever --ext-proc-in-path says: left at its default there, every
// dropped attempt would be settled not applied, though it left.
func (pr *proposal) attemptStart(o Options, stamp string) ledger.AttemptStart {
	req := pr.req
	return ledger.AttemptStart{Key: pr.key, Stamp: stamp, LeaseOwner: o.LeaseOwner, LeaseTTL: o.LeaseTTL,
		Request:         ledger.HTTPMessage{Method: req.Method, Path: req.Path, Headers: req.Headers, Body: req.Body},
		ViaEnvoy:        req.Source == SourceExtAuthz && o.ExtProcInPath && req.RailAccount != "",
		CommitTokenHash: pr.tokenHash, CommitAgent: pr.tokenAgent(), MayApplyFor: o.RailSettle}
}

// tokenAgent is the agent pr's commit token is issued to ("" when none is).
func (pr *proposal) tokenAgent() string {
	if pr.tokenHash == nil {
		return ""
	}
	return pr.principal.Agent.ID
}

// gateRun is the ladder's view of pr.
func (e *Engine) gateRun(pr *proposal) gateRun {
	return gateRun{proposal: pr, advisors: e.opts.Advisors, mandates: &e.mandates, tracer: e.tracer, maxPending: e.opts.MaxPendingApprovals}
}

// ReasonTooManyPendingApprovals refuses a request the gates would hold
// while its agent already has as many waiting for the owner as it may.
const ReasonTooManyPendingApprovals = "too_many_pending_approvals"

// tooManyPending is the refusal of a request that would have been held
// (held: the ladder's HOLD, when it ran) past the agent's bound.
func tooManyPending(held *verdict, agentID string, max int) *verdict {
	reason := fmt.Sprintf("Agent %s already has %d requests waiting for its owner's approval, the most it may; "+
		"no approval was opened for this request (an intent it already has stays as it was). "+
		"Send it again once the owner has approved, rejected or let some of them expire.", agentID, max)
	return heldRefused(held, ReasonTooManyPendingApprovals, reason)
}

// heldRefused is the BLOCK, by the limits, of a request the gates held
// (held's records kept) for which no approval could be opened.
func heldRefused(held *verdict, code, reason string) *verdict {
	v := &verdict{Verdict: Block, ReasonCode: code, Reason: reason}
	if held != nil {
		v.Gates = append(v.Gates, held.Gates...)
	}
	v.Gates = append(v.Gates, ledger.GateRecord{Gate: gate.GateLimits, Verdict: string(Block), ReasonCode: code, Reason: reason})
	return v
}

// ReasonApprovalReplacedTooOften refuses a held request whose intent's
// approval was replaced by requests of other labels
// ledger.MaxReplacedApprovals times already.
const ReasonApprovalReplacedTooOften = "approval_replaced_too_often"

// replacedTooOften is the BLOCK of a request that would replace its
// intent's approval once more.
func replacedTooOften(held *verdict, it ledger.Intent) *verdict {
	reason := fmt.Sprintf("intent %s was held for its owner with other labels (metadata, notes, a description) %d times already, the most Countersign keeps; "+
		"no approval was opened for this request, and the owner's pending one stays as it was. Send the request with the labels the owner is asked about.",
		it.SIK, ledger.MaxReplacedApprovals)
	return heldRefused(held, ReasonApprovalReplacedTooOften, reason)
}

// ReasonHeldValueChanged refuses a held full refund whose value (what is
// refundable now) is no longer the amount it was held, and shown to the
// owner, for.
const ReasonHeldValueChanged = "held_value_changed"

// heldValueChanged is the BLOCK of a held full refund that would now move
// pr.value instead of the amount it was held for.
func heldValueChanged(pr *proposal, it ledger.Intent) verdict {
	conv := money.ForRail(string(pr.acct.Rail))
	reason := fmt.Sprintf("intent %s was held for the owner at %s, the amount this full refund would then have moved; it would now move %s, "+
		"which the owner was not shown, so it is refused and its approval voided. Send a refund of an explicit amount; it needs its own approval.",
		it.SIK, conv.Format(it.AmountMinor, it.Currency), conv.Format(pr.value, it.Currency))
	return verdict{Verdict: Block, ReasonCode: ReasonHeldValueChanged, Reason: reason,
		Gates: []ledger.GateRecord{{Gate: gate.GateValue, Verdict: string(Block), ReasonCode: ReasonHeldValueChanged, Reason: reason}}}
}

// heldFor reports whether the held intent it waits on agent: its live
// approval's agent (its time run out or not), else its creator.
func heldFor(ctx context.Context, tx *ledger.Tx, it ledger.Intent, agent string) (bool, error) {
	holder, live, err := tx.LiveApprovalAgent(ctx, it.Key)
	if err != nil {
		return false, err
	}
	if !live {
		holder = it.AgentID
	}
	return holder == agent, nil
}
