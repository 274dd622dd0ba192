package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/intent"
)

// quarantinedFor starts intent n of an agent of owner on acct_test (granted
// to owner), places its hold under a mandate of its own, and quarantines
// it: ambiguous, then as many inconclusive listings as the bound allows.
// With answeredApplied the rail's late "applied" quarantines it instead,
// after a proof of absence (the attempt then carries the rail's entity).
func quarantinedFor(t *testing.T, s *Store, owner string, n int, answeredApplied bool) (testProposal, string) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.GrantRailAccount(ctx, "acct_test", owner); err != nil {
		t.Fatal(err)
	}
	agent, err := s.CreateAgent(ctx, owner, "bot")
	if err != nil {
		t.Fatal(err)
	}
	p := proposal(n)
	p.AgentID = agent.ID
	res, err := startFirst(ctx, s, p)
	if err != nil {
		t.Fatal(err)
	}
	mandate := fmt.Sprintf("%064x", n)
	if err := s.InTx(ctx, func(tx *Tx) error {
		return tx.PlaceHold(ctx, res.Intent, HoldSpec{MandateHash: mandate, AgentID: agent.ID, PayeeKey: "pi_1",
			Currency: "USD", AmountMinor: 1000, BudgetMinor: 5000})
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeAmbiguous, Reason: "timeout"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimReconcile(ctx, "rec", time.Minute, 10, &p.Key); err != nil {
		t.Fatal(err)
	}
	var it Intent
	if answeredApplied {
		if _, err := s.RecordFinding(ctx, Finding{Key: p.Key, AttemptSeq: 1, Outcome: FindingAbsent, Pages: 1, PaginationExhausted: true, Owner: "rec"}); err != nil {
			t.Fatal(err)
		}
		it, err = s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeApplied, EntityID: "re_late",
			Response: &HTTPMessage{Status: 200, Body: []byte(`{"id":"re_late"}`)}})
	} else {
		it, err = s.RecordFinding(ctx, Finding{Key: p.Key, AttemptSeq: 1, Outcome: FindingInconclusive, Pages: 1,
			Detail: "rail 503 while listing", Owner: "rec", MaxReconciles: 1})
	}
	if err != nil || it.State != intent.Quarantined {
		t.Fatalf("setup: %+v, %v; want QUARANTINED", it, err)
	}
	return p, mandate
}

func TestOwnerResolvesAQuarantinedIntent(t *testing.T) {
	ctx := context.Background()
	budget := func(t *testing.T, s *Store, mandate string) BudgetState {
		t.Helper()
		b, err := s.Budgets(ctx, mandate)
		if err != nil || len(b) != 1 {
			t.Fatalf("budgets = %+v, %v", b, err)
		}
		return b[0]
	}
	lastRecord := func(t *testing.T, s *Store, owner string, k Key) AuditRecord {
		t.Helper()
		recs, err := s.OwnerAuditRecords(ctx, owner, AuditFilter(k), 0, 100)
		if err != nil || len(recs) == 0 {
			t.Fatalf("audit records = %+v, %v", recs, err)
		}
		return recs[len(recs)-1]
	}

	t.Run("applied posts the hold and names the owner in the audit", func(t *testing.T) {
		s := openTest(t)
		p, mandate := quarantinedFor(t, s, "own_alice", 1, false)
		if b := budget(t, s, mandate); b.Held != 1000 || b.Spent != 0 {
			t.Fatalf("quarantined budget = %+v, want 1000 held", b)
		}
		it, err := s.Resolve(ctx, "own_alice", p.Key, Resolution{Applied: true, EntityID: "re_found", Note: "re_found in the dashboard"})
		if err != nil {
			t.Fatal(err)
		}
		if it.State != intent.Applied || it.RailEntityID != "re_found" || it.LastEvent != string(intent.ResolvedApplied) {
			t.Fatalf("resolved = %+v", it)
		}
		if b := budget(t, s, mandate); b.Held != 0 || b.Spent != 1000 {
			t.Fatalf("budget after applied = %+v, want 1000 spent", b)
		}
		rec := lastRecord(t, s, "own_alice", p.Key)
		if rec.Event != string(intent.ResolvedApplied) || rec.FromState != string(intent.Quarantined) ||
			!strings.Contains(rec.Detail, "own_alice") || !strings.Contains(rec.Detail, "re_found in the dashboard") {
			t.Fatalf("audit record = %+v", rec)
		}
		// Once: an APPLIED intent is absorbing.
		if _, err := s.Resolve(ctx, "own_alice", p.Key, Resolution{Note: "again"}); !errors.Is(err, ErrNotResolvable) {
			t.Fatalf("second resolution = %v, want ErrNotResolvable", err)
		}
		rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{})
		if err != nil || !rep.Ok() {
			t.Fatalf("audit verify = %+v, %v", rep, err)
		}
	})

	t.Run("not applied voids the hold and ends BLOCKED", func(t *testing.T) {
		s := openTest(t)
		p, mandate := quarantinedFor(t, s, "own_alice", 2, false)
		it, err := s.Resolve(ctx, "own_alice", p.Key, Resolution{Note: "no refund of pi_1 at the rail"})
		if err != nil {
			t.Fatal(err)
		}
		if it.State != intent.Blocked || it.LastEvent != string(intent.ResolvedNotApplied) || !strings.Contains(it.Reason, "no refund of pi_1") {
			t.Fatalf("resolved = %+v", it)
		}
		if b := budget(t, s, mandate); b.Held != 0 || b.Spent != 0 {
			t.Fatalf("budget after not applied = %+v, want nothing held or spent", b)
		}
	})

	t.Run("another owner, or an owner without the account, finds nothing", func(t *testing.T) {
		s := openTest(t)
		p, _ := quarantinedFor(t, s, "own_alice", 3, false)
		if _, err := s.GrantRailAccount(ctx, "acct_test", "own_mallory"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Resolve(ctx, "own_mallory", p.Key, Resolution{Note: "mine now"}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("another owner's resolution = %v, want ErrNotFound", err)
		}
		if _, err := s.RevokeRailAccount(ctx, "acct_test", "own_alice"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Resolve(ctx, "own_alice", p.Key, Resolution{Note: "after losing the account"}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("resolution without the account = %v, want ErrNotFound", err)
		}
	})

	t.Run("the rail's applied outweighs the owner's not applied", func(t *testing.T) {
		s := openTest(t)
		p, mandate := quarantinedFor(t, s, "own_alice", 4, true)
		_, err := s.Resolve(ctx, "own_alice", p.Key, Resolution{Note: "I see nothing"})
		if !errors.Is(err, ErrNotResolvable) || !strings.Contains(err.Error(), "re_late") {
			t.Fatalf("not applied over the rail's applied = %v, want ErrNotResolvable naming re_late", err)
		}
		it, err := s.Resolve(ctx, "own_alice", p.Key, Resolution{Applied: true, EntityID: "re_late", Note: "it did"})
		if err != nil || it.State != intent.Applied {
			t.Fatalf("applied = %+v, %v", it, err)
		}
		if b := budget(t, s, mandate); b.Spent != 1000 {
			t.Fatalf("budget = %+v, want 1000 spent", b)
		}
	})

	t.Run("only a QUARANTINED intent", func(t *testing.T) {
		s := openTest(t)
		if _, err := s.GrantRailAccount(ctx, "acct_test", "own_alice"); err != nil {
			t.Fatal(err)
		}
		agent, err := s.CreateAgent(ctx, "own_alice", "bot")
		if err != nil {
			t.Fatal(err)
		}
		p := proposal(5)
		p.AgentID = agent.ID
		if _, err := startFirst(ctx, s, p); err != nil {
			t.Fatal(err)
		}
		_, err = s.Resolve(ctx, "own_alice", p.Key, Resolution{Applied: true, EntityID: "re_x", Note: "looks applied"})
		if !errors.Is(err, ErrNotResolvable) || !strings.Contains(err.Error(), "IN_FLIGHT") {
			t.Fatalf("resolving an IN_FLIGHT intent = %v, want ErrNotResolvable naming its state", err)
		}
	})

	// The database holds the same rules whatever the writer: no move out of
	// QUARANTINED without a matching resolution of the intent's owner, no
	// "not applied" over the rail's applied, no change to a resolution.
	t.Run("the database refuses a resolution the Go code would", func(t *testing.T) {
		s := openTest(t)
		p, _ := quarantinedFor(t, s, "own_alice", 6, true)
		exec := func(sql string, args ...any) error {
			_, err := s.pool.Exec(ctx, sql, args...)
			return err
		}
		move := func(event, state string, entity any, seq any) error {
			return exec(`UPDATE intents SET state = $3, last_event = $4, rail_entity_id = $5, applied_attempt_seq = $6
				WHERE rail_account = $1 AND sik = $2`, p.RailAccount, p.SIK, state, event, entity, seq)
		}
		if err := move("RESOLVED_NOT_APPLIED", "BLOCKED", nil, nil); err == nil {
			t.Fatal("moved out of QUARANTINED with no resolution")
		}
		if err := exec(`INSERT INTO intent_resolutions (rail_account, sik, owner_id, outcome, note) VALUES ($1, $2, 'own_mallory', 'not_applied', 'x')`,
			p.RailAccount, p.SIK); err != nil {
			t.Fatal(err)
		}
		if err := move("RESOLVED_NOT_APPLIED", "BLOCKED", nil, nil); err == nil || !strings.Contains(err.Error(), "only the owner") {
			t.Fatalf("another owner's resolution moved it: %v", err)
		}
		if err := exec(`DELETE FROM intent_resolutions WHERE sik = $1`, p.SIK); err == nil {
			t.Fatal("a resolution was deleted")
		}
		if err := exec(`UPDATE intent_resolutions SET owner_id = 'own_alice' WHERE sik = $1`, p.SIK); err == nil {
			t.Fatal("a resolution was changed")
		}

		s2 := openTest(t)
		p2, _ := quarantinedFor(t, s2, "own_alice", 7, true)
		if _, err := s2.pool.Exec(ctx, `INSERT INTO intent_resolutions (rail_account, sik, owner_id, outcome, note) VALUES ($1, $2, 'own_alice', 'not_applied', 'x')`,
			p2.RailAccount, p2.SIK); err != nil {
			t.Fatal(err)
		}
		_, err := s2.pool.Exec(ctx, `UPDATE intents SET state = 'BLOCKED', last_event = 'RESOLVED_NOT_APPLIED' WHERE rail_account = $1 AND sik = $2`,
			p2.RailAccount, p2.SIK)
		if err == nil || !strings.Contains(err.Error(), "re_late") {
			t.Fatalf("not applied over the rail's applied: %v", err)
		}
		_, err = s2.pool.Exec(ctx, `UPDATE intents SET state = 'APPLIED', last_event = 'RESOLVED_APPLIED', rail_entity_id = 're_late', applied_attempt_seq = 1
			WHERE rail_account = $1 AND sik = $2`, p2.RailAccount, p2.SIK)
		if err == nil || !strings.Contains(err.Error(), "needs the owner's resolution") {
			t.Fatalf("applied on a not-applied resolution: %v", err)
		}
	})
}

// TestAppliedAfterResolvedNotAppliedIsHeldAgain: the owner resolved an
// intent not applied (its hold voided, BLOCKED); the rail's "applied" for
// its attempt then comes. The intent stays BLOCKED (absorbing), and the
// money that left is held again, so the budget counts it.
func TestAppliedAfterResolvedNotAppliedIsHeldAgain(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	p, mandate := quarantinedFor(t, s, "own_alice", 8, false)
	if _, err := s.Resolve(ctx, "own_alice", p.Key, Resolution{Note: "nothing at the rail"}); err != nil {
		t.Fatal(err)
	}
	it, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeApplied, EntityID: "re_late",
		Response: &HTTPMessage{Status: 200, Body: []byte(`{"id":"re_late"}`)}})
	if err != nil || it.State != intent.Blocked {
		t.Fatalf("late applied = %+v, %v; want the intent still BLOCKED", it, err)
	}
	b, err := s.Budgets(ctx, mandate)
	if err != nil || len(b) != 1 || b[0].Held != 1000 {
		t.Fatalf("budget = %+v, %v; want the 1000 that left held again", b, err)
	}
}
