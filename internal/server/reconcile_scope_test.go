package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/ownerauth"
)

// unknownIntent has the harness agent's refund allowed and sent to the
// rail, which applies it, and reported as a timeout: UNKNOWN, due for
// reconciliation at once (noReconcileDelay), which finds it applied.
func (h *allowHarness) unknownIntent(t *testing.T, amount int64, distinct string) ledger.Key {
	t.Helper()
	allowed := h.decide(t, refund("pi_bench", amount, distinct))
	if allowed.GetVerdict() != countersignv1.Verdict_VERDICT_ALLOW {
		t.Fatalf("Decide = %v", allowed)
	}
	if st, _, err := h.sendStamped(context.Background(), allowed, amount); err != nil || st != 200 {
		t.Fatalf("send: %d %v", st, err)
	}
	if _, err := h.decisions().Commit(as(h.secret), &countersignv1.CommitRequest{RailAccount: "acct_bench", Sik: allowed.GetIntent().GetSik(),
		AttemptSeq: allowed.GetAttemptSeq(), CommitToken: allowed.GetCommitToken(), BodyStamped: true,
		Outcome: &countersignv1.CommitRequest_TransportError{TransportError: countersignv1.TransportError_TRANSPORT_ERROR_TIMEOUT}}); err != nil {
		t.Fatal(err)
	}
	k := ledger.Key{RailAccount: "acct_bench", SIK: allowed.GetIntent().GetSik()}
	if it, _, err := h.store.GetIntent(context.Background(), k); err != nil || it.State != intent.Unknown {
		t.Fatalf("setup: %+v, %v; want UNKNOWN", it, err)
	}
	return k
}

func batch(limit int32, railAccount string) *countersignv1.ReconcileRequest {
	return &countersignv1.ReconcileRequest{Target: &countersignv1.ReconcileRequest_Batch{
		Batch: &countersignv1.ReconcileBatch{Limit: limit, RailAccount: railAccount}}}
}

// TestABatchReconcileActsOnlyOnTheCallersIntents: Reconcile with a batch
// acts only on what its caller owns (DESIGN.md §1, A1; found by an
// attacker's-eye review: an owner holding nothing settled another owner's
// intents, reading its rail account): another owner, holding nothing or
// holding the same rail account, moves none of our intents and records no
// finding on them, whatever account it names; naming an account it does
// not hold is refused, with one answer whether the account exists or not;
// an agent credential, ours or another owner's, is refused outright. Our
// own batch honours its rail account and its limit.
func TestABatchReconcileActsOnlyOnTheCallersIntents(t *testing.T) {
	h := railHarness(t, noReconcileDelay)
	ctx := context.Background()
	c := h.decisions()
	first := h.unknownIntent(t, 4242, "first")
	second := h.unknownIntent(t, 4343, "second")
	ours := []ledger.Key{first, second}

	// C holds nothing and has no agent; D holds acct_bench too and has an
	// agent of its own.
	_, cToken, _, err := ownerauth.Bootstrap(ctx, h.store, "owner C", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	d, dToken, _, err := ownerauth.Bootstrap(ctx, h.store, "owner D", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.GrantRailAccount(ctx, "acct_bench", d.ID); err != nil {
		t.Fatal(err)
	}
	dAgent, _ := newAgentCredential(t, h.store, d.ID, "D's agent")

	untouched := func(t *testing.T) {
		t.Helper()
		for _, k := range ours {
			it, _, err := h.store.GetIntent(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			fs, err := h.store.FindingsFor(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			if it.State != intent.Unknown || len(fs) != 0 {
				t.Fatalf("another caller's Reconcile moved our intent %s: %s, %d findings", k, it.State, len(fs))
			}
		}
	}
	t.Run("another owner moves nothing of ours", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			token string
			req   *countersignv1.ReconcileRequest
		}{
			{"holding nothing", cToken, batch(1, "")},
			{"holding nothing, the most it may ask", cToken, batch(1000, "")},
			{"holding our account", dToken, batch(100, "")},
			{"holding our account, naming it", dToken, batch(100, "acct_bench")},
		} {
			t.Run(tc.name, func(t *testing.T) {
				rep, err := c.Reconcile(as(tc.token), tc.req)
				if err != nil {
					t.Fatal(err)
				}
				if len(rep.GetFindings()) != 0 {
					t.Fatalf("another owner's batch found %v", rep.GetFindings())
				}
				untouched(t)
			})
		}
	})
	t.Run("an account it does not hold is refused", func(t *testing.T) {
		_, errHeld := c.Reconcile(as(cToken), batch(1, "acct_bench"))
		_, errNowhere := c.Reconcile(as(cToken), batch(1, "acct_nowhere"))
		for _, err := range []error{errHeld, errNowhere} {
			if status.Code(err) != codes.PermissionDenied || errorReason(err) != "RAIL_ACCOUNT_NOT_HELD" {
				t.Fatalf("batch naming an account not held = %v (reason %q), want PermissionDenied RAIL_ACCOUNT_NOT_HELD", err, errorReason(err))
			}
		}
		held := strings.ReplaceAll(status.Convert(errHeld).Message(), "acct_bench", "<account>")
		nowhere := strings.ReplaceAll(status.Convert(errNowhere).Message(), "acct_nowhere", "<account>")
		if held != nowhere {
			t.Fatalf("the refusal tells an account that exists (%q) from one that does not (%q)", held, nowhere)
		}
		untouched(t)
	})
	t.Run("an agent credential is refused", func(t *testing.T) {
		for _, secret := range []string{h.secret, dAgent} {
			for _, req := range []*countersignv1.ReconcileRequest{batch(100, ""), batch(100, "acct_bench")} {
				_, err := c.Reconcile(as(secret), req)
				if status.Code(err) != codes.Unauthenticated || errorReason(err) != "AGENT_CREDENTIAL_REFUSED" {
					t.Fatalf("Reconcile with an agent credential = %v (reason %q)", err, errorReason(err))
				}
			}
		}
		untouched(t)
	})
	t.Run("our batch keeps to its rail account", func(t *testing.T) {
		if _, err := h.store.GrantRailAccount(ctx, "acct_spare", h.ownerID); err != nil {
			t.Fatal(err)
		}
		rep, err := c.Reconcile(as(h.ownerToken), batch(100, "acct_spare"))
		if err != nil || len(rep.GetFindings()) != 0 {
			t.Fatalf("our batch on acct_spare = %v, %v; want no findings", rep, err)
		}
		untouched(t)
	})
	t.Run("our batch keeps to its limit", func(t *testing.T) {
		for i := range ours {
			rep, err := c.Reconcile(as(h.ownerToken), batch(1, "acct_bench"))
			if err != nil {
				t.Fatal(err)
			}
			if f := rep.GetFindings(); len(f) != 1 || f[0].GetOutcome() != countersignv1.ReconcileOutcome_RECONCILE_OUTCOME_FOUND_APPLIED {
				t.Fatalf("our batch of 1 = %v, want one FOUND_APPLIED", f)
			}
			applied := 0
			for _, k := range ours {
				it, _, err := h.store.GetIntent(ctx, k)
				if err != nil {
					t.Fatal(err)
				}
				if it.State == intent.Applied {
					applied++
				}
			}
			if applied != i+1 {
				t.Fatalf("after %d batches of 1, %d of our intents are APPLIED", i+1, applied)
			}
		}
	})
}

// TestReconcilingAnIntentNeedsItsRailAccount: an owner reconciles its own
// agent's intent only while it holds the intent's rail account; once the
// operator withdraws the account the call is refused and a batch leaves
// the intent alone (the reconciler's own pass still settles it).
func TestReconcilingAnIntentNeedsItsRailAccount(t *testing.T) {
	h := railHarness(t, noReconcileDelay)
	ctx := context.Background()
	c := h.decisions()
	k := h.unknownIntent(t, 4444, "withdrawn")
	if _, err := h.store.RevokeRailAccount(ctx, "acct_bench", h.ownerID); err != nil {
		t.Fatal(err)
	}
	_, err := c.Reconcile(as(h.ownerToken), &countersignv1.ReconcileRequest{Target: &countersignv1.ReconcileRequest_Intent{
		Intent: &countersignv1.IntentKey{RailAccount: k.RailAccount, Sik: k.SIK}}})
	if status.Code(err) != codes.PermissionDenied || errorReason(err) != "RAIL_ACCOUNT_NOT_HELD" {
		t.Fatalf("Reconcile of our intent on a withdrawn account = %v (reason %q)", err, errorReason(err))
	}
	rep, err := c.Reconcile(as(h.ownerToken), batch(100, ""))
	if err != nil || len(rep.GetFindings()) != 0 {
		t.Fatalf("our batch after the withdrawal = %v, %v; want no findings", rep, err)
	}
	if it, _, err := h.store.GetIntent(ctx, k); err != nil || it.State != intent.Unknown {
		t.Fatalf("after the refused calls: %+v, %v; want UNKNOWN", it, err)
	}
}
