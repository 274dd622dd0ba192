package engine

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/testing/testclock"
)

// TestOwnersRejectionOutlivesTheIdempotencyWindow: under a ten-minute
// idempotency window for payouts, a payout the owner rejected is refused
// for good: the identical payout a second, a window and five windows later
// is the rejected intent (intent_blocked), with no new approval for the
// owner to answer. It used to be the family's next generation once the
// window had passed since the rejection, a new intent and a new approval
// (a review's finding: an agent wears its owner down one window at a
// time). A new payout needs x-countersign-distinct, and is held afresh.
func TestOwnersRejectionOutlivesTheIdempotencyWindow(t *testing.T) {
	const window = 10 * time.Minute
	r := newRig(t, func(m *countersignv1.Mandate) {
		m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
		m.Grants = append(m.Grants, &countersignv1.Grant{ActionKind: countersignv1.ActionKind_ACTION_KIND_PAYOUT, MaxAmountMinor: 1 << 40, Currencies: []string{"USD"}})
		m.Idempotency = []*countersignv1.IdempotencySetting{{ActionKind: countersignv1.ActionKind_ACTION_KIND_PAYOUT, Window: durationpb.New(window)}}
	})
	clock := testclock.New(time.Now())
	r.e.now = clock.Now
	ctx := context.Background()
	payout := func(distinct string) Outcome {
		req := r.refund()
		req.Path, req.Body = "/v1/payouts", []byte("amount=500000&currency=usd&destination=ba_1")
		if distinct != "" {
			req.Headers = map[string]string{"content-type": "application/x-www-form-urlencoded", DistinctHeader: distinct}
		}
		return r.e.Decide(ctx, req)
	}

	held := payout("")
	expect(t, held, Hold, "approval_required")
	rows := r.approvalRows(t)
	if len(rows) != 1 {
		t.Fatalf("%d approvals after the first payout; want 1", len(rows))
	}
	if _, err := r.store.Reject(ctx, rows[0].owner, rows[0].id, "no"); err != nil {
		t.Fatal(err)
	}
	rejectedAt := time.Now()
	for _, after := range []time.Duration{time.Second, window + time.Minute, 5 * window} {
		clock.Set(rejectedAt.Add(after))
		again := payout("")
		if again.Verdict != Block || again.ReasonCode != ReasonIntentBlocked || again.Intent == nil || again.Intent.SIK != held.Intent.SIK {
			t.Fatalf("the rejected payout sent again %s after the rejection = %s %s on %v; want the rejected intent %s, refused",
				after, again.Verdict, again.ReasonCode, again.Intent, held.Intent.SIK)
		}
		if n := len(r.approvalRows(t)); n != 1 {
			t.Fatalf("%d approvals after the rejected payout was sent again %s later; want the one rejected", n, after)
		}
	}

	// A payout with a stated reason is another action, for the owner again.
	distinct := payout("the owner asked for a second payout")
	expect(t, distinct, Hold, "approval_required")
	if distinct.Intent == nil || distinct.Intent.SIK == held.Intent.SIK {
		t.Fatalf("the distinct payout is intent %v; want a new one, not the rejected %s", distinct.Intent, held.Intent.SIK)
	}
}
