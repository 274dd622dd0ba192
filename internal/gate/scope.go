package gate

import (
	"slices"

	"github.com/countersign/countersign/internal/credential"
)

// CheckScope is G1: may this credential, for this agent, under this
// mandate, do this kind of action on this rail account at all? It is the
// cheapest gate and runs first. A propose-only credential is HELD for the
// owner's approval of the exact request, and a request carrying free text
// is BLOCKED or HELD when the mandate's free_text says so.
func CheckScope(in Input) Result {
	if r, ok := checkPrincipal(in); !ok {
		return r
	}
	if r, ok := checkMandate(in); !ok {
		return r
	}
	m, a := in.Mandate, in.Action
	name := mandateName(in)
	g := grantFor(m, a.Kind)
	switch {
	case !slices.Contains(g.GetCurrencies(), a.Currency):
		return block(GateScope, ReasonCurrencyNotGranted, "%s grants %s only in %v, not in %s.", name, a.Kind, g.GetCurrencies(), orNone(inert(a.Currency)))
	case g.GetReversible() && !a.Reversible:
		return block(GateScope, ReasonActionNotReversible, "%s grants %s only while the rail can still reverse it, and this one cannot be reversed.", name, a.Kind)
	}
	if r, ok := checkFreeText(in); !ok {
		return r
	}
	if in.Credential.Scope == credential.ScopePropose {
		ok, _, why := approval(in)
		if !ok {
			return hold(GateScope, ReasonCredentialProposeOnly, "Credential %s may only propose: %s.", in.Credential.ID, why)
		}
		return result(GateScope, Allow, ReasonApproved, "Credential %s may only propose, and %s.", in.Credential.ID, why)
	}
	return pass(GateScope, "Credential %s and %s are valid and grant %s in %s.", in.Credential.ID, name, a.Kind, inert(a.Currency))
}

// CheckMandateApplies is the part of G1 that needs neither the referent
// nor the ledger's counts: the credential, the agent, and a mandate in
// force for this agent on this account that grants the action's kind. It
// refuses (a BLOCK) what CheckScope refuses for the same reasons, so the
// engine runs it before any read at the rail: a request that cannot be
// allowed costs no rail read. ok is false with the BLOCK it found.
func CheckMandateApplies(in Input) (r Result, ok bool) {
	if r, ok := checkPrincipal(in); !ok {
		return r, false
	}
	return checkMandate(in)
}

// CheckMayRead is what a read-only call through Countersign needs: the
// credential, the agent, and a mandate in force for this agent on this
// account, whatever it grants. A read leaves with the account's secret key
// and its answer shows the account's entities (other agents' refunds, their
// stamps, customers): only an agent its owner gave a mandate on the account
// may read it. ok is false with the BLOCK it found.
func CheckMayRead(in Input) (r Result, ok bool) {
	if r, ok := checkPrincipal(in); !ok {
		return r, false
	}
	if in.Mandate == nil {
		return block(GateScope, ReasonMandateMissing, "Agent %s has no mandate on rail account %s, so it may not read there.", in.Agent.ID, in.RailAccount), false
	}
	return checkMandateInForce(in)
}

// checkMandate checks that a mandate in force, for this agent on this
// account, grants the action's kind.
func checkMandate(in Input) (Result, bool) {
	if in.Mandate == nil {
		return block(GateScope, ReasonMandateMissing, "Agent %s has no mandate on rail account %s, so it may not move money there.", in.Agent.ID, in.RailAccount), false
	}
	if r, ok := checkMandateInForce(in); !ok {
		return r, false
	}
	if grantFor(in.Mandate, in.Action.Kind) == nil {
		return block(GateScope, ReasonActionNotGranted, "%s does not grant %s actions.", mandateName(in), orNone(string(in.Action.Kind))), false
	}
	return Result{}, true
}

// checkMandateInForce checks that in's mandate (not nil) is valid now, not
// revoked, and for this agent on this account.
func checkMandateInForce(in Input) (Result, bool) {
	m := in.Mandate
	name := mandateName(in)
	if in.MandateRevoked {
		return block(GateScope, ReasonMandateRevoked, "The owner revoked %s; ask the owner for a new mandate.", name), false
	}
	from, until, problem := validity(m)
	switch {
	case problem != "":
		return block(GateScope, ReasonMandateInvalid, "%s %s, so nothing may be done under it.", name, problem), false
	case in.Now.Before(from):
		return block(GateScope, ReasonMandateNotYetValid, "%s is valid only from %s; it is %s now.", name, stamp(from), stamp(in.Now)), false
	case !in.Now.Before(until):
		return block(GateScope, ReasonMandateExpired, "%s expired at %s; ask the owner for a new mandate.", name, stamp(until)), false
	case m.GetAgentId() != in.Agent.ID:
		return block(GateScope, ReasonMandateWrongAgent, "%s is for agent %s, not agent %s.", name, m.GetAgentId(), in.Agent.ID), false
	case m.GetRailAccount() != in.RailAccount || m.GetRail() != railKinds[in.Rail]:
		return block(GateScope, ReasonMandateWrongRailAccount, "%s is for %s account %s, not %s account %s.",
			name, m.GetRail(), m.GetRailAccount(), orNone(string(in.Rail)), in.RailAccount), false
	}
	return Result{}, true
}

// checkPrincipal checks the clock, the credential and the agent.
func checkPrincipal(in Input) (Result, bool) {
	c := in.Credential
	switch {
	case in.Now.IsZero():
		return block(GateScope, ReasonClockMissing, "Countersign decided without a clock reading; no money moved."), false
	case c.Revoked:
		return block(GateScope, ReasonCredentialRevoked, "Agent credential %s was revoked.", c.ID), false
	case !in.Now.Before(c.ExpiresAt):
		return block(GateScope, ReasonCredentialExpired, "Agent credential %s expired at %s.", c.ID, stamp(c.ExpiresAt)), false
	case !c.Scope.Valid():
		return block(GateScope, ReasonCredentialScopeInvalid, "Agent credential %s has scope %q, which is neither propose nor execute.", c.ID, string(c.Scope)), false
	case in.Agent.Revoked:
		return block(GateScope, ReasonAgentRevoked, "Agent %s was revoked.", in.Agent.ID), false
	}
	return Result{}, true
}
