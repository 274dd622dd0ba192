package gate

// Evaluate runs the ladder on in: G1 scope first (cheapest), then G6
// provenance, G2 value, G3 limits and G5 advisory, and returns the meet of
// their verdicts with one result per gate, always five, in that order.
//
// Every deterministic gate runs even after another has blocked, so the
// stored decision shows every reason the action fails, and the agent can
// fix them all at once; they are pure and cheap. The advisory gate is the
// exception: once a deterministic gate has blocked, no advisor can change
// the verdict, and an advisor may be costly or send the action elsewhere to
// be judged, so G5 is recorded as not_evaluated instead of run.
func Evaluate(in Input, advisors ...Advisor) (Verdict, []Result) {
	results := []Result{CheckScope(in), CheckProvenance(in), CheckValue(in), CheckLimits(in)}
	v, _ := Ladder(results...)
	if v == Block {
		results = append(results, block(GateAdvisory, ReasonNotEvaluated, "Advisory gates do not run once a deterministic gate has blocked the action."))
	} else {
		results = append(results, CheckAdvisory(in, advisors...))
	}
	return Ladder(results...)
}
