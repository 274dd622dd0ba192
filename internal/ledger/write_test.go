package ledger

import (
	"context"
	"errors"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/countersign/countersign/internal/intent"
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
