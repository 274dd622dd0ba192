package ledger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"

	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/sik"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// tamperAll runs each statement as tamper does, in one transaction, not
// minding statements that change nothing.
func tamperAll(t *testing.T, s *Store, sql []string, args ...any) {
	t.Helper()
	ctx := context.Background()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	for _, q := range sql {
		a := args
		if !strings.Contains(q, "$1") {
			a = nil
		}
		if _, err := tx.Exec(ctx, q, a...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// wipeLog removes acct_test's sealed log (head, tree hashes, checkpoints)
// and unseals its records, as a database writer without the signing key
// would before letting the sequencer seal an edited history again.
func wipeLog(t *testing.T, s *Store) {
	t.Helper()
	tamperAll(t, s, []string{
		`DELETE FROM audit_checkpoints WHERE rail_account = 'acct_test'`,
		`DELETE FROM audit_hashes WHERE rail_account = 'acct_test'`,
		`DELETE FROM audit_logs WHERE rail_account = 'acct_test'`,
		`UPDATE audit_records SET leaf_index = NULL WHERE rail_account = 'acct_test'`,
	})
}

// eraseIntent deletes everything about one intent of acct_test.
func eraseIntent(t *testing.T, s *Store, sk string) {
	t.Helper()
	var stmts []string
	for _, tbl := range []string{"audit_records", "attempts", "budget_holds", "outbox", "intents"} {
		stmts = append(stmts, `DELETE FROM `+tbl+` WHERE rail_account = 'acct_test' AND sik = $1`)
	}
	tamperAll(t, s, stmts, sk)
}

func latestCheckpoint(t *testing.T, s *Store, verifier note.Verifier) audit.Checkpoint {
	t.Helper()
	cp, err := checkpointAt(context.Background(), s.pool, "acct_test", 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := audit.OpenCheckpoint(cp.Note, verifier)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSealRefusesToReSealARewrittenLog: a running sequencer does not sign
// a log rewritten under it (its rows removed, its history edited): not a
// smaller one, not one of the same size with another root, and no log
// started again at size 0 while sealed records or checkpoints of the
// account remain.
func TestSealRefusesToReSealARewrittenLog(t *testing.T) {
	ctx := context.Background()
	signer, _ := testSigner(t, "audit.test")
	cases := []struct {
		name    string
		restart bool // the sequencer's process restarted before the rewrite was sealed
		rewrite func(t *testing.T, s *Store)
		want    string
	}{
		{"history erased and edited", false, func(t *testing.T, s *Store) {
			wipeLog(t, s)
			eraseIntent(t, s, testSIK(101))
			tamper(t, s, `UPDATE audit_records SET detail = 'distinct: approved by the owner by phone' WHERE sik = $1`, testSIK(102))
		}, "signed the log of acct_test at size 12, the ledger's would now be 9"},
		{"same size, one record edited", false, func(t *testing.T, s *Store) {
			wipeLog(t, s)
			tamper(t, s, `UPDATE audit_records SET detail = 'distinct: approved by the owner by phone' WHERE sik = $1`, testSIK(102))
		}, "the tree of acct_test at size 12 does not extend the one this process signed at size 12"},
		{"head removed, sealed records left", true, func(t *testing.T, s *Store) {
			tamper(t, s, `DELETE FROM audit_logs WHERE rail_account = 'acct_test'`)
			proposeN(t, s, 110, 1)
		}, "the log of acct_test has no head, but sealed records, tree hashes or checkpoints of it remain"},
		{"head and records' leaves removed, checkpoints left", true, func(t *testing.T, s *Store) {
			tamperAll(t, s, []string{
				`DELETE FROM audit_logs WHERE rail_account = 'acct_test'`,
				`DELETE FROM audit_hashes WHERE rail_account = 'acct_test'`,
				`UPDATE audit_records SET leaf_index = NULL WHERE rail_account = 'acct_test'`,
			})
		}, "has no head, but sealed records, tree hashes or checkpoints of it remain"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url := pgtest.NewDatabase(t)
			s := openTestURL(t, url)
			proposeN(t, s, 100, 4)
			if _, err := s.Seal(ctx, signer); err != nil {
				t.Fatal(err)
			}
			tc.rewrite(t, s)
			if tc.restart {
				s = openTestURL(t, url)
			}
			countCheckpoints := func() (n int) {
				t.Helper()
				if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM audit_checkpoints`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			before := countCheckpoints()
			rep, err := s.Seal(ctx, signer)
			if !errors.Is(err, ErrAuditRewritten) || !strings.Contains(err.Error(), tc.want) || rep.Records != 0 || rep.Failed != 1 {
				t.Fatalf("seal of the rewritten log = %+v, %v; want %v saying %q", rep, err, ErrAuditRewritten, tc.want)
			}
			if after := countCheckpoints(); after != before {
				t.Fatalf("%d checkpoints after the refused sealing, %d before", after, before)
			}
		})
	}
}

// TestSealedLogKeepsGrowingUnderOneProcess: the memory of what a process
// signed holds back nothing but rewrites: sealing on, from several
// stores of one process and after a restart, is accepted.
func TestSealedLogKeepsGrowingUnderOneProcess(t *testing.T) {
	ctx := context.Background()
	signer, verifier := testSigner(t, "audit.test")
	url := pgtest.NewDatabase(t)
	a, b := openTestURL(t, url), openTestURL(t, url)
	for i := range 4 {
		proposeN(t, a, 100+i, 1)
		s := []*Store{a, b}[i%2]
		if _, err := s.SealAccount(ctx, "acct_test", signer, 2); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Seal(ctx, signer); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := openTestURL(t, url).Seal(ctx, signer); err != nil {
		t.Fatal(err)
	}
	rep, err := a.VerifyAudit(ctx, AuditVerifyOptions{Verifiers: []note.Verifier{verifier}, Kept: []audit.Checkpoint{latestCheckpoint(t, a, verifier)}})
	if err != nil || !rep.Ok() || rep.Sealed != 12 || rep.KeptChecked != 1 {
		t.Fatalf("verify = %+v, %v", rep, err)
	}
}

// TestVerifyHoldsTheLogToKeptCheckpoints: a log removed and re-sealed by a
// restarted sequencer from an edited history verifies on its own (its
// checkpoints are signed with the real key); the checkpoints an owner
// kept name the fork.
func TestVerifyHoldsTheLogToKeptCheckpoints(t *testing.T) {
	ctx := context.Background()
	signer, verifier := testSigner(t, "audit.test")
	cases := []struct {
		name    string
		rewrite func(t *testing.T, s *Store)
		want    string // in the forked problem's text; "" for none
	}{
		{"untouched", func(*testing.T, *Store) {}, ""},
		{"grown since", func(t *testing.T, s *Store) { proposeN(t, s, 120, 1) }, ""},
		{"same size, one record edited", func(t *testing.T, s *Store) {
			wipeLog(t, s)
			// The birth record only (a transition's detail is the intent's
			// reason, which verify compares).
			tamper(t, s, `UPDATE audit_records SET detail = 'distinct: approved by the owner by phone' WHERE sik = $1 AND from_state = ''`, testSIK(102))
		}, "the kept checkpoint of size 12 (root "},
		{"an intent erased", func(t *testing.T, s *Store) {
			wipeLog(t, s)
			eraseIntent(t, s, testSIK(101))
		}, "the log's latest checkpoint has only 9 leaves"},
		{"an intent erased, the log grown past the kept size", func(t *testing.T, s *Store) {
			wipeLog(t, s)
			eraseIntent(t, s, testSIK(101))
			proposeN(t, s, 120, 3)
		}, "the log at size 18 does not extend it"},
		{"the account's log and records erased", func(t *testing.T, s *Store) {
			wipeLog(t, s)
			for i := range 4 {
				eraseIntent(t, s, testSIK(100+i))
			}
		}, "the log's latest checkpoint has only 0 leaves"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url := pgtest.NewDatabase(t)
			s := openTestURL(t, url)
			proposeN(t, s, 100, 2)
			if _, err := s.Seal(ctx, signer); err != nil {
				t.Fatal(err)
			}
			kept := []audit.Checkpoint{latestCheckpoint(t, s, verifier)}
			proposeN(t, s, 102, 2)
			if _, err := s.Seal(ctx, signer); err != nil {
				t.Fatal(err)
			}
			kept = append(kept, latestCheckpoint(t, s, verifier))
			tc.rewrite(t, s)
			// A restarted sequencer remembers nothing and seals what it finds.
			s = openTestURL(t, url)
			if _, err := s.Seal(ctx, signer); err != nil {
				t.Fatal(err)
			}
			opts := AuditVerifyOptions{Verifiers: []note.Verifier{verifier}}
			if rep, err := s.VerifyAudit(ctx, opts); err != nil || !rep.Ok() {
				t.Fatalf("without kept checkpoints: %+v, %v (the rewrite is meant to verify on its own)", rep.Problems, err)
			}
			opts.Kept = kept
			rep, err := s.VerifyAudit(ctx, opts)
			if err != nil || rep.KeptChecked != 2 {
				t.Fatalf("verify = %+v, %v", rep, err)
			}
			var forked []string
			for _, p := range rep.Problems {
				if p.Kind != AuditForked || p.RailAccount != "acct_test" {
					t.Errorf("problem %s: %s", p.Kind, p.Problem)
				}
				forked = append(forked, p.Problem)
			}
			switch {
			case tc.want == "" && len(forked) > 0:
				t.Fatalf("problems on an honest log: %q", forked)
			case tc.want != "" && !strings.Contains(strings.Join(forked, "\n"), tc.want):
				t.Fatalf("forked problems %q do not say %q", forked, tc.want)
			}
			// The other account's filter leaves the kept checkpoints unchecked.
			if rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{RailAccount: "acct_other", Kept: kept}); err != nil || !rep.Ok() || rep.KeptChecked != 0 || rep.Accounts != 0 {
				t.Fatalf("verify of another account = %+v, %v", rep, err)
			}
		})
	}
}

// TestVerifyReportsRecordsWithoutIntent: an intent's row deleted after its
// records were sealed (its records kept) is a broken path.
func TestVerifyReportsRecordsWithoutIntent(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	signer, verifier := testSigner(t, "audit.test")
	proposeN(t, s, 100, 2)
	if _, err := s.Seal(ctx, signer); err != nil {
		t.Fatal(err)
	}
	tamperAll(t, s, []string{
		`DELETE FROM attempts WHERE rail_account = 'acct_test' AND sik = $1`,
		`DELETE FROM outbox WHERE rail_account = 'acct_test' AND sik = $1`,
		`DELETE FROM intents WHERE rail_account = 'acct_test' AND sik = $1`,
	}, testSIK(100))
	rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{Verifiers: []note.Verifier{verifier}})
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("intent %s has audit records (the last, 3, ends at IN_FLIGHT) but no intent row (the intent was deleted)", testSIK(100))
	if len(rep.Problems) != 1 || rep.Problems[0].Kind != AuditPathBroken || rep.Problems[0].Problem != want || rep.Problems[0].SIK != testSIK(100) {
		t.Fatalf("problems = %+v; want one %s: %q", rep.Problems, AuditPathBroken, want)
	}
}

// keyedProposal is proposal(n) keyed as the engine keys it: its SIK is the
// SIK of its canonical action, a refund of 1000 USD on pi_1 with a reason.
func keyedProposal(t *testing.T, n int) testProposal {
	t.Helper()
	a := sik.Action{V: sik.Version, RailAccount: "acct_test", Action: "refund", Subject: "pi_1", AmountMinor: 1000, Currency: "USD",
		Distinct: fmt.Sprintf("case %d", n)}
	canon, key, err := a.Keyed()
	if err != nil {
		t.Fatal(err)
	}
	p := proposal(n)
	k := Key{RailAccount: "acct_test", SIK: string(key)}
	p.Key, p.NewIntent.Key, p.AttemptStart.Key, p.Stamp = k, k, k, k.SIK+"-0"
	p.Canonical, p.DistinctReason = string(canon), a.Distinct
	return p
}

// TestVerifyChecksIntentsAgainstTheirAction: the sealed records name an
// intent by SIK; an intent edited after sealing (its amount, subject,
// payee, currency, reason or canonical form) no longer is the action its
// SIK was derived from.
func TestVerifyChecksIntentsAgainstTheirAction(t *testing.T) {
	ctx := context.Background()
	signer, verifier := testSigner(t, "audit.test")
	cases := []struct {
		name, set string
		want      string
	}{
		{"amount", `amount_minor = 99999999`, "its amount is 99999999, its canonical action's 1000"},
		{"subject", `subject = 'pi_other'`, `its subject is "pi_other", its canonical action's "pi_1"`},
		{"payee", `payee = 'ba_attacker'`, `its payee is "ba_attacker", its canonical action's ""`},
		{"currency", `currency = 'EUR'`, `its currency is "EUR", its canonical action's "USD"`},
		{"reason", `distinct_reason = 'other'`, `its distinct reason is "other", its canonical action's "case 100"`},
		{"canonical amount", `canonical = replace(canonical, '"amount_minor":1000', '"amount_minor":99999999'), amount_minor = 99999999`,
			"its SIK is not the SIK of its canonical action"},
		{"canonical form", `canonical = canonical || ' '`, "its canonical column is not in canonical form"},
		{"canonical not an action", `canonical = '{"v":1,"payee":"x"}'`, "its canonical column is not an action"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := sealedPair(t, signer)
			opts := AuditVerifyOptions{Verifiers: []note.Verifier{verifier}, CheckActions: true}
			if rep, err := s.VerifyAudit(ctx, opts); err != nil || !rep.Ok() {
				t.Fatalf("intents as keyed: %+v, %v", rep.Problems, err)
			}
			victim := keyedProposal(t, 100).SIK
			tamper(t, s, `UPDATE intents SET `+tc.set+` WHERE sik = $1`, victim)
			rep, err := s.VerifyAudit(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range rep.Problems {
				if p.Kind == AuditActionMismatch && p.SIK == victim && strings.Contains(p.Problem, tc.want) {
					return
				}
			}
			t.Fatalf("problems %+v do not include %s %q", rep.Problems, AuditActionMismatch, tc.want)
		})
	}
}

func TestCheckIntentAction(t *testing.T) {
	keyed := func(a sik.Action) intentRow {
		a.V, a.RailAccount = sik.Version, "acct_x"
		canon, k, err := a.Keyed()
		if err != nil {
			t.Fatal(err)
		}
		return intentRow{SIK: string(k), State: "APPLIED", Action: a.Action, Subject: a.Subject, AmountMinor: a.AmountMinor,
			Currency: a.Currency, Distinct: a.Distinct, Canonical: string(canon)}
	}
	payout := keyed(sik.Action{Action: "payout", Subject: "ba_1", AmountMinor: 500, Currency: "USD", Extra: map[string]string{"method": "instant"}})
	payout.Payee = "ba_1"
	full := keyed(sik.Action{Action: "refund", Subject: "pi_1", Currency: "USD", Extra: map[string]string{"amount": "full"}})
	full.AmountMinor = 4200 // valued at the refundable balance: no key covers it
	cases := []struct {
		name string
		acct string
		row  intentRow
		edit func(*intentRow)
		want string // "" for none
	}{
		{"payout", "acct_x", payout, nil, ""},
		{"payout to another payee", "acct_x", payout, func(r *intentRow) { r.Payee = "ba_2" }, `its payee is "ba_2", its canonical action's "ba_1"`},
		{"payout as a transfer", "acct_x", payout, func(r *intentRow) { r.Action = "transfer" }, `its action is "transfer"`},
		{"full refund at any value", "acct_x", full, nil, ""},
		{"on another account", "acct_y", payout, nil, `its rail account is "acct_y", its canonical action's "acct_x"`},
		{"another SIK", "acct_x", payout, func(r *intentRow) { r.SIK = strings.Repeat("A", 32) }, "its SIK is not the SIK of its canonical action"},
		{"invalid action", "acct_x", payout, func(r *intentRow) { r.Canonical = `{"v":2}` }, "its canonical column is not a valid action"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			row := tc.row
			if tc.edit != nil {
				tc.edit(&row)
			}
			why := strings.Join(checkIntentAction(tc.acct, row), "; ")
			if (tc.want == "") != (why == "") || !strings.Contains(why, tc.want) {
				t.Fatalf("checkIntentAction = %q, want %q", why, tc.want)
			}
		})
	}
}

// TestSealCarriesOnPastABrokenAccount: one account whose sealing fails
// (a stored tree hash lost) does not leave the other accounts unsealed.
func TestSealCarriesOnPastABrokenAccount(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	signer, verifier := testSigner(t, "audit.test")
	mk := func(acct string, n int) {
		t.Helper()
		p := proposal(n)
		p.RailAccount, p.NewIntent.RailAccount, p.AttemptStart.RailAccount = acct, acct, acct
		if _, err := startFirst(ctx, s, p); err != nil {
			t.Fatal(err)
		}
	}
	mk("acct_a", 1)
	mk("acct_z", 2)
	if _, err := s.Seal(ctx, signer); err != nil {
		t.Fatal(err)
	}
	tamper(t, s, `DELETE FROM audit_hashes WHERE rail_account = 'acct_a'`)
	for i := range 3 {
		mk("acct_a", 10+i)
		mk("acct_z", 20+i)
	}
	rep, err := s.Seal(ctx, signer)
	if err == nil || !strings.Contains(err.Error(), "audit log of acct_a: ") || strings.Contains(err.Error(), "acct_z") {
		t.Fatalf("seal error = %v; want acct_a's failure only", err)
	}
	if rep.Failed != 1 || rep.Accounts != 1 || rep.Records != 9 {
		t.Fatalf("seal = %+v; want acct_z's 9 records sealed, acct_a failed", rep)
	}
	vr, err := s.VerifyAudit(ctx, AuditVerifyOptions{RailAccount: "acct_z", Verifiers: []note.Verifier{verifier}})
	if err != nil || !vr.Ok() || vr.Sealed != 12 || vr.Unsealed != 0 {
		t.Fatalf("acct_z after sealing = %+v, %v", vr, err)
	}
}

// sealedPair is a ledger holding two started intents whose audit records
// signer has sealed: a log to tamper with.
func sealedPair(t *testing.T, signer note.Signer) *Store {
	t.Helper()
	ctx := context.Background()
	s := openTest(t)
	for n := range 2 {
		if _, err := startFirst(ctx, s, keyedProposal(t, 100+n)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Seal(ctx, signer); err != nil {
		t.Fatal(err)
	}
	return s
}
