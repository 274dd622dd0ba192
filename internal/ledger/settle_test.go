package ledger

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestNoListingBeforeTheRailIsDone: an attempt the rail may still apply
// (until may_apply_until: its lease's end plus the settle time for one
// that leaves without ext_proc's mark, its mark plus the settle time for
// one that ext_proc lets leave) is scheduled for reconciliation no earlier,
// is not claimed before, and the database refuses a listing's proof of its
// absence recorded before, whatever the writer (migration 00034).
func TestNoListingBeforeTheRailIsDone(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		viaEnvoy bool
	}{{"left without ext_proc's mark", false}, {"let leave by ext_proc", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t)
			p := proposal(1)
			p.ViaEnvoy = tc.viaEnvoy
			p.MayApplyFor = time.Hour
			if _, err := startFirst(ctx, s, p); err != nil {
				t.Fatal(err)
			}
			if tc.viaEnvoy {
				if _, err := s.MarkSent(ctx, p.Key, 1, true, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			delay := 30 * time.Second
			if _, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeAmbiguous, Reason: "504", ReconcileDelay: delay}); err != nil {
				t.Fatal(err)
			}
			var wait time.Duration
			if err := s.pool.QueryRow(ctx, `SELECT (extract(epoch FROM next_reconcile_at - now()) * 1e6)::bigint * interval '1 microsecond' FROM intents WHERE sik = $1`,
				p.SIK).Scan(&wait); err != nil {
				t.Fatal(err)
			}
			if wait < 55*time.Minute {
				t.Fatalf("reconciliation scheduled in %s, before the rail is done (in about an hour)", wait)
			}
			// The reconcile delay asked for is counted from then, not from
			// now (the rails have no read-your-writes).
			var after time.Duration
			if err := s.pool.QueryRow(ctx, `SELECT (extract(epoch FROM i.next_reconcile_at - a.may_apply_until) * 1e6)::bigint * interval '1 microsecond'
				FROM intents i JOIN attempts a ON a.rail_account = i.rail_account AND a.sik = i.sik AND a.attempt_seq = i.attempt_count WHERE i.sik = $1`,
				p.SIK).Scan(&after); err != nil {
				t.Fatal(err)
			}
			if after < 20*time.Second {
				t.Fatalf("reconciliation scheduled %s after the rail is done, want the reconcile delay (30 s) after it", after)
			}
			work, err := s.ClaimReconcile(ctx, "rec", time.Minute, 10, &p.Key)
			if err != nil || len(work) != 0 {
				t.Fatalf("claimed %d before the rail is done (%v)", len(work), err)
			}
			// Another writer, past the schedule: the database refuses.
			if _, err := s.pool.Exec(ctx, `UPDATE intents SET state = 'RECONCILING', last_event = 'RECONCILE_STARTED' WHERE sik = $1`, p.SIK); err != nil {
				t.Fatal(err)
			}
			_, err = s.pool.Exec(ctx, `INSERT INTO reconciliation_findings (rail_account, sik, attempt_seq, outcome, pages, pagination_exhausted)
				VALUES ($1, $2, 1, 'confirmed_absent', 1, true)`, p.RailAccount, p.SIK)
			if err == nil || !strings.Contains(err.Error(), "may still apply at the rail") {
				t.Fatalf("a proof of absence before the rail is done: %v", err)
			}
		})
	}
}
