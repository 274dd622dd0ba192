package server

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/testing/mockrail"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// TestApprovalLiveReadsTheRailOnlyWhileItCounts: GetApproval reads a held
// refund's balance at the rail only while the approval is pending or
// approved and its owner holds the rail account. A decided approval, and
// any approval after the operator withdraws the account, is answered
// without a rail read and says why, so a former owner cannot keep reading
// the account's payments.
func TestApprovalLiveReadsTheRailOnlyWhileItCounts(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	h := railHarnessOn(t, url)
	for _, id := range []string{"pi_kept", "pi_rejected"} {
		if _, err := h.mock.AddPayment(mockrail.Payment{Rail: mockrail.Stripe, ID: id, Amount: 10000, Currency: "usd"}); err != nil {
			t.Fatal(err)
		}
	}
	m := mandateFor(h)
	m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
	applyMandateTo(t, h, m)
	kept := pendingApproval(t, h, h.decide(t, refund("pi_kept", 4000, "")).GetIntent().GetSik())
	rejected := pendingApproval(t, h, h.decide(t, refund("pi_rejected", 4000, "")).GetIntent().GetSik())
	client, octx := ownerGRPC(h)
	if _, err := client.RejectApproval(octx, &countersignv1.RejectApprovalRequest{ApprovalId: rejected.GetApprovalId(), Note: "no"}); err != nil {
		t.Fatal(err)
	}
	railGETs := func() int {
		n := 0
		for _, r := range h.mock.Journal().Requests {
			if r.Method == "GET" {
				n++
			}
		}
		return n
	}
	// get answers GetApproval of id and how many times it read the rail.
	get := func(id string) (*countersignv1.GetApprovalResponse, int) {
		t.Helper()
		n := railGETs()
		g, err := client.GetApproval(octx, &countersignv1.GetApprovalRequest{ApprovalId: id})
		if err != nil {
			t.Fatalf("GetApproval(%s): %v", id, err)
		}
		return g, railGETs() - n
	}
	noRead := func(what, id string, state countersignv1.ApprovalState, why string) {
		t.Helper()
		g, reads := get(id)
		l := g.GetLive()
		if reads != 0 || l.GetRefundable() != nil || l.GetRailRefundable() != nil || l.GetMandateUsage() != nil {
			t.Errorf("%s: %d rail reads, live = %v; want none", what, reads, l)
		}
		if g.GetApproval().GetState() != state || !strings.Contains(l.GetRefundableError(), why) {
			t.Errorf("%s: state %s, refundable_error %q; want %s and %q", what, g.GetApproval().GetState(), l.GetRefundableError(), state, why)
		}
	}

	// Pending on a held account: read, once (the count can see a read).
	if g, reads := get(kept.GetApprovalId()); reads != 1 || g.GetLive().GetRefundable().GetAmountMinor() != 10000 {
		t.Fatalf("pending, held: %d rail reads, live = %v; want 1 read and 10000 refundable", reads, g.GetLive())
	}
	noRead("rejected", rejected.GetApprovalId(), countersignv1.ApprovalState_APPROVAL_STATE_REJECTED, "the approval is rejected")

	// The operator withdraws the account: its approvals are void.
	if _, err := h.store.RevokeRailAccount(ctx, "acct_bench", h.ownerID); err != nil {
		t.Fatal(err)
	}
	noRead("void after withdrawal", kept.GetApprovalId(), countersignv1.ApprovalState_APPROVAL_STATE_VOID, "the approval is void")

	// One left pending on the withdrawn account (stored so by hand): the
	// account is no longer the owner's, so still no read.
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)
	for _, q := range []string{`ALTER TABLE approvals DISABLE TRIGGER approvals_guard`,
		`UPDATE approvals SET state = 'pending', decided_at = NULL WHERE id = '` + kept.GetApprovalId() + `'`,
		`ALTER TABLE approvals ENABLE TRIGGER approvals_guard`} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	noRead("pending on a withdrawn account", kept.GetApprovalId(), countersignv1.ApprovalState_APPROVAL_STATE_PENDING,
		"you no longer hold rail account acct_bench")
}
