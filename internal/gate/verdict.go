package gate

import (
	"fmt"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// Verdict is a gate's answer, ordered Block < Hold < Allow. The zero value
// is Block: a verdict nobody set denies.
type Verdict int

// Verdicts, in the order of the meet.
const (
	Block Verdict = iota // the action must not reach the rail
	Hold                 // the action waits for the owner's approval
	Allow                // the action may proceed
)

func (v Verdict) valid() bool { return v >= Block && v <= Allow }

// String names the verdict as the API and the ledger spell it.
func (v Verdict) String() string {
	switch v {
	case Block:
		return "BLOCK"
	case Hold:
		return "HOLD"
	case Allow:
		return "ALLOW"
	}
	return fmt.Sprintf("INVALID(%d)", int(v))
}

// Proto converts v to the wire enum; an out-of-range verdict is BLOCK.
func (v Verdict) Proto() countersignv1.Verdict {
	switch v {
	case Allow:
		return countersignv1.Verdict_VERDICT_ALLOW
	case Hold:
		return countersignv1.Verdict_VERDICT_HOLD
	}
	return countersignv1.Verdict_VERDICT_BLOCK
}

// Meet is the most restrictive of vs: any Block wins, then any Hold. Meet()
// is Allow, the identity. An out-of-range verdict counts as Block.
func Meet(vs ...Verdict) Verdict {
	m := Allow
	for _, v := range vs {
		if !v.valid() {
			return Block
		}
		m = min(m, v)
	}
	return m
}

// Gate names, as stored with a decision.
const (
	GateScope      = "G1_scope"
	GateValue      = "G2_value"
	GateLimits     = "G3_limits"
	GateAdvisory   = "G5_advisory"
	GateProvenance = "G6_provenance"
)

// Result is one gate's verdict on one proposed action.
type Result struct {
	Gate    string // GateScope, …
	Verdict Verdict
	// ReasonCode is stable and snake_case (the Reason* constants).
	ReasonCode string
	// Reason is a sentence the agent or owner can act on, carrying the
	// numbers in major units: "2,500.00 USD exceeds the 1,899.00 USD still
	// refundable on pay_1002".
	Reason string
}

// Proto converts r to the wire message stored with the decision.
func (r Result) Proto() *countersignv1.GateResult {
	return &countersignv1.GateResult{Gate: r.Gate, Verdict: r.Verdict.Proto(), ReasonCode: r.ReasonCode, Reason: r.Reason}
}

// Ladder meets the results' verdicts and returns them, in the order given,
// for the decision record. A result with an out-of-range verdict is
// returned as BLOCK verdict_invalid. No results at all is BLOCK: nothing
// said yes.
func Ladder(results ...Result) (Verdict, []Result) {
	if len(results) == 0 {
		return Block, []Result{{Verdict: Block, ReasonCode: ReasonNoGates, Reason: "No gate judged the action, so it is refused."}}
	}
	out := make([]Result, len(results))
	v := Allow
	for i, r := range results {
		if !r.Verdict.valid() {
			r = Result{Gate: r.Gate, Verdict: Block, ReasonCode: ReasonVerdictInvalid,
				Reason: fmt.Sprintf("Gate %s returned verdict %d, which is not BLOCK, HOLD or ALLOW (was %s: %s).", r.Gate, int(r.Verdict), r.ReasonCode, r.Reason)}
		}
		out[i] = r
		v = Meet(v, r.Verdict)
	}
	return v, out
}

// Primary is the result that explains the ladder's verdict to the agent: the
// first, in ladder order, whose verdict is the meet. Ladder order runs the
// cheapest gate first, so its reason is the one named in a refusal.
func Primary(results []Result) Result {
	v, rs := Ladder(results...)
	for _, r := range rs {
		if r.Verdict == v {
			return r
		}
	}
	return rs[0] // unreachable: the meet is one of the verdicts
}
