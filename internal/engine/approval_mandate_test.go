package engine

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/mandate"
	"github.com/countersign/countersign/internal/metrics"
)

type mandateApproval struct {
	state, mandateHash string
	ttl                time.Duration
}

// mandateApprovals lists the rig's approvals, oldest first, with the
// mandate each was opened under and the lifetime it was given.
func (r *rig) mandateApprovals(t *testing.T) []mandateApproval {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, r.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT state, mandate_hash, expires_at - created_at FROM approvals ORDER BY created_at, id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (mandateApproval, error) {
		var a mandateApproval
		return a, row.Scan(&a.state, &a.mandateHash, &a.ttl)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestApprovalUnderAReplacedMandateIsNotUsed: the owner approves a held
// refund under M1, whose approvals live 7 days, then replaces M1 with M2,
// whose approvals live an hour. Once M2 is in force, the identical request
// is held again under M2: the approval given under M1 is voided, not used,
// and the new one is M2's, with M2's lifetime. M2 here takes effect after
// it is stored, so storing it voids nothing and only the gate ladder stands
// between the old approval and the rail. Before, the ladder used the live
// approval whatever mandate it was opened under, and the refund was sent
// under M2 on M1's approval (found by a review).
func TestApprovalUnderAReplacedMandateIsNotUsed(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, func(m *countersignv1.Mandate) {
		m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
		m.ApprovalTtl = durationpb.New(7 * 24 * time.Hour)
	})
	held := r.e.Decide(ctx, r.refund())
	expect(t, held, Hold, "approval_required")
	r.approveLive(t)

	// M2 takes effect in 20 minutes; an engine whose clock reads 30
	// minutes on decides under it (the credential lasts an hour).
	now := time.Now().Truncate(time.Second)
	p := r.principal(t)
	m2 := &countersignv1.Mandate{
		Rail: countersignv1.Rail_RAIL_STRIPE, RailAccount: "acct_1", AgentId: p.Agent.ID, Purpose: "M2 replaces M1",
		ValidFrom: timestamppb.New(now.Add(20 * time.Minute)), ValidUntil: timestamppb.New(now.Add(24 * time.Hour)),
		Mode:        countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED,
		ApprovalTtl: durationpb.New(time.Hour),
		Grants:      []*countersignv1.Grant{{ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND, MaxAmountMinor: 1 << 40, Currencies: []string{"USD"}}},
	}
	rec, err := mandate.Record(m2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.CreateMandate(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if got := r.mandateApprovals(t); len(got) != 1 || got[0].state != "approved" || got[0].mandateHash != r.mandateHash {
		t.Fatalf("approvals once M2 is stored = %+v; want M1's still approved (M2 is not in force yet)", got)
	}
	opts := r.e.opts
	opts.Now = func() time.Time { return time.Now().Add(30 * time.Minute) }
	e := New(r.store, opts, slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New())

	again := e.Decide(ctx, r.refund())
	expect(t, again, Hold, "approval_required")
	if _, atts := r.attempts(t, again.Intent); len(atts) != 0 {
		t.Fatalf("the request made %d attempts under M2 on M1's approval", len(atts))
	}
	want := []mandateApproval{{"void", r.mandateHash, 7 * 24 * time.Hour}, {"pending", rec.Hash, time.Hour}}
	if got := r.mandateApprovals(t); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("approvals = %+v; want %+v (M1's void, a new one under M2 with M2's lifetime)", got, want)
	}
	// The owner approves under M2: that approval lets the request go.
	r.approveLive(t)
	expect(t, e.Decide(ctx, r.refund()), Allow, "allowed")
	if got := r.mandateApprovals(t); got[1].state != "used" {
		t.Fatalf("approvals = %+v; want M2's used", got)
	}
}
