// Package sim is a deterministic simulation of Countersign's engine in one
// process: the real engine, reconciler and ledger (on a PostgreSQL whose
// now() is a fake clock), the in-process mock rail on the same fake clock,
// and simulated agents, driven by one seed.
//
// A seed decides everything that varies: the rail (Stripe, whose lists
// page by cursor, or Razorpay, whose lists page by offset), when agents ask
// for refunds and whether two of them ask for the same one, which rail
// fault hits each
// money-moving call (timeout after apply, reset before apply, 5xx after
// apply, another entity's body), replica lag on listings, bursts of refunds
// made straight at the rail that push an intent's entity to later listing
// pages (some landing between two pages of a listing), when the
// Countersign process crashes (at any step boundary of a
// request, or between two listing pages of a reconciliation) and for how
// long it stays down (seconds, minutes, or days — past the rail's
// idempotency-key retention), and when agents retry.
//
// Time is simulated: a discrete-event loop pops the next event, moves the
// fake clock (the database's and the rail's) to it, and runs it to
// completion. Nothing runs concurrently, so a seed replays exactly: the same
// seed gives the same trace, event by event.
//
// After every event the invariants are checked against the ledger and the
// rail's journal:
//
//   - at most one rail effect per intent (per SIK, across attempts);
//   - an APPLIED intent names an entity that carries its stamp;
//   - budget holds never above budgets (held + spent ≤ budget), and the
//     money that really moved under a budget never above it;
//   - nothing IN_FLIGHT, UNKNOWN or RECONCILING for longer than the
//     reconcile bound (counted in the process's up time);
//   - the seed's rail account's audit log, sealed at every check, verifies
//     (records, checkpoints, each intent's path) with nothing left unsealed.
//
// When every agent is done and the ledger is quiet, the ledger must agree
// with the journal: an intent with an effect is APPLIED with that entity,
// an intent without one is not, and the budget's spent amount is what
// moved.
package sim
