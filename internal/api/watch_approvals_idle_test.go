package api

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/testing/wait"
)

// TestWatchApprovalsIdleStreamReadsOnlyTheMark: an idle WatchApprovals
// stream polls the live set's mark and does not read the set again until
// the mark changes; a change is still sent within a few polls.
func TestWatchApprovalsIdleStreamReadsOnlyTheMark(t *testing.T) {
	srv, store, conn := servedOwnerAPI(t)
	var polls, setReads atomic.Int64
	srv.approvalsPolled = func(readSet bool) {
		if readSet {
			setReads.Add(1)
		}
		polls.Add(1)
	}
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-test-owner", "own_idle"), 30*time.Second)
	defer cancel()
	agent, err := store.CreateAgent(ctx, "own_idle", "bot")
	if err != nil {
		t.Fatal(err)
	}
	k := ledger.Key{RailAccount: "acct_idle", SIK: strings.Repeat("I", 32)}
	if err := store.InTx(ctx, func(tx *ledger.Tx) error {
		it, _, err := tx.CreateIntent(ctx, ledger.NewIntent{Key: k, Rail: "stripe", Action: "refund", Subject: "pi_idle",
			AmountMinor: 100, Currency: "USD", Canonical: `{"n":1}`, AgentID: agent.ID})
		if err != nil {
			return err
		}
		if it, err = tx.Transition(ctx, it, intent.GatesHeld, ledger.TransitionOpts{Reason: "needs approval"}); err != nil {
			return err
		}
		return tx.OpenApproval(ctx, it, ledger.ApprovalSpec{TTL: time.Hour})
	}); err != nil {
		t.Fatal(err)
	}

	stream, err := countersignv1.NewOwnerServiceClient(conn).WatchApprovals(ctx, &countersignv1.WatchApprovalsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil || first.GetApproval().GetState() != countersignv1.ApprovalState_APPROVAL_STATE_PENDING {
		t.Fatalf("the live set: %v, %v", first, err)
	}
	if m, err := stream.Recv(); err != nil || !m.GetSynced() {
		t.Fatalf("after the live set: %v, %v; want the synced marker", m, err)
	}
	id := first.GetApproval().GetApprovalId()

	// idle waits for n more polls and checks none of them read the set.
	idle := func(what string, n int64) {
		t.Helper()
		from, reads := polls.Load(), setReads.Load()
		if !wait.Until(10*time.Second, func() bool { return polls.Load() >= from+n }) {
			t.Fatalf("%s: %d polls in 10s, want %d", what, polls.Load()-from, n)
		}
		if got := setReads.Load(); got != reads {
			t.Fatalf("%s: %d polls read the live set %d times, want none", what, polls.Load()-from, got-reads)
		}
	}
	idle("idle after the initial set", 4)

	// A change is read once and sent promptly.
	got := make(chan *countersignv1.WatchApprovalsResponse, 1)
	go func() {
		m, _ := stream.Recv()
		got <- m
	}()
	if _, err := store.Approve(ctx, "own_idle", id, "", "ok"); err != nil {
		t.Fatal(err)
	}
	var m *countersignv1.WatchApprovalsResponse
	if !wait.Until(2*time.Second, func() bool {
		select {
		case m = <-got:
			return true
		default:
			return false
		}
	}) {
		t.Fatal("the approval was not sent within 2s of being approved")
	}
	if m.GetApproval().GetApprovalId() != id || m.GetApproval().GetState() != countersignv1.ApprovalState_APPROVAL_STATE_APPROVED {
		t.Fatalf("sent %v, want %s APPROVED", m, id)
	}
	// The change was read once, or twice when it landed between a poll's
	// mark and its read of the set (the next mark differs); then no more.
	from := polls.Load()
	if !wait.Until(10*time.Second, func() bool { return polls.Load() >= from+1 }) {
		t.Fatal("no poll after the change")
	}
	if r := setReads.Load(); r != 2 && r != 3 {
		t.Fatalf("the live set was read %d times by the change, want 1 or 2", r-1)
	}
	idle("idle after the change", 4)
}
