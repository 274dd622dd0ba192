package server

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/api"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// owners is the owner API as the bench agent's owner sees it.
func owners(h *allowHarness) *api.OwnerServer {
	return api.NewOwnerServer(h.store, func(context.Context) (string, error) { return h.ownerID, nil })
}

func pendingApproval(t *testing.T, h *allowHarness, sik string) *countersignv1.Approval {
	t.Helper()
	l, err := owners(h).ListApprovals(context.Background(), &countersignv1.ListApprovalsRequest{State: countersignv1.ApprovalState_APPROVAL_STATE_PENDING})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range l.GetApprovals() {
		if a.GetSik() == sik {
			return a
		}
	}
	t.Fatalf("no pending approval for %s in %v", sik, l.GetApprovals())
	return nil
}

// TestHoldApproveAllowOnce: under an approval_required mandate a refund is
// HELD; the owner approves that exact request; the identical request is
// ALLOWED once; a request that differs by one minor unit is a new HOLD.
func TestHoldApproveAllowOnce(t *testing.T) {
	h := bareRailHarness(t)
	m := mandateFor(h)
	m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
	applyMandateTo(t, h, m)

	held := h.decide(t, refund("pi_bench", 1500, ""))
	if held.GetVerdict() != countersignv1.Verdict_VERDICT_HOLD || held.GetIntent().GetSik() == "" {
		t.Fatalf("first request: %s %s %s", held.GetVerdict(), held.GetReasonCode(), held.GetReason())
	}
	// The HOLD says once what to do.
	if n := strings.Count(held.GetReason(), "send the identical request"); n != 1 {
		t.Errorf("the HOLD says %d times to send the identical request: %q", n, held.GetReason())
	}
	// Before approval, the identical request stays held.
	if again := h.decide(t, refund("pi_bench", 1500, "")); again.GetVerdict() != countersignv1.Verdict_VERDICT_HOLD {
		t.Fatalf("unapproved repeat: %s", again.GetVerdict())
	}
	ap := pendingApproval(t, h, held.GetIntent().GetSik())
	if _, err := owners(h).ApproveApproval(context.Background(), &countersignv1.ApproveApprovalRequest{ApprovalId: ap.GetApprovalId(),
		RequestFingerprint: ap.GetRequestFingerprint(), Note: "ok"}); err != nil {
		t.Fatal(err)
	}
	// A request that differs by one minor unit is another action: a new HOLD.
	if other := h.decide(t, refund("pi_bench", 1501, "")); other.GetVerdict() != countersignv1.Verdict_VERDICT_HOLD || other.GetIntent().GetSik() == held.GetIntent().GetSik() {
		t.Fatalf("changed request: %s on %s", other.GetVerdict(), other.GetIntent().GetSik())
	}
	allowed := h.decide(t, refund("pi_bench", 1500, ""))
	if allowed.GetVerdict() != countersignv1.Verdict_VERDICT_ALLOW || allowed.GetIntent().GetSik() != held.GetIntent().GetSik() {
		t.Fatalf("approved request: %s %s %s", allowed.GetVerdict(), allowed.GetReasonCode(), allowed.GetReason())
	}
	used, err := owners(h).GetApproval(context.Background(), &countersignv1.GetApprovalRequest{ApprovalId: ap.GetApprovalId()})
	if err != nil || used.GetApproval().GetState() != countersignv1.ApprovalState_APPROVAL_STATE_USED {
		t.Fatalf("approval after use: %v %v", used, err)
	}
	// Used once: the same request again is the in-flight duplicate, not a
	// second allow.
	if dup := h.decide(t, refund("pi_bench", 1500, "")); dup.GetVerdict() == countersignv1.Verdict_VERDICT_ALLOW {
		t.Fatalf("the approval was used twice: %s", dup.GetReasonCode())
	}
}

// TestApprovalAfterRevocationBlocks: an approval of a request whose mandate
// was revoked cannot move money; rejecting blocks the intent for good.
func TestApprovalAfterRevocationBlocks(t *testing.T) {
	h := bareRailHarness(t)
	m := mandateFor(h)
	m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
	hash := applyMandateTo(t, h, m)
	held := h.decide(t, refund("pi_bench", 900, ""))
	ap := pendingApproval(t, h, held.GetIntent().GetSik())
	if _, err := owners(h).ApproveApproval(context.Background(), &countersignv1.ApproveApprovalRequest{ApprovalId: ap.GetApprovalId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := owners(h).RevokeMandate(context.Background(), &countersignv1.RevokeMandateRequest{MandateHash: hash, Reason: "compromised"}); err != nil {
		t.Fatal(err)
	}
	r := h.decide(t, refund("pi_bench", 900, ""))
	if r.GetVerdict() != countersignv1.Verdict_VERDICT_BLOCK {
		t.Fatalf("approved request after revocation: %s %s", r.GetVerdict(), r.GetReasonCode())
	}

	// Rejection: a fresh mandate, a new hold, rejected → BLOCK for good.
	applyMandateTo(t, h, func() *countersignv1.Mandate { m2 := mandateFor(h); m2.Mode = m.Mode; m2.Purpose = "second"; return m2 }())
	held2 := h.decide(t, refund("pi_bench", 901, ""))
	ap2 := pendingApproval(t, h, held2.GetIntent().GetSik())
	if _, err := owners(h).RejectApproval(context.Background(), &countersignv1.RejectApprovalRequest{ApprovalId: ap2.GetApprovalId(), Note: "no"}); err != nil {
		t.Fatal(err)
	}
	if r := h.decide(t, refund("pi_bench", 901, "")); r.GetVerdict() != countersignv1.Verdict_VERDICT_BLOCK || r.GetReasonCode() != "intent_blocked" {
		t.Fatalf("rejected request: %s %s", r.GetVerdict(), r.GetReasonCode())
	}
	if _, err := owners(h).ApproveApproval(context.Background(), &countersignv1.ApproveApprovalRequest{ApprovalId: ap2.GetApprovalId()}); err == nil {
		t.Fatal("a rejected approval was approved")
	}
}

// TestConcurrentApproveAndRevoke races the approved request against the
// revocation of its mandate, many times. Money moves only if the deciding
// transaction committed before the revocation did: the decision
// share-locks the mandate row, so the revocation waits for it. Commit
// order is read from PostgreSQL itself (track_commit_timestamp).
func TestConcurrentApproveAndRevoke(t *testing.T) {
	ctx := context.Background()
	cluster, err := pgtest.StartCluster(ctx, pgtest.ClusterOptions{Settings: map[string]string{"track_commit_timestamp": "on"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Close() })
	if err := cluster.CreateDatabase(ctx, "countersign", ""); err != nil {
		t.Fatal(err)
	}
	url := cluster.URL("countersign")
	if err := migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	h := railHarnessOn(t, url, unlimitedAgent)
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(ctx)

	allowedBefore, blocked := 0, 0
	for round := range 20 {
		m := mandateFor(h)
		m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
		m.Purpose = fmt.Sprintf("round %d", round)
		hash := applyMandateTo(t, h, m)
		amount := int64(1000 + round)
		held := h.decide(t, refund("pi_bench", amount, ""))
		ap := pendingApproval(t, h, held.GetIntent().GetSik())
		if _, err := owners(h).ApproveApproval(ctx, &countersignv1.ApproveApprovalRequest{ApprovalId: ap.GetApprovalId()}); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		var decided *countersignv1.DecideResponse
		wg.Add(2)
		go func() {
			defer wg.Done()
			decided = h.decide(t, refund("pi_bench", amount, ""))
		}()
		go func() {
			defer wg.Done()
			// Spread the revocation over the decision's span so both
			// interleavings happen (this varies the race; it does not
			// synchronise anything).
			time.Sleep(time.Duration(round%10) * time.Millisecond)
			if _, err := owners(h).RevokeMandate(ctx, &countersignv1.RevokeMandateRequest{MandateHash: hash, Reason: "race"}); err != nil {
				t.Error(err)
			}
		}()
		wg.Wait()
		// After the revocation has committed, nothing under the mandate moves.
		if after := h.decide(t, refund("pi_bench", amount, "")); after.GetVerdict() == countersignv1.Verdict_VERDICT_ALLOW {
			t.Fatalf("round %d: allowed after the revocation committed", round)
		}
		if decided.GetVerdict() != countersignv1.Verdict_VERDICT_ALLOW {
			blocked++
			continue
		}
		// It was allowed: its attempt must have committed before the revocation.
		var attemptCommit, revokeCommit time.Time
		if err := db.QueryRow(ctx, `SELECT pg_xact_commit_timestamp(xmin) FROM attempts WHERE sik = $1`, held.GetIntent().GetSik()).Scan(&attemptCommit); err != nil {
			t.Fatal(err)
		}
		if err := db.QueryRow(ctx, `SELECT pg_xact_commit_timestamp(xmin) FROM mandates WHERE hash = $1`, hash).Scan(&revokeCommit); err != nil {
			t.Fatal(err)
		}
		if !attemptCommit.Before(revokeCommit) {
			t.Fatalf("round %d: money allowed by a transaction that committed at %s, after the revocation at %s", round, attemptCommit, revokeCommit)
		}
		allowedBefore++
	}
	t.Logf("20 races: %d allowed before the revocation committed, %d blocked", allowedBefore, blocked)
}
