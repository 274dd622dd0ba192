package ledger

import (
	"context"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testing/wait"
)

// TestClaimSaysWhetherTheRailIsDone: a claim hands the reconciler, on the
// database's clock, whether the rail can still apply the attempt (its
// may_apply_until not yet passed): the reconciler stops listing an attempt
// whose stamp was never confirmed only once it cannot. A native attempt
// whose settle time ran out is done; one whose settle time runs for an
// hour is not, even if claimed early.
func TestClaimSaysWhetherTheRailIsDone(t *testing.T) {
	cases := []struct {
		name        string
		mayApplyFor time.Duration
		want        bool
	}{
		{"settle time over", time.Millisecond, true},
		{"settle time running", time.Hour, false},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t)
			ctx := context.Background()
			p := proposal(300 + i)
			p.ViaEnvoy, p.LeaseTTL, p.MayApplyFor = false, time.Millisecond, tc.mayApplyFor
			if _, err := startFirst(ctx, s, p); err != nil {
				t.Fatal(err)
			}
			var err error
			if !wait.Until(10*time.Second, func() bool {
				var n int
				n, err = s.ExpireLeasesIn(ctx, 10, 0, ReconcileScope{})
				return err != nil || n == 1
			}) || err != nil {
				t.Fatalf("the lease never expired (%v)", err)
			}
			if !tc.want {
				// Scheduled after the settle time; claimed early here, to
				// see what the claim says while the rail may still apply it.
				if _, err := s.pool.Exec(ctx, `UPDATE intents SET next_reconcile_at = now() WHERE rail_account = $1 AND sik = $2`, p.RailAccount, p.SIK); err != nil {
					t.Fatal(err)
				}
			}
			var work []ReconcileWork
			if !wait.Until(10*time.Second, func() bool {
				work, err = s.ClaimReconcileIn(ctx, "rec", time.Minute, 10, ReconcileScope{})
				return err != nil || len(work) == 1
			}) || err != nil {
				t.Fatalf("never claimed (%v)", err)
			}
			if work[0].RailDone != tc.want {
				t.Fatalf("RailDone = %v, want %v", work[0].RailDone, tc.want)
			}
		})
	}
}
