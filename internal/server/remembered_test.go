package server

import (
	"testing"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// TestRememberedFactsFollowTheLedger: a refusal by the early limits is
// decided on the principal and mandate the engine remembers from the
// agent's last decision, unread — and each time the ledger moved under
// them, the decision follows the ledger: a newer mandate that allows more
// is obeyed at once, and a request seen before is answered by its intent,
// not refused by a lower limit remembered since. (The revocations are
// TestRevocationStopsTheVeryNextDecision's.)
func TestRememberedFactsFollowTheLedger(t *testing.T) {
	h := bareRailHarness(t)
	withMax := func(purpose string, max int64) {
		m := mandateFor(h)
		m.Purpose = purpose
		m.Grants[0].MaxAmountMinor = max
		applyMandateTo(t, h, m)
	}
	verdict := func(r *countersignv1.DecideResponse) string { return r.GetVerdict().String() + " " + r.GetReasonCode() }

	withMax("max 1000", 1000)
	allowed := h.allow(t, 800)
	h.sendAndCommit(t, allowed, "pi_bench", 800)
	for range 2 { // read, then remembered
		if r := h.decide(t, refund("pi_bench", 1500, "a")); r.GetReasonCode() != "amount_above_maximum" {
			t.Fatalf("1500 under a maximum of 1000: %s", verdict(r))
		}
	}

	withMax("max 2000", 2000)
	if r := h.decide(t, refund("pi_bench", 1500, "a")); r.GetVerdict() != countersignv1.Verdict_VERDICT_ALLOW {
		t.Fatalf("1500 after a mandate allowing 2000 replaced the one allowing 1000: %s", verdict(r))
	}

	withMax("max 500", 500)
	if r := h.decide(t, refund("pi_bench", 600, "b")); r.GetReasonCode() != "amount_above_maximum" {
		t.Fatalf("600 under a maximum of 500: %s", verdict(r))
	}
	// The 800 applied at the start, again: remembered, the limit of 500
	// refuses it; but it was seen before, and its intent answers it.
	r := h.decide(t, refund("pi_bench", 800, ""))
	if r.GetReasonCode() == "amount_above_maximum" || r.GetIntent().GetSik() != allowed.GetIntent().GetSik() {
		t.Fatalf("the applied 800 sent again: %s (intent %s), want the answer of intent %s", verdict(r), r.GetIntent().GetSik(), allowed.GetIntent().GetSik())
	}
	t.Logf("the applied 800 sent again under a maximum of 500: %s", verdict(r))
}
