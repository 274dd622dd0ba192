package server

import (
	"context"
	"testing"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/testing/mockrail"
)

// TestApprovedActionRefusedByTheRailIsHeldAgainForTheOwner: under an
// approval_required mandate an approved refund that the rail refuses
// (FAILED_TERMINAL) is, when tried again, held for a new approval — one the
// owner can see and approve — and the first approval, already used, does
// not let it through a second time.
func TestApprovedActionRefusedByTheRailIsHeldAgainForTheOwner(t *testing.T) {
	h := bareRailHarness(t)
	m := mandateFor(h)
	m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
	applyMandateTo(t, h, m)
	base := egress(t, h)
	ctx := context.Background()

	const form = "payment_intent=pi_bench&amount=1500"
	approve := func() {
		t.Helper()
		l, err := owners(h).ListApprovals(ctx, &countersignv1.ListApprovalsRequest{State: countersignv1.ApprovalState_APPROVAL_STATE_PENDING})
		if err != nil || len(l.GetApprovals()) != 1 {
			t.Fatalf("pending approvals: %v, %v; want exactly one for the owner to decide", l.GetApprovals(), err)
		}
		ap := l.GetApprovals()[0]
		if _, err := owners(h).ApproveApproval(ctx, &countersignv1.ApproveApprovalRequest{ApprovalId: ap.GetApprovalId(),
			RequestFingerprint: ap.GetRequestFingerprint()}); err != nil {
			t.Fatal(err)
		}
	}
	if a := refundVia(t, base, h.secret, form); a.status != 403 || a.headers.Get("X-Countersign-Verdict") != "HOLD" {
		t.Fatalf("first request: %d %s", a.status, a.body)
	}
	approve()
	// The rail declines the approved request: a definite refusal.
	if err := h.mock.SetFaults(mockrail.Fault{Profile: mockrail.FaultDeclineBeforeApply, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if a := refundVia(t, base, h.secret, form); a.status != 402 || a.headers.Get("X-Countersign-Verdict") != "" {
		t.Fatalf("the approved request should reach the rail and be refused there: %d %s %v", a.status, a.body, a.headers)
	}
	// Tried again: held, with a new approval to decide (the first is used).
	if a := refundVia(t, base, h.secret, form); a.status != 403 || a.headers.Get("X-Countersign-Verdict") != "HOLD" {
		t.Fatalf("the retry after the rail's refusal: %d %s", a.status, a.body)
	}
	approve()
	if a := refundVia(t, base, h.secret, form); a.status != 200 {
		t.Fatalf("the retry once approved again: %d %s", a.status, a.body)
	}
	if a := refundVia(t, base, h.secret, form); a.headers.Get("X-Countersign-Replay") != "true" {
		t.Fatalf("the identical request after it applied: %d %s", a.status, a.body)
	}
	if n := refundsOf(h.mock.Journal()); n != 1 {
		t.Fatalf("%d refunds on the rail, want 1", n)
	}
}
