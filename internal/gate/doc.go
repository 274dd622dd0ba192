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
// its ALLOW is only as good as the moment Usage was read. Either the
// ledger reads Usage under the mandate's usage lock (SELECT … FOR UPDATE),
// [Evaluate] runs, and the intent and its budget hold are written in that
// same transaction; or [Evaluate] runs on [Uncounted] input and the
// transaction that writes the intent asserts, under that lock, that the
// real counts are within [HeadroomOf] (the budget by its row's CHECK),
// which gives the same verdict exactly (invariant B1). Read outside the
// lock and not asserted, two concurrent decisions each see room for one
// and both take it.
package gate
