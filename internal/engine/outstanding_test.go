package engine

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/testing/mockrail"
)

// applyHook runs hook once, just before the first Apply (a fresh write).
type applyHook struct {
	*ledger.Store
	hook func()
	once sync.Once
}

func (l *applyHook) Apply(ctx context.Context, w *ledger.Write) error {
	l.once.Do(l.hook)
	return l.Store.Apply(ctx, w)
}

// TestARefundAppliedAfterTheReadIsCounted: refund A (500 of a 1000
// payment) is IN_FLIGHT; refund B (600) reads the rail before A applies
// there, so the read shows 1000 refundable; A is recorded APPLIED before
// B's write. B's write must still count A, which its read could not show:
// before, only IN_FLIGHT, UNKNOWN and RECONCILING intents were counted as
// outstanding, so B was allowed, 1100 on a 1000 payment (found by a
// review; Stripe and Razorpay refuse such a refund themselves, a payment
// MCP server may not).
func TestARefundAppliedAfterTheReadIsCounted(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	if _, err := r.mock.AddPayment(mockrail.Payment{Rail: mockrail.Stripe, ID: "pi_late", Amount: 1000, Currency: "usd"}); err != nil {
		t.Fatal(err)
	}
	reqA := r.refund()
	reqA.Body = []byte("payment_intent=pi_late&amount=500")
	a := r.e.Decide(ctx, reqA)
	if a.Verdict != Allow {
		t.Fatalf("A = %s %s", a.ReasonCode, a.Reason)
	}
	// A is answered applied after B's read and before B's write. (The
	// mock rail has not recorded A's refund: B's read shows 1000.)
	r.e.ledger = &applyHook{Store: r.store, hook: func() {
		body := []byte(`{"id":"re_late","object":"refund","status":"succeeded","amount":500,"currency":"usd","payment_intent":"pi_late"}`)
		it, _, err := r.e.Commit(ctx, *a.Intent, rail.Response{Status: 200, Headers: map[string]string{"content-type": "application/json"}, Body: body})
		if err != nil || it.State != intent.Applied {
			t.Errorf("commit A = %s, %v", it.State, err)
		}
	}}
	reqB := r.refund()
	reqB.Body = []byte("payment_intent=pi_late&amount=600")
	if b := r.e.Decide(ctx, reqB); b.Verdict == Allow {
		t.Fatalf("B allowed (%s): 500 + 600 of a 1000 payment, on a rail read older than A's APPLIED record", b.Reason)
	}
	// What fits beside A is still allowed.
	reqC := r.refund()
	reqC.Body = []byte("payment_intent=pi_late&amount=400")
	if c := r.e.Decide(ctx, reqC); c.Verdict != Allow {
		t.Fatalf("C = %s %s %s: 500 + 400 of a 1000 payment fits", c.Verdict, c.ReasonCode, c.Reason)
	}
}

// TestAQuarantinedRefundIsCounted: a refund quarantined (its answer did not
// match what was decided; a person settles it) may still have applied at
// the rail, so it is outstanding for the payment's next refund as an
// ambiguous one is, until its owner resolves it (found by a review: a
// second refund was valued as if the quarantined one could not apply).
func TestAQuarantinedRefundIsCounted(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	if _, err := r.mock.AddPayment(mockrail.Payment{Rail: mockrail.Stripe, ID: "pi_q", Amount: 1000, Currency: "usd"}); err != nil {
		t.Fatal(err)
	}
	reqA := r.refund()
	reqA.Body = []byte("payment_intent=pi_q&amount=500")
	a := r.e.Decide(ctx, reqA)
	if a.Verdict != Allow {
		t.Fatalf("A = %s %s", a.ReasonCode, a.Reason)
	}
	it, err := r.store.Commit(ctx, ledger.AttemptResult{Key: ledger.Key{RailAccount: a.Intent.RailAccount, SIK: a.Intent.SIK},
		Seq: a.Intent.AttemptSeq, Outcome: ledger.OutcomeFingerprintMismatch, Reason: "the rail made something else"})
	if err != nil || it.State != intent.Quarantined {
		t.Fatalf("A committed as %s, %v; want QUARANTINED", it.State, err)
	}
	reqB := r.refund()
	reqB.Body = []byte("payment_intent=pi_q&amount=600")
	if b := r.e.Decide(ctx, reqB); b.Verdict == Allow {
		t.Fatalf("B allowed (%s): 600 beside a quarantined 500 of a 1000 payment", b.Reason)
	} else if !strings.Contains(b.Reason, "quarantined until its owner resolves it") {
		// A quarantined refund that did apply is counted twice until it is
		// resolved: the refusal says why (found by a review).
		t.Errorf("B's refusal does not say a quarantined refund is counted: %s", b.Reason)
	}
	reqC := r.refund()
	reqC.Body = []byte("payment_intent=pi_q&amount=400")
	if c := r.e.Decide(ctx, reqC); c.Verdict != Allow {
		t.Fatalf("C = %s %s %s: 400 beside a quarantined 500 of a 1000 payment fits", c.Verdict, c.ReasonCode, c.Reason)
	}
}
