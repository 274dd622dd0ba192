package gate

import (
	"fmt"
	"strings"
)

// Advisor is an advisory gate (G5). It may object to an action, holding or
// blocking it; it has no way to allow one. Advisors run only when the
// mandate enables them, after every deterministic gate, and never after a
// BLOCK. Advise must not modify in (in.Mandate is shared), and must not
// read in.Usage or in.LedgerOutstandingMinor: a new intent is decided on
// Uncounted input, and only what HeadroomOf bounds is asserted when it is
// written, so an objection drawn from the counts would go unseen.
type Advisor interface {
	// Name is how mandates list the advisor ("new_payee").
	Name() string
	// Advise returns nil for no objection.
	Advise(in Input) *Objection
}

// CheckAdvisory is G5: the advisors the mandate enables, in the order it
// lists them (all of advisors, in order, when it lists none), meet into
// one result naming every objection. A listed advisor that is not
// available blocks: the owner asked for a check that cannot run. An
// advisor that panics blocks. The owner's approval of this exact request
// lifts advisory HOLDs, never advisory BLOCKs.
func CheckAdvisory(in Input, advisors ...Advisor) Result {
	s := in.Mandate.GetAdvisory()
	if !s.GetEnabled() {
		return pass(GateAdvisory, "Advisory gates are off for %s.", mandateName(in))
	}
	run, missing := selectAdvisors(s.GetGates(), advisors)
	if missing != "" {
		return block(GateAdvisory, ReasonAdvisoryGateUnknown, "%s enables advisory gate %q, which this server does not have.", mandateName(in), missing)
	}
	var worst *Objection
	var why []string
	for _, a := range run {
		o := advise(a, in)
		if o == nil {
			continue
		}
		if worst == nil || o.Verdict() < worst.Verdict() {
			worst = o
		}
		why = append(why, fmt.Sprintf("Advisory gate %s objected: %s", a.Name(), strings.TrimSuffix(o.Reason(), ".")))
	}
	if worst == nil {
		return pass(GateAdvisory, "No advisory gate objected (%d ran).", len(run))
	}
	joined := strings.Join(why, "; ") + "."
	if worst.Verdict() == Hold {
		if ok, _, approved := approval(in); ok {
			return result(GateAdvisory, Allow, ReasonApproved, "Advisory holds lifted because %s. %s", approved, joined)
		}
	}
	return Result{Gate: GateAdvisory, Verdict: worst.Verdict(), ReasonCode: worst.Code(), Reason: joined}
}

// selectAdvisors picks the advisors named, in order; missing is the first
// name with no advisor. No names selects them all.
func selectAdvisors(names []string, advisors []Advisor) (run []Advisor, missing string) {
	if len(names) == 0 {
		return advisors, ""
	}
	for _, n := range names {
		found := false
		for _, a := range advisors {
			if a.Name() == n {
				run, found = append(run, a), true
				break
			}
		}
		if !found {
			return nil, n
		}
	}
	return run, ""
}

// advise runs a, turning a panic into a blocking objection (F1).
func advise(a Advisor, in Input) (o *Objection) {
	defer func() {
		if r := recover(); r != nil {
			o = BlockFor(ReasonAdvisoryFailed, fmt.Sprintf("it failed (%v), so the action is refused", r))
		}
	}()
	return a.Advise(in)
}
