package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/intent"
)

func testSIK(n int) string {
	s := fmt.Sprintf("TESTSIK%025d", n)
	return strings.NewReplacer("0", "A", "1", "B", "8", "C", "9", "D").Replace(s)
}

// testProposal is an intent and the first attempt a test starts for it.
type testProposal struct {
	Key
	NewIntent
	AttemptStart
}

func proposal(n int) testProposal {
	k := Key{RailAccount: "acct_test", SIK: testSIK(n)}
	return testProposal{Key: k,
		NewIntent: NewIntent{Key: k, Rail: "stripe", Action: "refund", Subject: "pi_1", AmountMinor: 1000, Currency: "USD", Canonical: `{"v":1}`},
		// Through Envoy (with ext_proc): never marked sent, it never left,
		// and a listing may prove it absent.
		AttemptStart: AttemptStart{Key: k, Stamp: k.SIK + "-0", LeaseOwner: "test", LeaseTTL: time.Minute, ViaEnvoy: true,
			Request: HTTPMessage{Method: "POST", Path: "/v1/refunds", Headers: map[string]string{"content-type": "application/x-www-form-urlencoded"}, Body: []byte("payment_intent=pi_1&amount=1000")}},
	}
}

type started struct {
	Intent  Intent
	Attempt *Attempt
}

// startFirst writes p's intent and starts its first attempt, with the
// ledger's primitives, as the engine's locking transaction does for a new
// intent whose gates passed (the engine's script is tested in its package).
// holdNew creates p's intent and holds it for an approval of spec, as a
// HOLD of a new request does, in one transaction.
func holdNew(ctx context.Context, s *Store, p testProposal, spec ApprovalSpec) error {
	return s.InTx(ctx, func(tx *Tx) error {
		it, _, err := tx.CreateIntent(ctx, p.NewIntent)
		if err != nil {
			return err
		}
		if it, err = tx.Transition(ctx, it, intent.GatesHeld, TransitionOpts{Reason: "needs approval"}); err != nil {
			return err
		}
		return tx.OpenApproval(ctx, it, spec)
	})
}

func startFirst(ctx context.Context, s *Store, p testProposal) (started, error) {
	var res started
	err := s.InTx(ctx, func(tx *Tx) error {
		it, created, err := tx.CreateIntent(ctx, p.NewIntent)
		if err != nil {
			return err
		}
		if !created {
			return fmt.Errorf("intent %s exists", p.Key)
		}
		if it, err = tx.Transition(ctx, it, intent.GatesPassed, TransitionOpts{}); err != nil {
			return err
		}
		it, a, err := tx.StartAttempt(ctx, it, p.AttemptStart)
		res = started{Intent: it, Attempt: &a}
		return err
	})
	return res, err
}

func TestEdgesMatchTheStateMachine(t *testing.T) {
	s := openTest(t)
	rows, err := s.pool.Query(context.Background(), `SELECT from_state, event, to_state FROM intent_edges`)
	if err != nil {
		t.Fatal(err)
	}
	var db []intent.Edge
	for rows.Next() {
		var f, e, to string
		if err := rows.Scan(&f, &e, &to); err != nil {
			t.Fatal(err)
		}
		db = append(db, intent.Edge{From: intent.State(f), Event: intent.Event(e), To: intent.State(to)})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	key := func(e intent.Edge) string { return string(e.From) + "|" + string(e.Event) + "|" + string(e.To) }
	var a, b []string
	for _, e := range db {
		a = append(a, key(e))
	}
	for _, e := range intent.Edges() {
		b = append(b, key(e))
	}
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) {
		t.Fatalf("database edges differ from intent.Edges():\n db: %v\n go: %v", a, b)
	}
}

func TestProposeCommitApplied(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	p := proposal(1)
	res, err := startFirst(ctx, s, p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Attempt == nil || res.Attempt.Seq != 1 || res.Intent.State != intent.InFlight || res.Attempt.Stamp != p.SIK+"-0" {
		t.Fatalf("first attempt = %+v", res)
	}
	// The key refuses a second intent (I1).
	if err := s.InTx(ctx, func(tx *Tx) error {
		_, created, err := tx.CreateIntent(ctx, p.NewIntent)
		if err == nil && created {
			return errors.New("a second intent with the same key was created")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// The intent as read: the commit writes in one round trip.
	it, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeApplied, EntityID: "re_1", Seen: &res.Intent,
		Response: &HTTPMessage{Status: 200, Headers: map[string]string{"content-type": "application/json"}, Body: []byte(`{"id":"re_1"}`)}})
	if err != nil || it.State != intent.Applied || it.RailEntityID != "re_1" {
		t.Fatalf("commit = %+v, %v", it, err)
	}
	applied, err := s.AppliedAttempt(ctx, it)
	if err != nil || applied.Response == nil || string(applied.Response.Body) != `{"id":"re_1"}` {
		t.Fatalf("applied attempt = %+v, %v", applied, err)
	}
	// Commit of the same answer again changes nothing.
	if it, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeApplied, EntityID: "re_1"}); err != nil || it.State != intent.Applied {
		t.Fatalf("second commit = %+v, %v", it, err)
	}
	rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{})
	if err != nil || !rep.Ok() || rep.Unsealed != 4 {
		t.Fatalf("audit = %+v, %v (want 4 records: PROPOSED, AUTHORIZED, IN_FLIGHT, APPLIED)", rep, err)
	}
}

func TestAmbiguousReconcilesBeforeRetry(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	p := proposal(3)
	if _, err := startFirst(ctx, s, p); err != nil {
		t.Fatal(err)
	}
	it, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeAmbiguous, TransportError: "timeout", Reason: "timeout"})
	if err != nil || it.State != intent.Unknown || it.NextReconcileAt == nil {
		t.Fatalf("ambiguous commit = %+v, %v", it, err)
	}
	// The database refuses CONFIRMED_NOT_APPLIED without an exhaustive finding.
	if _, err := s.pool.Exec(ctx, `UPDATE intents SET state = 'RECONCILING', last_event = 'RECONCILE_STARTED' WHERE sik = $1`, p.SIK); err != nil {
		t.Fatal(err)
	}
	_, err = s.pool.Exec(ctx, `UPDATE intents SET state = 'CONFIRMED_NOT_APPLIED', last_event = 'CONFIRMED_ABSENT' WHERE sik = $1`, p.SIK)
	if err == nil || !strings.Contains(err.Error(), "exhaustive") {
		t.Fatalf("CONFIRMED_NOT_APPLIED without a finding: %v", err)
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO reconciliation_findings (rail_account, sik, attempt_seq, outcome, pages, pagination_exhausted)
		VALUES ($1, $2, 1, 'confirmed_absent', 1, false)`, p.RailAccount, p.SIK)
	if err == nil {
		t.Fatal("a confirmed_absent finding without pagination_exhausted was accepted")
	}
	if _, err := s.pool.Exec(ctx, `UPDATE intents SET state = 'UNKNOWN', last_event = 'INCONCLUSIVE' WHERE sik = $1`, p.SIK); err != nil {
		t.Fatal(err)
	}

	work, err := s.ClaimReconcile(ctx, "rec-1", time.Minute, 10, nil)
	if err != nil || len(work) != 1 || work[0].Intent.State != intent.Reconciling || work[0].Attempt.Seq != 1 {
		t.Fatalf("claim = %+v, %v", work, err)
	}
	// A second reconciler cannot take the leased intent.
	if other, err := s.ClaimReconcile(ctx, "rec-2", time.Minute, 10, nil); err != nil || len(other) != 0 {
		t.Fatalf("second claim = %+v, %v", other, err)
	}
	if _, err := s.RecordFinding(ctx, Finding{Key: p.Key, AttemptSeq: 1, Outcome: FindingAbsent, Pages: 3, PaginationExhausted: true, Owner: "rec-2"}); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("finding from a non-owner = %v, want ErrLeaseLost", err)
	}
	it, err = s.RecordFinding(ctx, Finding{Key: p.Key, AttemptSeq: 1, Outcome: FindingAbsent, Pages: 3, PaginationExhausted: true, Owner: "rec-1"})
	if err != nil || it.State != intent.ConfirmedNotApplied {
		t.Fatalf("finding absent = %+v, %v", it, err)
	}
	// The database lets it retry only through AUTHORIZED, under the same
	// generation (the engine's retry is tested in its package).
	if err := s.InTx(ctx, func(tx *Tx) error {
		it, err := tx.LockIntent(ctx, p.Key)
		if err != nil {
			return err
		}
		if it, err = tx.Transition(ctx, it, intent.RetryAuthorized, TransitionOpts{Reason: "retry"}); err != nil {
			return err
		}
		it, a, err := tx.StartAttempt(ctx, it, p.AttemptStart)
		if err == nil && (a.Seq != 2 || a.StampGeneration != 0 || it.State != intent.InFlight) {
			return fmt.Errorf("retry = %+v, %+v", it, a)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{})
	if err != nil || !rep.Ok() {
		t.Fatalf("audit: %+v %v", rep, err)
	}
}

func TestInconclusiveQuarantinesAtTheBound(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	p := proposal(4)
	if _, err := startFirst(ctx, s, p); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeAmbiguous, Reason: "502"}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		work, err := s.ClaimReconcile(ctx, "rec", time.Minute, 1, nil)
		if err != nil || len(work) != 1 {
			t.Fatalf("claim %d = %+v, %v", i, work, err)
		}
		it, err := s.RecordFinding(ctx, Finding{Key: p.Key, AttemptSeq: 1, Outcome: FindingInconclusive, Pages: 1,
			Detail: "rail 503 while listing", Owner: "rec", MaxReconciles: 3})
		if err != nil {
			t.Fatal(err)
		}
		want := intent.Unknown
		if i == 3 {
			want = intent.Quarantined
		}
		if it.State != want {
			t.Fatalf("after pass %d: %s, want %s", i, it.State, want)
		}
	}
}

func TestFingerprintMismatchQuarantines(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	p := proposal(5)
	if _, err := startFirst(ctx, s, p); err != nil {
		t.Fatal(err)
	}
	it, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeFingerprintMismatch, Reason: "idempotency_error"})
	if err != nil || it.State != intent.Quarantined || !strings.Contains(it.Reason, "same idempotency key") {
		t.Fatalf("mismatch = %+v, %v", it, err)
	}
}

func TestLeaseExpiryMovesToUnknown(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	p := proposal(6)
	p.LeaseTTL = time.Millisecond
	if _, err := startFirst(ctx, s, p); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := s.ExpireLeases(ctx, 100, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lease never expired")
		}
		time.Sleep(5 * time.Millisecond)
	}
	it, atts, err := s.GetIntent(ctx, p.Key)
	if err != nil || it.State != intent.Unknown || atts[0].Outcome != "lease_expired" {
		t.Fatalf("after expiry: %+v %+v %v", it, atts, err)
	}
	// A late answer is kept for the reconciler but moves nothing.
	it, err = s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeApplied, EntityID: "re_late",
		Response: &HTTPMessage{Status: 200, Body: []byte(`{"id":"re_late"}`)}})
	if err != nil || it.State != intent.Unknown {
		t.Fatalf("late commit = %+v, %v", it, err)
	}
	_, atts, _ = s.GetIntent(ctx, p.Key)
	if atts[0].EntityID != "re_late" || atts[0].Response == nil {
		t.Fatalf("late response not kept: %+v", atts[0])
	}
}

func TestDatabaseRefusesIllegalWrites(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	p := proposal(8)
	if _, err := startFirst(ctx, s, p); err != nil {
		t.Fatal(err)
	}
	applied := proposal(9)
	if _, err := startFirst(ctx, s, applied); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, AttemptResult{Key: applied.Key, Seq: 1, Outcome: OutcomeApplied, EntityID: "re_9"}); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, sql string
		args      []any
		want      string
	}{
		{"blind retry IN_FLIGHT to AUTHORIZED", `UPDATE intents SET state = 'AUTHORIZED', last_event = 'RETRY_AUTHORIZED' WHERE sik = $1`, []any{p.SIK}, "illegal transition"},
		{"edge with the wrong event", `UPDATE intents SET state = 'APPLIED', last_event = 'FOUND_APPLIED', rail_entity_id = 'x', applied_attempt_seq = 1 WHERE sik = $1`, []any{p.SIK}, "illegal transition"},
		{"leave APPLIED", `UPDATE intents SET state = 'UNKNOWN', last_event = 'RAIL_AMBIGUOUS', next_reconcile_at = now() WHERE sik = $1`, []any{applied.SIK}, "absorbing"},
		{"touch APPLIED", `UPDATE intents SET reason = 'edited' WHERE sik = $1`, []any{applied.SIK}, "absorbing"},
		{"delete an intent", `DELETE FROM intents WHERE sik = $1`, []any{p.SIK}, "never deleted"},
		{"change the amount", `UPDATE intents SET amount_minor = 1 WHERE sik = $1`, []any{p.SIK}, "immutable"},
		{"born IN_FLIGHT", `INSERT INTO intents (rail_account, sik, state, last_event, rail, action, subject, amount_minor, currency, canonical)
			VALUES ('acct_test', 'ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ', 'IN_FLIGHT', 'ATTEMPT_STARTED', 'stripe', 'refund', 'pi', 1, 'USD', '{}')`, nil, "born PROPOSED"},
		{"born IN_FLIGHT on a later attempt", `INSERT INTO intents (rail_account, sik, state, last_event, rail, action, subject, amount_minor, currency, canonical, attempt_count)
			VALUES ('acct_test', 'ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ', 'IN_FLIGHT', 'ATTEMPT_STARTED', 'stripe', 'refund', 'pi', 1, 'USD', '{}', 2)`, nil, "born PROPOSED"},
		{"born IN_FLIGHT under a later stamp", `INSERT INTO intents (rail_account, sik, state, last_event, rail, action, subject, amount_minor, currency, canonical, attempt_count, stamp_generation)
			VALUES ('acct_test', 'ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ', 'IN_FLIGHT', 'ATTEMPT_STARTED', 'stripe', 'refund', 'pi', 1, 'USD', '{}', 1, 1)`, nil, "born PROPOSED"},
		{"born AUTHORIZED", `INSERT INTO intents (rail_account, sik, state, last_event, rail, action, subject, amount_minor, currency, canonical)
			VALUES ('acct_test', 'ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ', 'AUTHORIZED', 'GATES_PASSED', 'stripe', 'refund', 'pi', 1, 'USD', '{}')`, nil, "born PROPOSED"},
		{"a state the machine does not have", `UPDATE intents SET state = 'SENT', last_event = 'RAIL_APPLIED' WHERE sik = $1`, []any{p.SIK}, "illegal transition"},
		{"second attempt while the first is in flight", `INSERT INTO attempts (rail_account, sik, attempt_seq, stamp, stamp_generation, lease_owner, lease_expires_at)
			VALUES ('acct_test', $1, 2, 'stampstamp', 0, 'x', now())`, []any{p.SIK}, "does not match an IN_FLIGHT intent"},
		{"skip an attempt number", `UPDATE intents SET attempt_count = 5 WHERE sik = $1`, []any{p.SIK}, "without a transition"},
		{"delete an attempt", `DELETE FROM attempts WHERE sik = $1`, []any{p.SIK}, "never deleted"},
		{"edit the audit log", `UPDATE audit_records SET detail = 'x'`, nil, "append-only"},
		{"settled attempt changes outcome", `UPDATE attempts SET outcome = 'ambiguous' WHERE sik = $1`, []any{applied.SIK}, "settled"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.pool.Exec(ctx, tc.sql, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestFoundEntityIsKeptForDuplicates: an intent settled by reconciliation
// keeps the entity as the rail listed it, and a duplicate proposal gets it
// with the applying attempt; only a found_applied finding may carry one.
func TestFoundEntityIsKeptForDuplicates(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	p := proposal(40)
	if _, err := startFirst(ctx, s, p); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, AttemptResult{Key: p.Key, Seq: 1, Outcome: OutcomeAmbiguous, TransportError: "timeout"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO reconciliation_findings (rail_account, sik, attempt_seq, outcome, pages, pagination_exhausted, entity_body)
		VALUES ($1, $2, 1, 'inconclusive', 1, false, '\x7b7d')`, p.RailAccount, p.SIK); err == nil {
		t.Fatal("an inconclusive finding carrying an entity body was accepted")
	}
	work, err := s.ClaimReconcile(ctx, "rec", time.Minute, 10, &p.Key)
	if err != nil || len(work) != 1 {
		t.Fatalf("claim = %+v, %v", work, err)
	}
	body := []byte(`{"id":"re_40","object":"refund","metadata":{"countersign_sik":"` + p.SIK + `-0"}}`)
	it, err := s.RecordFinding(ctx, Finding{Key: p.Key, AttemptSeq: 1, Outcome: FindingApplied, Pages: 2, EntityID: "re_40", EntityBody: body, Owner: "rec"})
	if err != nil || it.State != intent.Applied {
		t.Fatalf("finding applied = %+v, %v", it, err)
	}
	applied, err := s.AppliedAttempt(ctx, it)
	if err != nil || string(applied.FoundEntity) != string(body) {
		t.Fatalf("applied attempt = %+v, %v; want the applying attempt with the found entity", applied, err)
	}
	fs, err := s.FindingsFor(ctx, p.Key)
	if err != nil || len(fs) != 1 || string(fs[0].EntityBody) != string(body) {
		t.Fatalf("findings = %+v, %v", fs, err)
	}
}

// TestSeenCommitWritesTheAttemptOnce: the one-round-trip commit keeps the
// rail's answer and settles the attempt in one statement, one row version
// of an attempt that carries the request and the answer, for each outcome
// it takes; the attempt ends as the locking commit would leave it.
func TestSeenCommitWritesTheAttemptOnce(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	for i, tc := range []struct {
		outcome RailOutcome
		entity  string
		want    string
	}{
		{OutcomeApplied, "re_once", "applied"},
		{OutcomeRejected, "", "rejected"},
		{OutcomeAmbiguous, "", "ambiguous"},
	} {
		p := proposal(40 + i)
		res, err := startFirst(ctx, s, p)
		if err != nil {
			t.Fatal(err)
		}
		r := AttemptResult{Key: p.Key, Seq: 1, Outcome: tc.outcome, EntityID: tc.entity, FeeMinor: 30, Seen: &res.Intent, Reason: "test",
			Response: &HTTPMessage{Status: 200, Headers: map[string]string{"content-type": "application/json"}, Body: []byte(`{"id":"x"}`)}}
		w, _, ok := seenCommit(r)
		if !ok {
			t.Fatalf("%s: no one-round-trip commit", tc.outcome)
		}
		attempts := 0
		for _, q := range w.b.QueuedQueries {
			if strings.Contains(q.SQL, "UPDATE attempts") {
				attempts++
			}
		}
		if attempts != 1 {
			t.Errorf("%s: %d statements update the attempt, want 1", tc.outcome, attempts)
		}
		if _, err := s.Commit(ctx, r); err != nil {
			t.Fatalf("%s: commit: %v", tc.outcome, err)
		}
		var outcome, entity string
		var status, fee int64
		var finished bool
		if err := s.pool.QueryRow(ctx, `SELECT outcome, COALESCE(entity_id, ''), response_status, fee_minor, finished_at IS NOT NULL
			FROM attempts WHERE rail_account = $1 AND sik = $2 AND attempt_seq = 1`, p.RailAccount, p.SIK).Scan(&outcome, &entity, &status, &fee, &finished); err != nil {
			t.Fatal(err)
		}
		if outcome != tc.want || entity != tc.entity || status != 200 || fee != 30 || !finished {
			t.Errorf("%s: attempt outcome %q entity %q status %d fee %d finished %v", tc.outcome, outcome, entity, status, fee, finished)
		}
	}
}

// TestFamilyIsFixedAtBirth: an intent born into a family (an action under
// an idempotency window) is found as the family's newest by the read a
// decision makes, and its family can never be changed or cleared, which
// would take it out of the count of what its family still has unresolved.
func TestFamilyIsFixedAtBirth(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	family := testSIK(901)
	older, newer := proposal(902), proposal(903)
	for _, p := range []testProposal{older, newer} { // born in this order
		p.Family = family
		if _, err := startFirst(ctx, s, p); err != nil {
			t.Fatal(err)
		}
	}
	f, err := s.ReadForDecision(ctx, DecisionRead{RailAccount: older.RailAccount, Alias: family, Family: true, At: time.Now()})
	if err != nil || f.FamilyLatest == nil || f.FamilyLatest.SIK != newer.SIK {
		t.Fatalf("FamilyLatest = %+v, %v; want the newer intent %s", f.FamilyLatest, err, newer.SIK)
	}
	for _, to := range []string{"NULL", "'" + testSIK(904) + "'"} {
		if _, err := s.pool.Exec(ctx, `UPDATE intents SET family = `+to+` WHERE sik = $1`, newer.SIK); err == nil || !strings.Contains(err.Error(), "fixed at its birth") {
			t.Errorf("setting the family to %s = %v; want it refused", to, err)
		}
	}
}
