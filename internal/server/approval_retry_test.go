package server

import (
	"context"
	"net/http"
	"testing"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/engine"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
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

// TestOwnersRejectionOfARetrySticks: an approved request the rail declined
// (FAILED_TERMINAL) is held for the owner again when re-sent; the owner
// rejects that approval, and the identical request is then refused for
// good (intent_blocked), as a rejected held request is. Before, the
// rejection moved nothing: every re-send opened a new approval, and one
// tired "yes" later the refund left (found by a review).
func TestOwnersRejectionOfARetrySticks(t *testing.T) {
	h := bareRailHarness(t)
	m := mandateFor(h)
	m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
	m.Budgets = []*countersignv1.Money{{Currency: "USD", AmountMinor: 1 << 40}}
	hash := applyMandateTo(t, h, m)
	base := egress(t, h)
	ctx := context.Background()
	const form = "payment_intent=pi_bench&amount=1500"
	pending := func() *countersignv1.Approval {
		t.Helper()
		l, err := owners(h).ListApprovals(ctx, &countersignv1.ListApprovalsRequest{State: countersignv1.ApprovalState_APPROVAL_STATE_PENDING})
		if err != nil || len(l.GetApprovals()) != 1 {
			t.Fatalf("pending approvals: %v, %v", l.GetApprovals(), err)
		}
		return l.GetApprovals()[0]
	}
	if a := refundVia(t, base, h.secret, form); a.headers.Get("X-Countersign-Verdict") != "HOLD" {
		t.Fatalf("the first send = %d %.200s, want HOLD", a.status, a.body)
	}
	ap := pending()
	if _, err := owners(h).ApproveApproval(ctx, &countersignv1.ApproveApprovalRequest{ApprovalId: ap.GetApprovalId(), RequestFingerprint: ap.GetRequestFingerprint()}); err != nil {
		t.Fatal(err)
	}
	if err := h.mock.SetFaults(mockrail.Fault{Profile: mockrail.FaultDeclineBeforeApply, Count: 1}); err != nil {
		t.Fatal(err)
	}
	if a := refundVia(t, base, h.secret, form); a.status != http.StatusPaymentRequired {
		t.Fatalf("the approved send = %d %.200s, want the rail's decline", a.status, a.body)
	}
	if a := refundVia(t, base, h.secret, form); a.headers.Get("X-Countersign-Verdict") != "HOLD" {
		t.Fatalf("the retry = %d %.200s, want HOLD", a.status, a.body)
	}
	retry := pending()
	if _, err := owners(h).RejectApproval(ctx, &countersignv1.RejectApprovalRequest{ApprovalId: retry.GetApprovalId(), Note: "no: do not retry this"}); err != nil {
		t.Fatal(err)
	}
	got, err := owners(h).GetIntent(ctx, &countersignv1.GetIntentRequest{RailAccount: "acct_bench", Sik: retry.GetSik()})
	if err != nil || got.GetIntent().GetState() != countersignv1.IntentState_INTENT_STATE_BLOCKED {
		t.Fatalf("the intent after the owner rejected its retry = %v, %v; want BLOCKED", got.GetIntent().GetState(), err)
	}
	for range 2 {
		a := refundVia(t, base, h.secret, form)
		if a.headers.Get("X-Countersign-Reason") != engine.ReasonIntentBlocked || a.status == http.StatusOK {
			t.Fatalf("the identical request after the rejection = %d %q %.200s; want refused %s", a.status,
				a.headers.Get("X-Countersign-Reason"), a.body, engine.ReasonIntentBlocked)
		}
	}
	l, err := owners(h).ListApprovals(ctx, &countersignv1.ListApprovalsRequest{State: countersignv1.ApprovalState_APPROVAL_STATE_PENDING})
	if err != nil || len(l.GetApprovals()) != 0 {
		t.Fatalf("pending approvals after the rejection = %v, %v; want none", l.GetApprovals(), err)
	}
	if n := refundsOf(h.mock.Journal()); n != 0 {
		t.Fatalf("%d refunds on the rail, want none", n)
	}

	// Should the rail say later that the declined attempt applied after
	// all, the intent stays BLOCKED and its amount is held again.
	k := ledger.Key{RailAccount: "acct_bench", SIK: retry.GetSik()}
	it, err := h.store.Commit(ctx, ledger.AttemptResult{Key: k, Seq: 1, Outcome: ledger.OutcomeApplied, EntityID: "re_late",
		Response: &ledger.HTTPMessage{Status: http.StatusOK, Body: []byte(`{"id":"re_late"}`)}})
	if err != nil || it.State != intent.Blocked {
		t.Fatalf("a late applied = %+v, %v; want the intent still BLOCKED", it.State, err)
	}
	if b, err := h.store.Budgets(ctx, hash); err != nil || len(b) != 1 || b[0].Held != 1500 {
		t.Fatalf("budget = %+v, %v; want the 1500 that left held again", b, err)
	}
}
