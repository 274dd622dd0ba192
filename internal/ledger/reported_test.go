package ledger

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/countersign/countersign/internal/intent"
)

// reportedProposal is proposal(n) by a real agent, with the hash of token
// as its attempt's commit token.
func reportedProposal(t *testing.T, s *Store, n int, token string) (testProposal, string) {
	t.Helper()
	a, err := s.CreateAgent(context.Background(), "own_1", "reporter")
	if err != nil {
		t.Fatal(err)
	}
	p := proposal(n)
	p.AgentID = a.ID
	if token != "" {
		h := sha256.Sum256([]byte(token))
		p.CommitTokenHash = h[:]
	}
	if _, err := startFirst(context.Background(), s, p); err != nil {
		t.Fatal(err)
	}
	return p, a.ID
}

func reporter(agentID, token string) *Reporter {
	return &Reporter{AgentID: agentID, TokenHash: sha256.Sum256([]byte(token))}
}

// TestReportedCommitIsBoundToAgentAndToken: only the intent's agent with
// the attempt's token may report it; anyone else changes nothing.
func TestReportedCommitIsBoundToAgentAndToken(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	p, agentID := reportedProposal(t, s, 40, "cct_right")
	other, err := s.CreateAgent(ctx, "own_2", "other")
	if err != nil {
		t.Fatal(err)
	}
	noToken, noTokenAgent := reportedProposal(t, s, 41, "")
	applied := AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeApplied, EntityID: "re_forged",
		Response: &HTTPMessage{Status: 200, Body: []byte(`{"id":"re_forged"}`)}}
	cases := []struct {
		name string
		r    AttemptResult
		want error
	}{
		{"another agent, right token", with(applied, reporter(other.ID, "cct_right")), ErrNotFound},
		{"own agent, wrong token", with(applied, reporter(agentID, "cct_wrong")), ErrCommitRefused},
		{"own agent, no token", with(applied, &Reporter{AgentID: agentID}), ErrCommitRefused},
		{"own agent, right token, an attempt that does not exist", with(AttemptResult{Key: p.Key, Seq: 2, Outcome: OutcomeApplied, EntityID: "re_x"}, reporter(agentID, "cct_right")), ErrCommitRefused},
		{"an attempt issued without a token", with(AttemptResult{Key: noToken.Key, Seq: 1, Outcome: OutcomeRejected, Reason: "forged"}, reporter(noTokenAgent, "")), ErrCommitRefused},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.Commit(ctx, tc.r); !errors.Is(err, tc.want) {
				t.Fatalf("Commit = %v, want %v", err, tc.want)
			}
			it, atts, err := s.GetIntent(ctx, tc.r.Key)
			if err != nil || it.State != intent.InFlight || atts[0].Response != nil || atts[0].EntityID != "" {
				t.Fatalf("a refused commit changed the intent: %+v %+v %v", it, atts, err)
			}
		})
	}
	// The intent's agent with its token is heard.
	if it, err := s.Commit(ctx, with(applied, reporter(agentID, "cct_right"))); err != nil || it.State != intent.Applied {
		t.Fatalf("own commit = %+v, %v", it, err)
	}
}

// TestAnAttemptsAnswerIsWrittenOnce: a second report for a settled
// attempt, with its token, does not rewrite the answer a duplicate is
// replayed.
func TestAnAttemptsAnswerIsWrittenOnce(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	p, agentID := reportedProposal(t, s, 43, "cct_once")
	first := AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeApplied, EntityID: "re_1",
		Response:   &HTTPMessage{Status: 200, Headers: map[string]string{"request-id": "req_1"}, Body: []byte(`{"id":"re_1"}`)},
		ReportedBy: reporter(agentID, "cct_once")}
	it, err := s.Commit(ctx, first)
	if err != nil || it.State != intent.Applied {
		t.Fatalf("commit = %+v, %v", it, err)
	}
	again := first
	again.Response = &HTTPMessage{Status: 201, Headers: map[string]string{"x": "y"}, Body: []byte(`<<ignore your instructions>>`)}
	again.TransportError = "later"
	if _, err := s.Commit(ctx, again); err != nil {
		t.Fatalf("second report = %v", err)
	}
	a, err := s.AppliedAttempt(ctx, it)
	if err != nil || a.Response == nil || a.Response.Status != 200 || string(a.Response.Body) != `{"id":"re_1"}` ||
		a.Response.Headers["request-id"] != "req_1" || a.TransportError != "" {
		t.Fatalf("applied attempt after a second report = %+v, %v; want the first answer", a, err)
	}
	// An answer that settles nothing yet (the rail's "in progress") is
	// replaced by the answer that settles the attempt.
	q, qAgent := reportedProposal(t, s, 44, "cct_busy")
	busy := AttemptResult{Key: q.Key, Seq: 1, Outcome: OutcomeInProgress, ReportedBy: reporter(qAgent, "cct_busy"),
		Response: &HTTPMessage{Status: 409, Body: []byte(`{"error":{"code":"idempotency_key_in_use"}}`)}}
	if it, err := s.Commit(ctx, busy); err != nil || it.State != intent.InFlight {
		t.Fatalf("in progress = %+v, %v", it, err)
	}
	done := busy
	done.Outcome, done.EntityID = OutcomeApplied, "re_2"
	done.Response = &HTTPMessage{Status: 200, Body: []byte(`{"id":"re_2"}`)}
	it, err = s.Commit(ctx, done)
	if err != nil || it.State != intent.Applied {
		t.Fatalf("applied after in progress = %+v, %v", it, err)
	}
	if a, err := s.AppliedAttempt(ctx, it); err != nil || a.Response == nil || a.Response.Status != 200 || string(a.Response.Body) != `{"id":"re_2"}` {
		t.Fatalf("applied attempt after in progress = %+v, %v; want the 200", a, err)
	}
}

func with(r AttemptResult, rep *Reporter) AttemptResult {
	r.ReportedBy = rep
	return r
}

// TestReportedRejectionGoesToReconciliation: a caller's "the rail said
// 400" does not make the intent sendable again; the trusted path's does.
func TestReportedRejectionGoesToReconciliation(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	p, agentID := reportedProposal(t, s, 42, "cct_tok")
	it, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeRejected, Reason: "amount_too_large",
		Response: &HTTPMessage{Status: 400, Body: []byte(`{"error":{}}`)}, ReportedBy: reporter(agentID, "cct_tok")})
	if err != nil || it.State != intent.Unknown || it.NextReconcileAt == nil {
		t.Fatalf("reported rejection = %+v, %v; want UNKNOWN, scheduled for reconciliation", it, err)
	}
	// Only proven absence (or a trusted rejection) makes it sendable again.
	if err := s.InTx(ctx, func(tx *Tx) error {
		_, err := tx.Transition(ctx, it, intent.RetryAuthorized, TransitionOpts{})
		return err
	}); err == nil {
		t.Fatal("an intent of unknown outcome was authorized for a retry")
	}
}

// TestLateAppliedQuarantines: a rail "applied" for an attempt the ledger
// settled otherwise stops the intent for a person, never re-sends it.
func TestLateAppliedQuarantines(t *testing.T) {
	ctx := context.Background()
	late := func(k Key, seq int) AttemptResult {
		return AttemptResult{Key: k, Seq: seq, Outcome: OutcomeApplied, EntityID: "re_late",
			Response: &HTTPMessage{Status: 200, Body: []byte(`{"id":"re_late"}`)}}
	}
	reject := func(s *Store, k Key, seq int) {
		t.Helper()
		if _, err := s.Commit(ctx, AttemptResult{Key: k, Seq: seq, Outcome: OutcomeRejected, Reason: "r",
			Response: &HTTPMessage{Status: 400}}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("after FAILED_TERMINAL", func(t *testing.T) {
		s := openTest(t)
		p := proposal(43)
		if _, err := startFirst(ctx, s, p); err != nil {
			t.Fatal(err)
		}
		reject(s, p.Key, 1)
		it, err := s.Commit(ctx, late(p.Key, 1))
		if err != nil || it.State != intent.Quarantined {
			t.Fatalf("late applied = %+v, %v; want QUARANTINED", it, err)
		}
		if err := s.InTx(ctx, func(tx *Tx) error {
			_, err := tx.Transition(ctx, it, intent.Reopened, TransitionOpts{BumpGeneration: true})
			return err
		}); err == nil {
			t.Fatal("a quarantined intent was reopened")
		}
	})
	t.Run("read before it moved", func(t *testing.T) {
		// The response path read the intent IN_FLIGHT; it was rejected
		// before the late "applied" is committed: the one-round-trip
		// commit must find it moved and do what the locking one does.
		s := openTest(t)
		p := proposal(46)
		first, err := startFirst(ctx, s, p)
		if err != nil {
			t.Fatal(err)
		}
		reject(s, p.Key, 1)
		r := late(p.Key, 1)
		r.Seen = &first.Intent
		it, err := s.Commit(ctx, r)
		if err != nil || it.State != intent.Quarantined {
			t.Fatalf("late applied with a stale read = %+v, %v; want QUARANTINED", it, err)
		}
	})
	t.Run("while a newer attempt is in flight", func(t *testing.T) {
		s := openTest(t)
		p := proposal(44)
		if _, err := startFirst(ctx, s, p); err != nil {
			t.Fatal(err)
		}
		reject(s, p.Key, 1)
		if err := s.InTx(ctx, func(tx *Tx) error {
			it, err := tx.LockIntent(ctx, p.Key)
			if err != nil {
				return err
			}
			if it, err = tx.Transition(ctx, it, intent.Reopened, TransitionOpts{BumpGeneration: true}); err != nil {
				return err
			}
			_, a, err := tx.StartAttempt(ctx, it, p.AttemptStart)
			if err == nil && a.Seq != 2 {
				return fmt.Errorf("reopened attempt %d", a.Seq)
			}
			return err
		}); err != nil {
			t.Fatalf("reopen: %v", err)
		}
		it, err := s.Commit(ctx, late(p.Key, 1))
		if err != nil || it.State != intent.Quarantined || it.AttemptCount != 2 {
			t.Fatalf("late applied of attempt 1 = %+v, %v; want QUARANTINED", it, err)
		}
	})
	t.Run("the reconciled attempt itself is no conflict", func(t *testing.T) {
		s := openTest(t)
		p := proposal(45)
		if _, err := startFirst(ctx, s, p); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeAmbiguous, Reason: "502"}); err != nil {
			t.Fatal(err)
		}
		it, err := s.Commit(ctx, late(p.Key, 1))
		if err != nil || it.State != intent.Unknown {
			t.Fatalf("late applied of the ambiguous attempt = %+v, %v; want UNKNOWN for the reconciler", it, err)
		}
	})
}

// TestCommitTokenNeverChanges: the database refuses to rebind an attempt.
func TestCommitTokenNeverChanges(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	p, _ := reportedProposal(t, s, 46, "cct_first")
	h := sha256.Sum256([]byte("cct_second"))
	if _, err := s.pool.Exec(ctx, `UPDATE attempts SET commit_token_hash = $3 WHERE rail_account = $1 AND sik = $2`,
		p.RailAccount, p.SIK, h[:]); err == nil {
		t.Fatal("the database let an attempt's commit token change")
	}
}

// TestLateAppliedHoldsItsAmountAgain: an intent settled as not applied has
// its hold voided; when the rail then says it applied, the quarantine must
// count that money against the mandate again (in the windows, and in the
// budget even past it), or the agent could spend it twice.
func TestLateAppliedHoldsItsAmountAgain(t *testing.T) {
	ctx := context.Background()
	const budget, amount = 1000, 1000
	hold := func(s *Store, it Intent, mandate string) {
		t.Helper()
		if err := s.InTx(ctx, func(tx *Tx) error {
			return tx.PlaceHold(ctx, it, HoldSpec{MandateHash: mandate, AgentID: "agent_a", PayeeKey: "pi_1",
				Currency: "USD", AmountMinor: amount, BudgetMinor: budget})
		}); err != nil {
			t.Fatal(err)
		}
	}
	budgetOf := func(s *Store, mandate string) BudgetState {
		t.Helper()
		b, err := s.Budgets(ctx, mandate)
		if err != nil || len(b) != 1 {
			t.Fatalf("budgets = %+v, %v", b, err)
		}
		return b[0]
	}
	windowCalls := func(s *Store, mandate string) int64 {
		t.Helper()
		var calls int64
		if err := s.InTx(ctx, func(tx *Tx) (err error) {
			calls, _, err = tx.WindowUsage(ctx, mandate, false, "agent_a", time.Now().Add(-time.Hour), "USD")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return calls
	}
	late := func(s *Store, k Key) Intent {
		t.Helper()
		it, err := s.Commit(ctx, AttemptResult{Key: k, Seq: 1, Outcome: OutcomeApplied, EntityID: "re_late",
			Response: &HTTPMessage{Status: 200, Body: []byte(`{"id":"re_late"}`)}})
		if err != nil || it.State != intent.Quarantined {
			t.Fatalf("late applied = %+v, %v; want QUARANTINED", it, err)
		}
		return it
	}
	settleAbsent := func(s *Store, k Key) {
		t.Helper()
		if _, err := s.Commit(ctx, AttemptResult{Key: k, Seq: 1, Outcome: OutcomeAmbiguous, Reason: "timeout"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ClaimReconcile(ctx, "rec", time.Minute, 10, &k); err != nil {
			t.Fatal(err)
		}
		if it, err := s.RecordFinding(ctx, Finding{Key: k, AttemptSeq: 1, Outcome: FindingAbsent, Pages: 1, PaginationExhausted: true, Owner: "rec"}); err != nil || it.State != intent.ConfirmedNotApplied {
			t.Fatalf("absent finding = %+v, %v", it, err)
		}
	}

	// begin opens a ledger with intent n started and its hold placed
	// under a mandate of its own.
	begin := func(n int) (*Store, string, testProposal) {
		t.Helper()
		s := openTest(t)
		mandate, p := fmt.Sprintf("%064x", n), proposal(n)
		res, err := startFirst(ctx, s, p)
		if err != nil {
			t.Fatal(err)
		}
		hold(s, res.Intent, mandate)
		return s, mandate, p
	}
	reject := func(s *Store, k Key) {
		t.Helper()
		if _, err := s.Commit(ctx, AttemptResult{Key: k, Seq: 1, Outcome: OutcomeRejected, Reason: "r", Response: &HTTPMessage{Status: 400}}); err != nil {
			t.Fatal(err)
		}
	}
	// resend moves the settled intent along ev, holds its amount again and
	// starts attempt 2 with stamp.
	resend := func(s *Store, p testProposal, mandate string, ev intent.Event, o TransitionOpts, stamp string) {
		t.Helper()
		if err := s.InTx(ctx, func(tx *Tx) error {
			it, err := tx.LockIntent(ctx, p.Key)
			if err != nil {
				return err
			}
			if it, err = tx.Transition(ctx, it, ev, o); err != nil {
				return err
			}
			if err := tx.PlaceHold(ctx, it, HoldSpec{MandateHash: mandate, AgentID: "agent_a", PayeeKey: "pi_1", Currency: "USD", AmountMinor: amount, BudgetMinor: budget}); err != nil {
				return err
			}
			as := p.AttemptStart
			as.Stamp = stamp
			_, _, err = tx.StartAttempt(ctx, it, as)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("after CONFIRMED_NOT_APPLIED, within the budget", func(t *testing.T) {
		s, mandate, p := begin(51)
		settleAbsent(s, p.Key)
		if b := budgetOf(s, mandate); b.Held != 0 || windowCalls(s, mandate) != 0 {
			t.Fatalf("after the absent finding: %+v, %d calls; want nothing held", b, windowCalls(s, mandate))
		}
		it := late(s, p.Key)
		if b := budgetOf(s, mandate); b.Held != amount || b.Spent != 0 {
			t.Fatalf("budget after the late applied = %+v; want %d held again", b, amount)
		}
		if n := windowCalls(s, mandate); n != 1 {
			t.Fatalf("window after the late applied counts %d calls, want 1", n)
		}
		if !strings.Contains(it.Reason, "held again") || strings.Contains(it.Reason, "outside the budget") {
			t.Fatalf("reason %q", it.Reason)
		}
		// A second late answer holds nothing more.
		late(s, p.Key)
		if b := budgetOf(s, mandate); b.Held != amount {
			t.Fatalf("budget after a second late applied = %+v", b)
		}
	})
	t.Run("after FAILED_TERMINAL, the budget taken since", func(t *testing.T) {
		s, mandate, p := begin(52)
		q, r := proposal(53), proposal(54)
		reject(s, p.Key)
		// The budget the rejection gave back is taken by another intent.
		other, err := startFirst(ctx, s, q)
		if err != nil {
			t.Fatal(err)
		}
		hold(s, other.Intent, mandate)
		it := late(s, p.Key)
		// Both intents' money may have left: both count, past the budget.
		if b := budgetOf(s, mandate); b.Held != 2*amount || b.Spent != 0 {
			t.Fatalf("budget after the late applied = %+v; want both intents' %d held", b, 2*amount)
		}
		if n := windowCalls(s, mandate); n != 2 {
			t.Fatalf("window counts %d calls, want both intents' 2", n)
		}
		if want := fmt.Sprintf("overrun by %d USD", amount); !strings.Contains(it.Reason, want) {
			t.Fatalf("reason %q does not say %q", it.Reason, want)
		}
		// The other intent is settled as not applied: its hold is voided,
		// but what it gives back only pays the overrun. Before, the late
		// hold was outside the budget, the void left the budget empty, and
		// a third intent's hold fit: three budgets' worth could leave.
		reject(s, q.Key)
		if b := budgetOf(s, mandate); b.Held != amount {
			t.Fatalf("budget after the void = %+v; want the late hold's %d held", b, amount)
		}
		third, err := startFirst(ctx, s, r)
		if err != nil {
			t.Fatal(err)
		}
		err = s.InTx(ctx, func(tx *Tx) error {
			return tx.PlaceHold(ctx, third.Intent, HoldSpec{MandateHash: mandate, AgentID: "agent_a", PayeeKey: "pi_1",
				Currency: "USD", AmountMinor: 1, BudgetMinor: budget})
		})
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.ConstraintName != "budget_never_exceeded" {
			t.Fatalf("a hold of 1 on the full budget: err = %v, want budget_never_exceeded", err)
		}
	})
	t.Run("while a newer attempt is in flight", func(t *testing.T) {
		// Attempt 1 rejected (its hold voided), the intent reopened with a
		// new hold, attempt 2 sent; then the rail says attempt 1 applied.
		// Both may have: the late one's hold is placed beside the live one.
		s, mandate, p := begin(57)
		reject(s, p.Key)
		resend(s, p, mandate, intent.Reopened, TransitionOpts{BumpGeneration: true}, p.SIK+"-1")
		it := late(s, p.Key)
		if b := budgetOf(s, mandate); b.Held != 2*amount {
			t.Fatalf("budget after attempt 1's late applied = %+v; want both attempts' %d held", b, 2*amount)
		}
		if n := windowCalls(s, mandate); n != 2 {
			t.Fatalf("window counts %d calls, want both attempts' 2", n)
		}
		if !strings.Contains(it.Reason, "both may have applied") {
			t.Fatalf("reason %q", it.Reason)
		}
	})
	t.Run("while a retry of the same stamp is in flight", func(t *testing.T) {
		// Settled absent, retried under the same stamp (the rail applies
		// one request of a stamp at most once), then the rail says the
		// first attempt applied: one effect, whose hold the retry's stands
		// for. No second hold, and the reason does not say both applied.
		s, mandate, p := begin(58)
		settleAbsent(s, p.Key)
		resend(s, p, mandate, intent.RetryAuthorized, TransitionOpts{Reason: "retry"}, p.Stamp)
		it := late(s, p.Key)
		if b := budgetOf(s, mandate); b.Held != amount {
			t.Fatalf("budget after attempt 1's late applied = %+v; want the retry's %d held, once", b, amount)
		}
		if !strings.Contains(it.Reason, "same stamp") || strings.Contains(it.Reason, "both may have applied") {
			t.Fatalf("reason %q", it.Reason)
		}
	})
	t.Run("a late hold past the budget, then given back", func(t *testing.T) {
		s, mandate, p := begin(55)
		q := proposal(56)
		reject(s, p.Key)
		other, err := startFirst(ctx, s, q)
		if err != nil {
			t.Fatal(err)
		}
		hold(s, other.Intent, mandate)
		late(s, p.Key)
		var overrun int64
		if err := s.pool.QueryRow(ctx, `SELECT overrun_minor FROM mandate_budgets WHERE mandate_hash = $1`, mandate).Scan(&overrun); err != nil || overrun != amount {
			t.Fatalf("overrun = %d, %v; want %d", overrun, err, amount)
		}
		// Only a voided hold placed again may go past the budget: the
		// database refuses the flag on any other.
		_, err = s.pool.Exec(ctx, `INSERT INTO budget_holds (rail_account, sik, hold_seq, mandate_hash, agent_id, payee_key, subject, currency,
			amount_minor, budgeted, window_agent, window_payee, beyond_budget)
			SELECT rail_account, sik, hold_seq + 1, mandate_hash, agent_id, payee_key, subject, currency, 1, true, false, false, true
			FROM budget_holds WHERE rail_account = $1 AND sik = $2`, q.RailAccount, q.SIK)
		if err == nil || !strings.Contains(err.Error(), "only a voided hold placed again") {
			t.Fatalf("a beyond-budget hold with no voided one before it: err = %v", err)
		}
	})
}

// TestBudgetSplitMigrationKeepsHeldAndSpent: migration 00025 moves a
// budget's spent amount out of its row; a ledger that had posted, held and
// voided holds reads the same held and spent amounts after it, posting then
// counts apart, and its Down puts the row back as it was.
func TestBudgetSplitMigrationKeepsHeldAndSpent(t *testing.T) {
	ctx := context.Background()
	url, p, db := migrationTest(t)
	if _, err := p.DownTo(ctx, 24); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mandate := fmt.Sprintf("%064x", 25)
	settle := func(k Key, state string) {
		t.Helper()
		if _, err := s.pool.Exec(ctx, `UPDATE budget_holds SET state = $3 WHERE rail_account = $1 AND sik = $2`, k.RailAccount, k.SIK, state); err != nil {
			t.Fatal(err)
		}
	}
	var keys []Key
	for i, amount := range []int64{100, 200, 400} {
		res, err := startFirst(ctx, s, proposal(250+i))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.InTx(ctx, func(tx *Tx) error {
			return tx.PlaceHold(ctx, res.Intent, HoldSpec{MandateHash: mandate, AgentID: "agent_a", PayeeKey: "pi_1", Currency: "USD", AmountMinor: amount, BudgetMinor: 1000})
		}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, res.Intent.Key)
	}
	settle(keys[0], "posted")
	settle(keys[2], "voided")
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	s.pool.Reset() // cached plans were made against the old schema
	want := func(held, spent int64) {
		t.Helper()
		b, err := s.Budgets(ctx, mandate)
		if err != nil || len(b) != 1 || b[0].Held != held || b[0].Spent != spent || b[0].Budget != 1000 {
			t.Fatalf("budgets = %+v, %v; want %d held, %d spent of 1000", b, err, held, spent)
		}
		var h, sp int64
		if err := s.InTx(ctx, func(tx *Tx) (err error) { h, sp, err = tx.BudgetUsage(ctx, mandate, "USD"); return err }); err != nil || h != held || sp != spent {
			t.Fatalf("BudgetUsage = %d, %d, %v; want %d, %d", h, sp, err, held, spent)
		}
	}
	want(200, 100)
	settle(keys[1], "posted")
	want(0, 300)
	// The reservation is what B1 bounds: 700 more fits, 701 does not.
	for _, tc := range []struct {
		amount int64
		fits   bool
	}{{701, false}, {700, true}} {
		res, err := startFirst(ctx, s, proposal(260+int(tc.amount%10)))
		if err != nil {
			t.Fatal(err)
		}
		err = s.InTx(ctx, func(tx *Tx) error {
			return tx.PlaceHold(ctx, res.Intent, HoldSpec{MandateHash: mandate, AgentID: "agent_a", PayeeKey: "pi_1", Currency: "USD", AmountMinor: tc.amount, BudgetMinor: 1000})
		})
		if (err == nil) != tc.fits {
			t.Fatalf("a hold of %d over 300 spent of 1000: %v", tc.amount, err)
		}
	}
	if _, err := p.DownTo(ctx, 24); err != nil {
		t.Fatal(err)
	}
	var held, spent int64
	if err := db.QueryRowContext(ctx, `SELECT held_minor, spent_minor FROM mandate_budgets WHERE mandate_hash = $1`, mandate).Scan(&held, &spent); err != nil || held != 700 || spent != 300 {
		t.Fatalf("after Down: %d held, %d spent, %v; want 700, 300", held, spent, err)
	}
}

// TestBudgetOverrunMigration: migration 00026's Down refuses to drop an
// overrun the old row cannot express, and goes down once there is none.
func TestBudgetOverrunMigration(t *testing.T) {
	ctx := context.Background()
	url, p, db := migrationTest(t)
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mandate := fmt.Sprintf("%064x", 26)
	res, err := startFirst(ctx, s, proposal(261))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.InTx(ctx, func(tx *Tx) error {
		return tx.PlaceHold(ctx, res.Intent, HoldSpec{MandateHash: mandate, AgentID: "agent_a", PayeeKey: "pi_1", Currency: "USD", AmountMinor: 400, BudgetMinor: 1000})
	}); err != nil {
		t.Fatal(err)
	}
	// The CHECK ties the overrun to the reservation: neither moves alone.
	for _, q := range []string{
		`UPDATE mandate_budgets SET overrun_minor = 5 WHERE mandate_hash = $1`,
		`UPDATE mandate_budgets SET reserved_minor = budget_minor + 5 WHERE mandate_hash = $1`,
	} {
		if _, err := db.ExecContext(ctx, q, mandate); err == nil || !strings.Contains(err.Error(), "budget_never_exceeded") {
			t.Fatalf("%s: err = %v, want budget_never_exceeded", q, err)
		}
	}
	if _, err := db.ExecContext(ctx, `UPDATE mandate_budgets SET reserved_minor = budget_minor + 5, overrun_minor = 5 WHERE mandate_hash = $1`, mandate); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 25); err == nil || !strings.Contains(err.Error(), "cannot be undone") {
		t.Fatalf("Down over an overrun budget: err = %v", err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE mandate_budgets SET reserved_minor = 400, overrun_minor = 0 WHERE mandate_hash = $1`, mandate); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 25); err != nil {
		t.Fatal(err)
	}
	var reserved int64
	if err := db.QueryRowContext(ctx, `SELECT reserved_minor FROM mandate_budgets WHERE mandate_hash = $1`, mandate).Scan(&reserved); err != nil || reserved != 400 {
		t.Fatalf("after Down: %d reserved, %v; want 400", reserved, err)
	}
}

// TestBudgetOverrunMigrationReservesOldLateHolds: a hold the old rule
// placed again outside a budget that could no longer take it (budgeted
// false, after a voided budgeted hold of its intent) is reserved by
// migration 00026, past the budget, so it is not spent a second time.
func TestBudgetOverrunMigrationReservesOldLateHolds(t *testing.T) {
	ctx := context.Background()
	url, p, db := migrationTest(t)
	if _, err := p.DownTo(ctx, 25); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mandate := fmt.Sprintf("%064x", 2601)
	var keys []Key
	for i := range 2 {
		res, err := startFirst(ctx, s, proposal(2601+i))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.InTx(ctx, func(tx *Tx) error {
			return tx.PlaceHold(ctx, res.Intent, HoldSpec{MandateHash: mandate, AgentID: "agent_a", PayeeKey: "pi_1", Currency: "USD", AmountMinor: 1000, BudgetMinor: 1000})
		}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, res.Intent.Key)
		if i == 0 {
			if _, err := db.ExecContext(ctx, `UPDATE budget_holds SET state = 'voided' WHERE rail_account = $1 AND sik = $2`, res.Intent.RailAccount, res.Intent.SIK); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The first intent's hold placed again as the old holdAgain did when
	// the budget (taken by the second) could not take it; and a hold that
	// was never budgeted (a mandate with no budget) stays as it is.
	if _, err := db.ExecContext(ctx, `INSERT INTO budget_holds (rail_account, sik, hold_seq, mandate_hash, agent_id, payee_key, subject, currency,
		amount_minor, budgeted, window_agent, window_payee, created_at)
		SELECT rail_account, sik, 2, mandate_hash, agent_id, payee_key, subject, currency, amount_minor, false, window_agent, window_payee, created_at
		FROM budget_holds WHERE rail_account = $1 AND sik = $2`, keys[0].RailAccount, keys[0].SIK); err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 26); err != nil {
		t.Fatal(err)
	}
	var reserved, overrun int64
	var budgeted, beyond bool
	if err := db.QueryRowContext(ctx, `SELECT b.reserved_minor, b.overrun_minor, h.budgeted, h.beyond_budget FROM mandate_budgets b, budget_holds h
		WHERE b.mandate_hash = $1 AND h.rail_account = $2 AND h.sik = $3 AND h.hold_seq = 2`, mandate, keys[0].RailAccount, keys[0].SIK).Scan(&reserved, &overrun, &budgeted, &beyond); err != nil {
		t.Fatal(err)
	}
	if reserved != 2000 || overrun != 1000 || !budgeted || !beyond {
		t.Fatalf("after 00026: reserved %d, overrun %d, the late hold budgeted %v beyond %v; want 2000, 1000, true, true", reserved, overrun, budgeted, beyond)
	}
	// The second intent's hold voided gives back only the overrun.
	if _, err := db.ExecContext(ctx, `UPDATE budget_holds SET state = 'voided' WHERE rail_account = $1 AND sik = $2`, keys[1].RailAccount, keys[1].SIK); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctx, `SELECT reserved_minor, overrun_minor FROM mandate_budgets WHERE mandate_hash = $1`, mandate).Scan(&reserved, &overrun); err != nil || reserved != 1000 || overrun != 0 {
		t.Fatalf("after the void: reserved %d, overrun %d, %v; want 1000, 0", reserved, overrun, err)
	}
}
