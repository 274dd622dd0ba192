package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testing/wait"
)

// A rail account belongs to the owners the operator granted it to: only
// they may put mandates on it, and a grant an owner lost stops its mandates
// from deciding. The database enforces it, not only Go.
func TestRailAccountGrantsGateMandates(t *testing.T) {
	jan1, feb1, _, apr1 := mandateDates()
	s := openTest(t)
	ctx := context.Background()
	alice, err := s.CreateAgent(ctx, "own_alice", "a")
	if err != nil {
		t.Fatal(err)
	}
	mallory, err := s.CreateAgent(ctx, "own_mallory", "m")
	if err != nil {
		t.Fatal(err)
	}
	if created, err := s.GrantRailAccount(ctx, "acct_alice", "own_alice"); err != nil || !created {
		t.Fatalf("grant = %v, %v", created, err)
	}
	if created, err := s.GrantRailAccount(ctx, "acct_alice", "own_alice"); err != nil || created {
		t.Fatalf("second grant = %v, %v; want no new grant", created, err)
	}

	t.Run("a mandate on an account the owner does not hold is refused alike, whether or not it exists", func(t *testing.T) {
		var msgs []string
		for _, acct := range []string{"acct_alice", "acct_nowhere"} {
			_, err := s.CreateMandate(ctx, testMandate(t, mallory.ID, acct, jan1, apr1, "squat"))
			var nh *NotHeldError
			if !errors.Is(err, ErrNotHeld) || !errors.As(err, &nh) {
				t.Fatalf("%s: CreateMandate err = %v, want ErrNotHeld", acct, err)
			}
			msgs = append(msgs, strings.ReplaceAll(err.Error(), acct, "X"))
		}
		if msgs[0] != msgs[1] {
			t.Fatalf("the refusals differ: %q vs %q", msgs[0], msgs[1])
		}
		if err := s.OwnerHoldsRailAccount(ctx, "own_mallory", "acct_alice"); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("OwnerHoldsRailAccount = %v", err)
		}
	})

	t.Run("the database refuses the insert itself", func(t *testing.T) {
		m := testMandate(t, mallory.ID, "acct_alice", jan1, apr1, "raw")
		_, err := s.pool.Exec(ctx, `INSERT INTO mandates (hash, owner_id, agent_id, rail_account, canonical, mode, valid_from, valid_until)
			VALUES ($1, 'own_mallory', $2, $3, $4, $5, $6, $7)`, m.Hash, m.AgentID, m.RailAccount, string(m.Canonical), m.Mode, m.ValidFrom, m.ValidUntil)
		if mandatePGCode(err) != sqlStateNotHeld {
			t.Fatalf("raw insert err = %v, want SQLSTATE %s", err, sqlStateNotHeld)
		}
	})

	m := testMandate(t, alice.ID, "acct_alice", jan1, apr1, "refunds")
	mustCreateMandate(t, s, m)
	if _, err := s.ActiveMandate(ctx, alice.ID, "acct_alice", feb1); err != nil {
		t.Fatalf("ActiveMandate of the holder = %v", err)
	}

	t.Run("a grant lost in the database stops its mandates at once", func(t *testing.T) {
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, `UPDATE rail_account_owners SET revoked_at = now(), revoked_by = 'test'
			WHERE rail_account = 'acct_alice' AND owner_id = 'own_alice'`); err != nil {
			t.Fatal(err)
		}
		if _, err := activeMandate(ctx, tx, alice.ID, "acct_alice", feb1, ""); !errors.Is(err, ErrNotFound) {
			t.Fatalf("ActiveMandate without the grant = %v, want ErrNotFound", err)
		}
	})

	t.Run("grants are never deleted and revocation is one way", func(t *testing.T) {
		if _, err := s.pool.Exec(ctx, `DELETE FROM rail_account_owners`); mandatePGCode(err) != "42501" {
			t.Fatalf("DELETE err = %v", err)
		}
		if _, err := s.pool.Exec(ctx, `UPDATE rail_account_owners SET owner_id = 'own_mallory'`); mandatePGCode(err) != "23514" {
			t.Fatalf("owner change err = %v", err)
		}
	})

	t.Run("revoke-account revokes the owner's mandates on it", func(t *testing.T) {
		hashes, err := s.RevokeRailAccount(ctx, "acct_alice", "own_alice")
		if err != nil || len(hashes) != 1 || hashes[0] != m.Hash {
			t.Fatalf("RevokeRailAccount = %v, %v", hashes, err)
		}
		got, err := s.GetMandate(ctx, m.Hash)
		if err != nil || got.RevokedAt == nil {
			t.Fatalf("mandate after revoke-account = %+v, %v", got, err)
		}
		if _, err := s.RevokeRailAccount(ctx, "acct_alice", "own_alice"); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("second revoke = %v, want ErrNotHeld", err)
		}
		if _, err := s.CreateMandate(ctx, testMandate(t, alice.ID, "acct_alice", jan1, apr1, "again")); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("mandate after revoke-account = %v, want ErrNotHeld", err)
		}
		if created, err := s.GrantRailAccount(ctx, "acct_alice", "own_alice"); err != nil || !created {
			t.Fatalf("re-grant = %v, %v", created, err)
		}
		gs, err := s.RailAccountGrants(ctx, "acct_alice", "")
		if err != nil || len(gs) != 2 || gs[0].RevokedAt == nil || gs[1].RevokedAt != nil || gs[0].GrantedBy == "" {
			t.Fatalf("grants = %+v, %v; want the revoked one kept and a new live one", gs, err)
		}
	})
}

// A proposal that meets an intent made by another owner's agent neither
// moves it nor learns anything of it; an agent of the same owner does.
func TestSameOwnerIsOfTheAgentsOwner(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	agent := func(owner string) string {
		a, err := s.CreateAgent(ctx, owner, "x")
		if err != nil {
			t.Fatal(err)
		}
		return a.ID
	}
	a1, a2, b := agent("own_a"), agent("own_a"), agent("own_b")
	for _, tc := range []struct {
		name string
		x, y string
		want bool
	}{
		{"one agent", a1, a1, true},
		{"two agents of one owner", a1, a2, true},
		{"agents of two owners", a1, b, false},
		{"an intent without an agent", a1, "", false},
		{"an unknown agent", a1, "agt_nobody", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.InTx(ctx, func(tx *Tx) error {
				same, err := tx.SameOwner(ctx, tc.x, tc.y)
				if err == nil && same != tc.want {
					return fmt.Errorf("SameOwner(%s, %s) = %v", tc.x, tc.y, same)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The audit an owner lists is of the rail accounts it holds.
func TestOwnerAuditRecordsNeedTheAccount(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	a, err := s.CreateAgent(ctx, "own_a", "x")
	if err != nil {
		t.Fatal(err)
	}
	p := proposal(1)
	p.AgentID = a.ID
	if _, err := startFirst(ctx, s, p); err != nil {
		t.Fatal(err)
	}
	list := func() int {
		recs, err := s.OwnerAuditRecords(ctx, "own_a", AuditFilter{}, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		return len(recs)
	}
	if n := list(); n != 0 {
		t.Fatalf("records of an account not held = %d, want 0", n)
	}
	if _, err := s.GrantRailAccount(ctx, p.RailAccount, "own_a"); err != nil {
		t.Fatal(err)
	}
	if n := list(); n == 0 {
		t.Fatal("no records of a held account")
	}
}

// TestWithdrawalRevokesAMandateCreatedWhileItWaited: a mandate created
// after a withdrawal's transaction began, and committed while the
// withdrawal waited for a decision's lock, is revoked with it: its
// revocation time is not before its creation (the mandates' CHECK
// revoked_at >= created_at refused the whole withdrawal, found by a review).
func TestWithdrawalRevokesAMandateCreatedWhileItWaited(t *testing.T) {
	_, feb1, _, apr1 := mandateDates()
	s := openTest(t)
	ctx := context.Background()
	slow := createMandateAgent(t, s, "own_1")
	late := createMandateAgent(t, s, "own_1")
	mustCreateMandate(t, s, testMandate(t, slow.ID, "acct_1", feb1, apr1, "slow"))
	// A decision of slow's holds its revocation lock; the withdrawal waits
	// for it after its transaction began.
	hold, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Rollback(ctx) }()
	if _, err := hold.Exec(ctx, `SELECT `+agentLock("pg_advisory_xact_lock_shared", "$1"), slow.ID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var hashes []string
	go func() {
		var err error
		hashes, err = s.RevokeRailAccount(ctx, "acct_1", "own_1")
		done <- err
	}()
	if !wait.Until(30*time.Second, func() bool {
		var n int
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		return err == nil && n > 0
	}) {
		t.Fatal("the withdrawal never waited for the decision's lock")
	}
	lateMandate := testMandate(t, late.ID, "acct_1", feb1, apr1, "late")
	mustCreateMandate(t, s, lateMandate)
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the withdrawal = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the withdrawal never finished")
	}
	if !slices.Contains(hashes, lateMandate.Hash) {
		t.Fatalf("the withdrawal revoked %v, not the mandate created while it waited", hashes)
	}
	got, err := s.GetMandate(ctx, lateMandate.Hash)
	if err != nil || got.RevokedAt == nil {
		t.Fatalf("the late mandate = %+v, %v; want it revoked", got, err)
	}
}
