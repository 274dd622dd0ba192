// Package ledgertest puts intents into a test's ledger the way the engine
// does, for tests of what reads or moves them afterwards (the owner API,
// the outbox). It is test support: no production binary links it.
package ledgertest

import (
	"context"
	"time"

	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
)

// InFlight writes a new intent whose gates passed and its first attempt,
// stamped stamp, in one transaction (the engine's fresh write without the
// decision and the assertions).
func InFlight(ctx context.Context, store *ledger.Store, ni ledger.NewIntent, stamp string) error {
	w := ledger.NewWrite()
	it, err := w.NewIntent(ni, "", intent.GatesPassed, intent.AttemptStarted)
	if err != nil {
		return err
	}
	if _, err := w.StartAttempt(ledger.AttemptStart{Key: ni.Key, Seq: it.AttemptCount, Stamp: stamp,
		LeaseOwner: "test", LeaseTTL: time.Minute, Request: ledger.HTTPMessage{Method: "POST", Path: "/v1/refunds"}}); err != nil {
		return err
	}
	return store.Apply(ctx, w)
}
