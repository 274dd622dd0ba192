package engine

import (
	"context"
	"errors"
	"net/http"
	"time"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/gate"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
)

// ReasonActionUnavailable refuses a request whose action an agent of
// another owner already made. It says no more than that the action cannot
// be taken: not the intent, its state, its entity or its answer. The same
// words answer every state of the other owner's intent.
const ReasonActionUnavailable = "action_unavailable"

// An answer from the ledger about an existing intent (a replay, "in
// progress", "reconciling", "refused as …") is given only when
//
//  1. the scope gate (G1) admits the caller for the rail account and the
//     action: its credential, agent and a mandate of a held account; and
//  2. the intent was made by an agent of the caller's owner.
//
// Otherwise the caller learns what it would learn of an action never seen
// (1), or a refusal that names nothing (2).

// admitToLedgerAnswer checks both conditions for an answer about it. ok is
// false when out is the refusal to give instead.
func (e *Engine) admitToLedgerAnswer(ctx context.Context, req Request, p *ledger.Principal, acct *rails.Account, kind sik.Kind, it ledger.Intent, facts ledger.DecisionFacts) (Outcome, bool) {
	if _, out, ok := e.admitScope(req, p, acct, kind, it.Currency, nil, facts); !ok {
		return out, false
	}
	if it.AgentID == p.Agent.ID {
		return Outcome{}, true
	}
	owner, err := e.ledger.AgentOwner(ctx, it.AgentID)
	switch {
	case err == nil && owner == p.Agent.OwnerID && owner != "":
		return Outcome{}, true
	case err == nil, errors.Is(err, ledger.ErrNotFound):
		return refuseForeign(acct, req), false
	case errors.Is(err, ledger.ErrUnavailable):
		return refuseRail(acct, req, ReasonLedgerUnavailable, "Countersign's ledger is unreachable, so no money can move; retry later.", http.StatusServiceUnavailable), false
	default:
		e.log.Error("intent owner lookup failed; denying", "request_id", req.RequestID, "err", err)
		return refuseRail(acct, req, ReasonInternal, "Countersign failed internally; no money moved.", http.StatusServiceUnavailable), false
	}
}

// admitScope runs G1 for the caller on acct, before the deciding writes:
// the same predicate the ladder runs, over the mandate read with the
// credential (the active one, else the newest, so that a refusal names
// why; returned when admitted). It runs before any proposal too, because
// an existing intent is answered (or moved) without the ladder. A HOLD (a
// propose-only credential) admits: the ladder holds the request itself,
// and an answer from the ledger moves no money.
func (e *Engine) admitScope(req Request, p *ledger.Principal, acct *rails.Account, kind sik.Kind, currency string, freeText []string, facts ledger.DecisionFacts) (*countersignv1.Mandate, Outcome, bool) {
	in := principalInput(e.now(), p, acct)
	// An answer from the ledger moves no money, and a new action meets the
	// ladder's G1 after this, with what the rail can reverse: here no
	// grant's reversible flag refuses.
	in.Action = gate.Action{Kind: kind, Currency: currency, Reversible: true}
	in.FreeText = freeText
	if facts.MandateFound {
		m, err := e.mandates.get(facts.Mandate)
		if err != nil {
			e.log.Error("mandate undecodable; denying", "request_id", req.RequestID, "mandate", facts.Mandate.Hash, "err", err)
			return nil, refuseRail(acct, req, ReasonInternal, "Countersign failed internally; no money moved.", http.StatusServiceUnavailable), false
		}
		withMandate(&in, facts.Mandate, m)
	}
	r := gate.CheckScope(in)
	if r.Verdict != gate.Block {
		return in.Mandate, Outcome{}, true
	}
	out := refuseRail(acct, req, r.ReasonCode, r.Reason, http.StatusForbidden)
	out.Gates = []ledger.GateRecord{{Gate: r.Gate, Verdict: string(Block), ReasonCode: r.ReasonCode, Reason: r.Reason}}
	return nil, out, false
}

// principalInput is the gate input of p on acct at now, before the action.
func principalInput(now time.Time, p *ledger.Principal, acct *rails.Account) gate.Input {
	return gate.Input{
		Now:         now,
		Credential:  gate.Credential{ID: p.Credential.ID, Scope: p.Credential.Scope, ExpiresAt: p.Credential.ExpiresAt, Revoked: p.Credential.RevokedAt != nil},
		Agent:       gate.Agent{ID: p.Agent.ID, Revoked: p.Agent.Revoked},
		RailAccount: acct.ID, Rail: acct.Rail,
	}
}

// withMandate puts the mandate (rec, decoded as m) into in.
func withMandate(in *gate.Input, rec ledger.MandateRecord, m *countersignv1.Mandate) {
	in.Mandate, in.MandateHash, in.MandateRevoked = m, rec.Hash, rec.RevokedAt != nil
}

// reversible says whether the rail can still reverse a once applied (its
// adapter's rail.Reverser; none can without one). It was the grant's own
// flag, copied into the action, so a grant marked reversible refused
// nothing (found by a review: an instant payout under a reversible-only
// grant was allowed).
func reversible(acct *rails.Account, a rail.Action) bool {
	r, ok := acct.Adapter.(rail.Reverser)
	return ok && r.Reversible(a)
}

// refuseForeign is the answer to a duplicate of another owner's intent.
func refuseForeign(acct *rails.Account, req Request) Outcome {
	return refuseRail(acct, req, ReasonActionUnavailable,
		"Countersign cannot take this action for this agent; no money moved. Ask your owner.", http.StatusForbidden)
}
