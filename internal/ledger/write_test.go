package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/testing/wait"
)

// TestFreshWriteIsBornInFlight: the one-round-trip write of a new intent
// whose gates passed stores one row version, IN_FLIGHT on attempt 1, with
// one audit record of its birth, which seals and verifies; a second one
// with the same key writes nothing.
func TestFreshWriteIsBornInFlight(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	p := proposal(60)
	write := func() error {
		w := NewWrite()
		it, err := w.NewIntent(p.NewIntent, "", intent.GatesPassed, intent.AttemptStarted)
		if err != nil {
			return err
		}
		a := p.AttemptStart
		a.Seq = it.AttemptCount
		if _, err := w.StartAttempt(a); err != nil {
			return err
		}
		return s.Apply(ctx, w)
	}
	if err := write(); err != nil {
		t.Fatal(err)
	}
	// The first row of a fresh table: had it been inserted PROPOSED and
	// updated twice, its live version would be the third tuple.
	var ctid string
	if err := s.pool.QueryRow(ctx, `SELECT ctid::text FROM intents WHERE sik = $1`, p.SIK).Scan(&ctid); err != nil || ctid != "(0,1)" {
		t.Fatalf("the intent's live version is tuple %s (%v); want (0,1), the only one", ctid, err)
	}
	it, atts, err := s.GetIntent(ctx, p.Key)
	if err != nil || it.State != intent.InFlight || it.AttemptCount != 1 || len(atts) != 1 || atts[0].Seq != 1 {
		t.Fatalf("intent = %+v, %d attempts, %v", it, len(atts), err)
	}
	rows, err := s.pool.Query(ctx, `SELECT from_state, to_state, event, attempt_seq FROM audit_records WHERE sik = $1 ORDER BY id`, p.SIK)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for rows.Next() {
		var from, to, ev string
		var seq int
		if err := rows.Scan(&from, &to, &ev, &seq); err != nil {
			t.Fatal(err)
		}
		got = append(got, from+">"+to+":"+ev+"#"+string(rune('0'+seq)))
	}
	rows.Close()
	// One record of its birth: no transaction could see it PROPOSED or
	// AUTHORIZED (migration 00020).
	want := []string{">IN_FLIGHT:ATTEMPT_STARTED#1"}
	if len(got) != len(want) {
		t.Fatalf("audit records %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("audit records %v, want %v", got, want)
		}
	}
	signer, verifier := testSigner(t, "birth.test")
	if _, err := s.Seal(ctx, signer); err != nil {
		t.Fatal(err)
	}
	if rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{Verifiers: []note.Verifier{verifier}}); err != nil || !rep.Ok() || rep.Sealed != 1 {
		t.Fatalf("verify = %+v, %v", rep, err)
	}
	if err := write(); !errors.Is(err, ErrIntentExists) {
		t.Fatalf("a second fresh write of the key = %v, want ErrIntentExists", err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM audit_records WHERE sik = $1`, p.SIK).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d audit records after the refused write, %v", n, err)
	}
}

// TestFreshWriteOfASeenAliasWritesNothing: a fresh write is decided on its
// request's alias being unseen; when another decision recorded the alias
// first (even for another key), the write fails as ErrIntentExists and
// leaves nothing behind, so the engine decides again with locks.
func TestFreshWriteOfASeenAliasWritesNothing(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	first, second := proposal(61), proposal(62)
	write := func(p testProposal) error {
		w := NewWrite()
		it, err := w.NewIntent(p.NewIntent, "", intent.GatesPassed, intent.AttemptStarted)
		if err != nil {
			return err
		}
		w.AddAlias(p.Key, testSIK(99))
		a := p.AttemptStart
		a.Seq = it.AttemptCount
		if _, err := w.StartAttempt(a); err != nil {
			return err
		}
		return s.Apply(ctx, w)
	}
	if err := write(first); err != nil {
		t.Fatal(err)
	}
	if err := write(second); !errors.Is(err, ErrIntentExists) {
		t.Fatalf("a fresh write of a seen alias = %v, want ErrIntentExists", err)
	}
	var intents, audits int
	if err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM intents WHERE sik = $1), (SELECT count(*) FROM audit_records WHERE sik = $1)`,
		second.SIK).Scan(&intents, &audits); err != nil || intents != 0 || audits != 0 {
		t.Fatalf("after the refused write: %d intents, %d audit records (%v); want none", intents, audits, err)
	}
	var sik string
	if err := s.pool.QueryRow(ctx, `SELECT sik FROM intent_aliases WHERE alias = $1`, testSIK(99)).Scan(&sik); err != nil || sik != first.SIK {
		t.Fatalf("the alias names %q (%v), want the first write's %s", sik, err, first.SIK)
	}
}

func TestRenumberShiftsParameters(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"x = $1", "x = $1"},
		{"a = $1 AND b = $2 AND c = $10", "a = $4 AND b = $5 AND c = $13"},
		{"no parameters", "no parameters"},
	} {
		off := 3
		if tc.in == "x = $1" {
			off = 0
		}
		if got := renumber(tc.in, off); got != tc.want {
			t.Errorf("renumber(%q, %d) = %q, want %q", tc.in, off, got, tc.want)
		}
	}
}

// TestWriteReliesOnRowsItsStoreSawCommitted: a store's Write inserts a
// mandate's budget row the first time only; later ones rely on it, one
// statement fewer. One that finds a relied-on row missing writes nothing
// and is refused as a *GuardError (the engine then decides with locks),
// and the store inserts what it relied on again next time. Taking the
// mandate lineage's turn is a statement of its own each time; a write
// under a mandate the ledger does not hold is refused.
func TestWriteReliesOnRowsItsStoreSawCommitted(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	agent := createMandateAgent(t, s, "own_rows")
	m := testMandate(t, agent.ID, "acct_1", time.Now().Add(-time.Hour).Truncate(time.Second), time.Now().Add(time.Hour).Truncate(time.Second), "rows")
	mustCreateMandate(t, s, m)
	hash := m.Hash
	write := func(n int) (*Write, error) {
		p := proposal(n)
		w := s.NewWrite()
		it, err := w.NewIntent(p.NewIntent, "", intent.GatesPassed, intent.AttemptStarted)
		if err != nil {
			return nil, err
		}
		a := p.AttemptStart
		a.Seq = it.AttemptCount
		if _, err := w.StartAttempt(a); err != nil {
			return nil, err
		}
		w.LockMandateLineage(hash)
		w.PlaceHold(*it, HoldSpec{MandateHash: hash, AgentID: agent.ID, PayeeKey: "pi_1", Currency: "USD", AmountMinor: 100, BudgetMinor: 100000})
		return w, s.Apply(ctx, w)
	}
	first, err := write(70)
	if err != nil {
		t.Fatal(err)
	}
	second, err := write(71)
	if err != nil {
		t.Fatal(err)
	}
	if second.b.Len() != first.b.Len()-1 {
		t.Fatalf("the second write has %d statements, the first %d; want one fewer", second.b.Len(), first.b.Len())
	}
	// The budget row goes, as only someone editing the database by hand
	// could: the hold's guard finds it missing.
	if _, err := s.pool.Exec(ctx, `DELETE FROM mandate_budgets WHERE mandate_hash = $1`, hash); err != nil {
		t.Fatal(err)
	}
	var guard *GuardError
	if _, err := write(72); !errors.As(err, &guard) {
		t.Fatalf("a write relying on a missing budget row = %v, want a *GuardError", err)
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM intents WHERE sik = $1`, proposal(72).SIK).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the refused write left %d intents (%v)", n, err)
	}
	fourth, err := write(73)
	if err != nil {
		t.Fatal(err)
	}
	if fourth.b.Len() != first.b.Len() {
		t.Fatalf("after the refusal a write has %d statements, want %d (what it relied on inserted again)", fourth.b.Len(), first.b.Len())
	}
	if fifth, err := write(74); err != nil || fifth.b.Len() != first.b.Len()-1 {
		t.Fatalf("then a write has %d statements (%v), want %d", fifth.b.Len(), err, first.b.Len()-1)
	}
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM mandate_budgets WHERE mandate_hash = $1`, hash).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d budget rows (%v), want the one inserted again", n, err)
	}
	// A mandate the ledger does not hold has no lineage to take turns in.
	hash = fmt.Sprintf("%064x", 77)
	if _, err := write(75); !errors.As(err, &guard) || !strings.Contains(err.Error(), "the mandate is not in the ledger") {
		t.Fatalf("a write under a mandate not in the ledger = %v, want a *GuardError naming it", err)
	}
}

// TestApplyRetriesADeadlockedWrite: two writes lock two rows in opposite
// orders; PostgreSQL breaks the deadlock by failing one, and Apply sends
// that one again, whole, and it commits. (The retry used to resend pgx's
// queued queries as they were, naming statements the failed batch had
// dropped: "prepared statement does not exist", and the write was lost.)
func TestApplyRetriesADeadlockedWrite(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	a, b := fmt.Sprintf("%064x", 81), fmt.Sprintf("%064x", 82)
	const lock = `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`
	write := func(first, second string) error {
		w := NewWrite()
		w.queue(lock, first)
		w.queue(`SELECT pg_sleep(0.3)`)
		w.queue(lock, second)
		w.queue(`INSERT INTO mandate_fee_spent AS f (mandate_hash, shard, fee_minor) VALUES ($1, 0, 1)
			ON CONFLICT (mandate_hash, shard) DO UPDATE SET fee_minor = f.fee_minor + 1`, first)
		return s.Apply(ctx, w)
	}
	// Four pairs at once, so that retries meet connections of the pool
	// other than the one that prepared their statements.
	errs := make(chan error, 8)
	for range 4 {
		go func() { errs <- write(a, b) }()
		go func() { errs <- write(b, a) }()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatalf("a write that met a deadlock: %v", err)
		}
	}
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT sum(fee_minor) FROM mandate_fee_spent WHERE mandate_hash IN ($1, $2)`, a, b).Scan(&n); err != nil || n != 8 {
		t.Fatalf("every write committed once: sum %d (%v), want 8", n, err)
	}
}

// TestRevocationIsNotStarvedByDecisions: a mandate revocation waits for the
// decision already holding the agent's locks, and a decision that starts
// after the revocation began waits behind it and then sees the mandate
// revoked. (Decisions used to share-lock the mandate row only: a new share
// lock is granted beside the old ones while an UPDATE waits, so an agent
// deciding fast enough kept its owner's revocation waiting indefinitely,
// and the decisions that overtook it were allowed.)
func TestRevocationIsNotStarvedByDecisions(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	agent, err := s.CreateAgent(ctx, "own_starve", "bot")
	if err != nil {
		t.Fatal(err)
	}
	cred, err := s.IssueCredential(ctx, agent.ID, credential.ScopeExecute, time.Now().Add(time.Hour), [32]byte{9})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GrantRailAccount(ctx, "acct_starve", "own_starve"); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	m := testMandate(t, agent.ID, "acct_starve", now.Add(-time.Hour), now.Add(time.Hour), "starve")
	m.OwnerID = "own_starve"
	if _, err := s.CreateMandate(ctx, m); err != nil {
		t.Fatal(err)
	}
	// The test holds a lock the first decision waits for, mid-batch, with
	// its share locks taken.
	// Connections of the test's own: the store's pool is busy with the
	// three transactions under test.
	mon, err := pgx.Connect(ctx, s.pool.Config().ConnConfig.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close(ctx)
	gateConn, err := pgx.Connect(ctx, s.pool.Config().ConnConfig.ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer gateConn.Close(ctx)
	gate, err := gateConn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = gate.Rollback(ctx) }()
	if _, err := gate.Exec(ctx, `SELECT pg_advisory_xact_lock(4242)`); err != nil {
		t.Fatal(err)
	}
	decide := func(wait bool) error {
		w := s.NewWrite()
		w.AssertPrincipal(cred.ID, agent.ID)
		w.AssertMandate(agent.ID, "acct_starve", m.Hash, time.Now())
		if wait {
			w.queue(`SELECT pg_advisory_xact_lock(4242)`)
		}
		w.queue(`SELECT 1`)
		return s.Apply(ctx, w)
	}
	waiting := func(n int) func() bool {
		return func() bool {
			var k int
			err := mon.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&k)
			return err == nil && k >= n
		}
	}
	first, revoke, second := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	go func() { first <- decide(true) }()
	if !wait.Until(10*time.Second, waiting(1)) {
		t.Fatal("the first decision never waited")
	}
	go func() { _, err := s.RevokeMandate(ctx, m.Hash, "the owner stops it"); revoke <- err }()
	if !wait.Until(10*time.Second, waiting(2)) {
		t.Fatal("the revocation never waited for the first decision")
	}
	go func() { second <- decide(false) }()
	var early error
	overtook := false
	if !wait.Until(10*time.Second, func() bool {
		select {
		case early = <-second:
			overtook = true
			return true
		default:
			return waiting(3)()
		}
	}) {
		t.Fatal("the second decision neither finished nor waited")
	}
	if overtook {
		t.Fatalf("a decision begun after the revocation finished before it (%v): the revocation can be starved", early)
	}
	if err := gate.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("the decision begun before the revocation: %v", err)
	}
	if err := <-revoke; err != nil {
		t.Fatal(err)
	}
	var guard *GuardError
	if err := <-second; !errors.As(err, &guard) {
		t.Fatalf("the decision begun after the revocation = %v, want a *GuardError (the mandate revoked)", err)
	}
}

// TestGuardErrorSaysWhetherTheFactsMoved: a write refused by its
// assertion about who asks or about the mandate (the engine then decides
// again on a read) is told apart from one refused by a count (the engine
// then decides under its locks on the same facts).
func TestGuardErrorSaysWhetherTheFactsMoved(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	mandate := fmt.Sprintf("%064x", 7)
	for _, tc := range []struct {
		name  string
		queue func(w *Write)
		moved bool
	}{
		{"principal", func(w *Write) { w.AssertPrincipal("crd_none", "agt_none") }, true},
		{"principal, unlocked", func(w *Write) { w.CheckPrincipal("crd_none") }, true},
		{"mandate", func(w *Write) { w.AssertMandate("agt_none", "acct_1", mandate, time.Now()) }, true},
		{"mandate, unlocked", func(w *Write) { w.CheckMandate("agt_none", "acct_1", mandate, time.Now()) }, true},
		{"window", func(w *Write) {
			w.AssertWindow(mandate, false, "agt_none", time.Now().Add(-time.Hour), "USD", -1, 0, "the window has no room left")
		}, false},
		{"budget", func(w *Write) { w.AssertBudget(mandate, "USD", -1) }, false},
	} {
		w := NewWrite()
		tc.queue(w)
		var guard *GuardError
		if err := s.Apply(ctx, w); !errors.As(err, &guard) {
			t.Fatalf("%s: Apply = %v, want a GuardError", tc.name, err)
		}
		if guard.Moved() != tc.moved {
			t.Errorf("%s: %q Moved() = %v, want %v", tc.name, guard.What, guard.Moved(), tc.moved)
		}
	}
}

// TestFeeCommitDoesNotTakeTheMandatesTurn: an APPLIED commit that carries
// a fee counts it apart (migration 00028), so it neither waits for the
// decision holding its mandate's usage lock nor deadlocks with it; the fee
// still counts in FeeSpent and in the fee budget's assertion.
func TestFeeCommitDoesNotTakeTheMandatesTurn(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	agent := createMandateAgent(t, s, "own_fee_turn")
	m := testMandate(t, agent.ID, "acct_1", time.Now().Add(-time.Hour).Truncate(time.Second), time.Now().Add(time.Hour).Truncate(time.Second), "fee turn")
	mustCreateMandate(t, s, m)
	mandate := m.Hash
	p := proposal(2800)
	res, err := startFirst(ctx, s, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.InTx(ctx, func(tx *Tx) error {
		return tx.PlaceHold(ctx, res.Intent, HoldSpec{MandateHash: mandate, AgentID: "agent_a", PayeeKey: "pi_1", Currency: "USD", AmountMinor: 1000})
	}); err != nil {
		t.Fatal(err)
	}
	// A decision under the mandate holds its turn until released.
	decision, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = decision.Rollback(ctx) }()
	var locked bool
	if err := decision.QueryRow(ctx, `SELECT `+lockLineageSQL, mandate).Scan(&locked); err != nil || !locked {
		t.Fatalf("taking the mandate lineage's turn: %v, %v", locked, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	it, err := s.Commit(cctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeApplied, EntityID: "re_fee", FeeMinor: 30, Seen: &res.Intent,
		Response: &HTTPMessage{Status: 200, Headers: map[string]string{"content-type": "application/json"}, Body: []byte(`{"id":"re_fee"}`)}})
	if err != nil || it.State != intent.Applied {
		t.Fatalf("a commit with a fee while a decision held the mandate's turn: %v, %v", it.State, err)
	}
	if err := decision.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var fee int64
	if err := s.InTx(ctx, func(tx *Tx) (err error) { fee, err = tx.FeeSpent(ctx, mandate); return err }); err != nil || fee != 30 {
		t.Fatalf("FeeSpent = %d, %v; want 30", fee, err)
	}
	for _, tc := range []struct {
		max  int64
		fits bool
	}{{30, true}, {29, false}} {
		w := NewWrite()
		w.AssertFeeSpent(mandate, tc.max)
		var g *GuardError
		if err := s.Apply(ctx, w); (err == nil) != tc.fits || (err != nil && !errors.As(err, &g)) {
			t.Fatalf("AssertFeeSpent(%d) with 30 spent: %v", tc.max, err)
		}
	}
}
