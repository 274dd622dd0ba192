package api

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/reconcile"
)

// heldAccounts answers for the intents and rail accounts of one owner,
// own_a, which holds acct_a and whose agent made intent S on it.
type heldAccounts struct{}

func (heldAccounts) GetIntent(_ context.Context, k ledger.Key) (ledger.Intent, []ledger.Attempt, error) {
	return ledger.Intent{Key: k, State: "UNKNOWN"}, nil, nil
}

func (heldAccounts) OwnerIntent(_ context.Context, owner string, k ledger.Key) (ledger.Intent, []ledger.Attempt, error) {
	if owner != "own_a" || k != (ledger.Key{RailAccount: "acct_a", SIK: "S"}) {
		return ledger.Intent{}, nil, ledger.NotFoundIntent(k)
	}
	return ledger.Intent{Key: k, State: "UNKNOWN"}, nil, nil
}

func (heldAccounts) OwnerHoldsRailAccount(_ context.Context, owner, acct string) error {
	if owner != "own_a" || acct != "acct_a" {
		return &ledger.NotHeldError{RailAccount: acct}
	}
	return nil
}

// passes records the passes a Reconcile call asks for.
type passes struct {
	scopes []ledger.ReconcileScope
	limits []int
}

func (p *passes) PassIn(_ context.Context, scope ledger.ReconcileScope, limit int) (reconcile.Report, error) {
	p.scopes, p.limits = append(p.scopes, scope), append(p.limits, limit)
	return reconcile.Report{}, nil
}

// TestReconcilePassesAreTheCallersOwn: every pass Reconcile asks for is
// scoped to the calling owner, with the rail account and limit the batch
// names (a negative limit refused, 0 for the reconciler's batch); a batch
// naming an account the owner does not hold, and a caller with no owner
// id, start no pass.
func TestReconcilePassesAreTheCallersOwn(t *testing.T) {
	intentS := &ledger.Key{RailAccount: "acct_a", SIK: "S"}
	cases := []struct {
		name      string
		owner     string
		req       *countersignv1.ReconcileRequest
		wantCode  codes.Code
		wantScope *ledger.ReconcileScope
		wantLimit int
	}{
		{"a batch of every held account", "own_a", batchOf(10, ""), codes.OK, &ledger.ReconcileScope{OwnerID: "own_a"}, 10},
		{"a batch of one held account", "own_a", batchOf(7, "acct_a"), codes.OK, &ledger.ReconcileScope{OwnerID: "own_a", RailAccount: "acct_a"}, 7},
		{"a batch of the default size", "own_a", batchOf(0, ""), codes.OK, &ledger.ReconcileScope{OwnerID: "own_a"}, 0},
		{"a negative limit", "own_a", batchOf(-1, ""), codes.InvalidArgument, nil, 0},
		{"an account not held", "own_a", batchOf(10, "acct_b"), codes.PermissionDenied, nil, 0},
		{"an account not held, by an owner holding nothing", "own_c", batchOf(10, "acct_a"), codes.PermissionDenied, nil, 0},
		{"the owner's intent", "own_a", &countersignv1.ReconcileRequest{Target: &countersignv1.ReconcileRequest_Intent{
			Intent: &countersignv1.IntentKey{RailAccount: "acct_a", Sik: "S"}}}, codes.OK, &ledger.ReconcileScope{OwnerID: "own_a", Only: intentS}, 0},
		{"another owner's intent", "own_c", &countersignv1.ReconcileRequest{Target: &countersignv1.ReconcileRequest_Intent{
			Intent: &countersignv1.IntentKey{RailAccount: "acct_a", Sik: "S"}}}, codes.NotFound, nil, 0},
		{"no owner id", "", batchOf(10, ""), codes.Unauthenticated, nil, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := &passes{}
			s := NewDecisionServer(nil, heldAccounts{}, rec)
			s.ownerOf = func(context.Context) (string, error) { return tc.owner, nil }
			_, err := s.Reconcile(context.Background(), tc.req)
			if code(err) != tc.wantCode {
				t.Fatalf("Reconcile = %v, want %s", err, tc.wantCode)
			}
			if tc.wantScope == nil {
				if len(rec.scopes) != 0 {
					t.Fatalf("a refused call passed over %+v", rec.scopes)
				}
				return
			}
			if len(rec.scopes) != 1 || rec.limits[0] != tc.wantLimit || rec.scopes[0].OwnerID != tc.wantScope.OwnerID ||
				rec.scopes[0].RailAccount != tc.wantScope.RailAccount || !sameKey(rec.scopes[0].Only, tc.wantScope.Only) {
				t.Fatalf("passes %+v with limits %v, want one over %+v with limit %d", rec.scopes, rec.limits, *tc.wantScope, tc.wantLimit)
			}
		})
	}
}

func batchOf(limit int32, railAccount string) *countersignv1.ReconcileRequest {
	return &countersignv1.ReconcileRequest{Target: &countersignv1.ReconcileRequest_Batch{
		Batch: &countersignv1.ReconcileBatch{Limit: limit, RailAccount: railAccount}}}
}

func sameKey(a, b *ledger.Key) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}
