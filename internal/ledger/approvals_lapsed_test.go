package ledger

import (
	"context"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/intent"
)

// TestLapsedApprovalsLeaveTheLiveSet: an agent that never sends its held
// requests again leaves approvals whose time ran out. Opening its next one
// marks them expired, so they do not pile up stored as pending (the bound
// on pending approvals counts only unexpired ones: before, an agent could
// store that many more every approval lifetime), and the owner's live set
// (what WatchApprovals polls) holds none of them, so a sibling's new held
// requests are never crowded out of it (found by a review: 997 of the
// 1,000 rows the stream read were lapsed, and 7 of a sibling's 10 pending
// approvals were missing).
func TestLapsedApprovalsLeaveTheLiveSet(t *testing.T) {
	ctx := context.Background()
	f := newOutboxFixture(t, "own_lapsed")
	sib, err := f.s.CreateAgent(ctx, f.owner, "sibling")
	if err != nil {
		t.Fatal(err)
	}
	hold := func(n int, agent string, ttl time.Duration, maxPending int) {
		t.Helper()
		p := proposal(n)
		p.AgentID = agent
		if err := holdNew(ctx, f.s, p, ApprovalSpec{TTL: ttl, MaxPending: maxPending}); err != nil {
			t.Fatalf("hold %d: %v", n, err)
		}
	}
	// A microsecond's lifetime: each has run out before the next opens.
	const lapsed = 20
	for n := 1; n <= lapsed; n++ {
		hold(n, f.agent.ID, time.Microsecond, 3)
	}
	var stored int
	if err := f.s.pool.QueryRow(ctx, `SELECT count(*) FROM approvals WHERE agent_id = $1 AND state = 'pending'`, f.agent.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored > 1 {
		t.Fatalf("%d of %d lapsed approvals still stored pending; want only the last (no approval of the agent has opened since)", stored, lapsed)
	}
	for n := lapsed + 1; n <= lapsed+5; n++ {
		hold(n, sib.ID, time.Hour, 50)
	}
	live, err := f.s.LiveApprovals(ctx, f.owner, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range live {
		if a.State == "expired" || a.AgentID != sib.ID {
			t.Errorf("live set holds approval %s of %s, %s", a.ID, a.AgentID, a.State)
		}
	}
	if len(live) != 5 {
		t.Fatalf("live set holds %d approvals, want the sibling's 5", len(live))
	}
}

// TestRevocationsVoidTheirApprovals: revoking a mandate, its rail account
// or its agent voids the approvals given under it in the revocation's own
// transaction. The owner API voided them in a second statement after the
// commit (an approval could be used in between under another mandate in
// force on the account) and the operator's CLI revocation of a mandate not
// at all (found by a review).
func TestRevocationsVoidTheirApprovals(t *testing.T) {
	jan1, _, _, apr1 := mandateDates()
	for _, revoke := range []string{"mandate", "rail account", "agent"} {
		t.Run(revoke, func(t *testing.T) {
			s := openTest(t)
			ctx := context.Background()
			a := createMandateAgent(t, s, "own_void")
			m := testMandate(t, a.ID, "acct_1", jan1, apr1, "refunds")
			mustCreateMandate(t, s, m)
			p := proposal(1)
			p.AgentID = a.ID
			var id string
			if err := s.InTx(ctx, func(tx *Tx) error {
				it, _, err := tx.CreateIntent(ctx, p.NewIntent)
				if err != nil {
					return err
				}
				if it, err = tx.Transition(ctx, it, intent.GatesHeld, TransitionOpts{Reason: "needs approval"}); err != nil {
					return err
				}
				if err := tx.OpenApproval(ctx, it, ApprovalSpec{TTL: time.Hour, MandateHash: m.Hash}); err != nil {
					return err
				}
				return tx.tx.QueryRow(ctx, `SELECT id FROM approvals WHERE sik = $1`, p.Key.SIK).Scan(&id)
			}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Approve(ctx, "own_void", id, "", "ok"); err != nil {
				t.Fatal(err)
			}
			var err error
			switch revoke {
			case "mandate":
				_, err = s.RevokeMandate(ctx, m.Hash, "withdrawn")
			case "rail account":
				_, err = s.RevokeRailAccount(ctx, "acct_1", "own_void")
			case "agent":
				err = s.RevokeAgent(ctx, a.ID)
			}
			if err != nil {
				t.Fatalf("revoke the %s: %v", revoke, err)
			}
			var state string
			if err := s.pool.QueryRow(ctx, `SELECT state FROM approvals WHERE id = $1`, id).Scan(&state); err != nil {
				t.Fatal(err)
			}
			if state != "void" {
				t.Fatalf("after the %s's revocation returned, its approval is %s; want void", revoke, state)
			}
		})
	}
}
