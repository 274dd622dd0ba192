// Package gate holds the deterministic gates of the ladder (DESIGN.md §5):
// G1 scope, G6 provenance, G2 value, G3 limits and the optional G5 advisory
// gate. Each gate is a pure function of an [Input] the engine and ledger have
// already resolved: no I/O, no SQL, no clock (the time is Input.Now), so the
// same Input always yields the same verdict and reason, and a stored
// decision can be re-derived and explained.
//
// Verdicts combine as a meet over BLOCK < HOLD < ALLOW; BLOCK absorbs. The
// zero [Verdict] is BLOCK, so a result nobody filled in denies (F1).
//
// Purity is not atomicity. G3 judges budgets and windows from [Usage], and
// its ALLOW is only as good as the moment Usage was read: the ledger must
// read Usage under the mandate's budget row lock (SELECT … FOR UPDATE), call
// [Evaluate], and write the intent and its budget hold in that same
// transaction (invariant B1). Read outside that lock, two concurrent
// decisions each see room for one and both take it.
package gate
