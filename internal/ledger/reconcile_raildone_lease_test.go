package ledger

import (
	"context"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testing/wait"
)

// TestRailDoneWithoutMayApplyUntilWaitsForTheLease: an attempt with no
// may_apply_until (one that left without ext_proc's mark while no settle
// time was configured, or one made before migration 00034) is not done at
// the rail while its lease runs: its caller may still be sending it. Read
// as done, an ambiguous native attempt was quarantined after one listing
// "because the rail can no longer apply it". Once the lease has ended, it
// is done.
func TestRailDoneWithoutMayApplyUntilWaitsForTheLease(t *testing.T) {
	for i, tc := range []struct {
		name  string
		lease time.Duration
		want  bool
	}{
		{"lease running", time.Hour, false},
		{"lease over", time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t)
			ctx := context.Background()
			p := proposal(390 + i)
			p.ViaEnvoy, p.LeaseTTL, p.MayApplyFor = false, tc.lease, 0
			if _, err := startFirst(ctx, s, p); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeAmbiguous, Reason: "timeout", ReconcileDelay: 0}); err != nil {
				t.Fatal(err)
			}
			var isNull bool
			if err := s.pool.QueryRow(ctx, `SELECT may_apply_until IS NULL FROM attempts WHERE rail_account = $1 AND sik = $2 AND attempt_seq = 1`,
				p.RailAccount, p.SIK).Scan(&isNull); err != nil {
				t.Fatal(err)
			}
			if !isNull {
				t.Fatal("the attempt has a may_apply_until; this test is about one without")
			}
			var work []ReconcileWork
			var err error
			if !wait.Until(10*time.Second, func() bool {
				work, err = s.ClaimReconcileIn(ctx, "rec", time.Minute, 10, ReconcileScope{})
				return err != nil || len(work) == 1
			}) || err != nil {
				t.Fatalf("never claimed (%v)", err)
			}
			if work[0].RailDone != tc.want {
				t.Fatalf("RailDone = %v with the lease %s, want %v", work[0].RailDone, tc.name, tc.want)
			}
		})
	}
}
