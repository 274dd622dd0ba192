package ledger

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"

	"github.com/countersign/countersign/internal/sik"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// TestVerifyFindsIntentsWithoutALog: the accounts verified are those with
// intents too, and a named account is always verified, so an intent whose
// account has no log at all (its log removed whole, or the intent made up
// on an account that never had one) is an intent with no audit record.
// Found by a review: both verified OK, even with the account named.
func TestVerifyFindsIntentsWithoutALog(t *testing.T) {
	ctx := context.Background()
	signer, verifier := testSigner(t, "audit.test")
	ghost := func(t *testing.T) string {
		t.Helper()
		a := sik.Action{V: sik.Version, RailAccount: "acct_ghost", Action: "refund", Subject: "pi_9", AmountMinor: 5000, Currency: "USD"}
		canon, key, err := a.Keyed()
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf(`INSERT INTO intents (rail_account, sik, state, last_event, rail, action, subject, amount_minor, currency, canonical,
			attempt_count, rail_entity_id, applied_attempt_seq)
			VALUES ('acct_ghost', '%s', 'APPLIED', 'RAIL_APPLIED', 'stripe', 'refund', 'pi_9', 5000, 'USD', '%s', 1, 're_x', 1)`, key, canon)
	}
	cases := []struct {
		name    string
		account string
		tamper  func(t *testing.T, s *Store) []string // the SIKs that lost their log
	}{
		{"an account's whole log removed, its intents kept", "acct_test", func(t *testing.T, s *Store) []string {
			tamperAll(t, s, []string{
				`DELETE FROM audit_records WHERE rail_account = 'acct_test'`,
				`DELETE FROM audit_hashes WHERE rail_account = 'acct_test'`,
				`DELETE FROM audit_checkpoints WHERE rail_account = 'acct_test'`,
				`DELETE FROM audit_logs WHERE rail_account = 'acct_test'`,
				`UPDATE intents SET state = 'CONFIRMED_NOT_APPLIED', last_event = 'CONFIRMED_ABSENT' WHERE rail_account = 'acct_test'`,
			})
			return []string{keyedProposal(t, 100).SIK, keyedProposal(t, 101).SIK}
		}},
		{"an applied intent made up on an account with no log", "acct_ghost", func(t *testing.T, s *Store) []string {
			tamper(t, s, ghost(t))
			var k string
			if err := s.pool.QueryRow(ctx, `SELECT sik FROM intents WHERE rail_account = 'acct_ghost'`).Scan(&k); err != nil {
				t.Fatal(err)
			}
			return []string{k}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := sealedPair(t, signer)
			lost := tc.tamper(t, s)
			for _, named := range []string{"", tc.account} {
				rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{RailAccount: named, Verifiers: []note.Verifier{verifier}, CheckActions: true})
				if err != nil || rep.Accounts == 0 {
					t.Fatalf("verify (rail account %q) = %+v, %v", named, rep, err)
				}
				for _, k := range lost {
					want := fmt.Sprintf("intent %s is CONFIRMED_NOT_APPLIED but has no audit record", k)
					if tc.account == "acct_ghost" {
						want = fmt.Sprintf("intent %s is APPLIED but has no audit record", k)
					}
					found := false
					for _, p := range rep.Problems {
						found = found || (p.Kind == AuditPathBroken && p.RailAccount == tc.account && p.SIK == k && p.Problem == want)
					}
					if !found {
						t.Errorf("verify (rail account %q): problems %+v do not include %s %q", named, rep.Problems, AuditPathBroken, want)
					}
				}
			}
		})
	}
	// A named account the ledger holds nothing of is clean, and not
	// counted (so a mistyped name reads "0 rail accounts").
	s := openTest(t)
	rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{RailAccount: "acct_none"})
	if err != nil || !rep.Ok() || rep.Accounts != 0 {
		t.Fatalf("verify of an empty account = %+v, %v", rep, err)
	}
}

// TestVerifyRunsOneAtATime: while a verification runs, another in the
// same process is refused at once (ErrAuditVerifyBusy), not queued; the
// slot is given back when the verification ends.
func TestVerifyRunsOneAtATime(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	proposeN(t, s, 100, 1)
	release, ok := s.sealMemory().startVerify()
	if !ok {
		t.Fatal("the verification slot is taken before any verification")
	}
	start := time.Now()
	if _, err := s.VerifyAudit(ctx, AuditVerifyOptions{}); !errors.Is(err, ErrAuditVerifyBusy) {
		t.Fatalf("verify while another runs: err = %v, want ErrAuditVerifyBusy", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("the refusal took %s: it waited", el)
	}
	release()
	release() // a second release gives back nothing more
	if rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{}); err != nil || !rep.Ok() {
		t.Fatalf("verify after the other ended = %+v, %v", rep, err)
	}
	// Many at once: one slot, each call either runs or is refused, and the
	// slot is free again afterwards.
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.VerifyAudit(ctx, AuditVerifyOptions{})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, ErrAuditVerifyBusy) {
			t.Fatal(err)
		}
	}
	if release, ok := s.sealMemory().startVerify(); !ok {
		t.Fatal("the slot was not given back")
	} else {
		release()
	}
}

// TestVerifyMemoryDoesNotGrowWithTheLog: a verification streams the log,
// so the heap it needs is about one batch of each stream however long the
// log. Found by a review: it held the account's every record, stored hash,
// checkpoint and intent at once (372 MiB for 100k intents; one owner's
// calls could OOM-kill the sidecar).
//
// The log is 20,000 intents with a 400-byte reason each. With GOGC at 10
// the heap is collected whenever it grows by a tenth of what is live, so
// its sampled peak follows what the verification holds rather than the
// garbage it leaves. Measured here: the whole-log verification took the
// heap ≈ 43 MiB over its baseline (growing with the log), the streaming
// one ≈ 2.5 MiB (a batch of each stream, whatever the log). The bound,
// 16 MiB, is 6× what streaming needs and a third of what holding the log
// took; a sampler that misses a peak can only make the figure lower, so it
// cannot fail the test spuriously, and the whole-log figure is a plateau
// (everything is held until the end) that no sampling misses.
func TestVerifyMemoryDoesNotGrowWithTheLog(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a log of 20,000 records")
	}
	const n, bound = 20000, 16 << 20
	s := openTest(t)
	ctx := context.Background()
	signer, verifier := testSigner(t, "audit.test")
	var siks, canons, reasons []string
	for i := range n {
		a := sik.Action{V: sik.Version, RailAccount: "acct_test", Action: "refund", Subject: "pi_1", AmountMinor: 1000, Currency: "USD",
			Distinct: fmt.Sprintf("case %d %s", i, strings.Repeat("x", 400))}
		canon, key, err := a.Keyed()
		if err != nil {
			t.Fatal(err)
		}
		siks, canons, reasons = append(siks, string(key)), append(canons, string(canon)), append(reasons, a.Distinct)
	}
	if _, err := s.pool.Exec(ctx, `INSERT INTO intents (rail_account, sik, state, last_event, rail, action, subject, amount_minor,
		currency, distinct_reason, canonical)
		SELECT 'acct_test', k, 'PROPOSED', 'PROPOSED', 'stripe', 'refund', 'pi_1', 1000, 'USD', d, c
		FROM unnest($1::text[], $2::text[], $3::text[]) AS u(k, c, d)`, siks, canons, reasons); err != nil {
		t.Fatal(err)
	}
	if sr, err := s.Seal(ctx, signer); err != nil || sr.Records != n {
		t.Fatalf("seal = %+v, %v", sr, err)
	}
	// One intent's records unsealed, so the path stream carries both kinds.
	if _, err := startFirst(ctx, s, keyedProposal(t, n)); err != nil {
		t.Fatal(err)
	}

	defer debug.SetGCPercent(debug.SetGCPercent(10))
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak uint64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	start := time.Now()
	rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{RailAccount: "acct_test", Verifiers: []note.Verifier{verifier},
		MaxUnsealedAge: time.Hour, CheckActions: true})
	elapsed := time.Since(start)
	close(stop)
	<-done
	if err != nil || !rep.Ok() || rep.Sealed != n || rep.Unsealed != 3 {
		t.Fatalf("verify = %+v, %v", rep, err)
	}
	grew := int64(peak) - int64(base)
	t.Logf("verifying %d records: %s, heap peak %d KiB over the baseline", n, elapsed, grew>>10)
	if grew > bound {
		t.Fatalf("verifying %d records took the heap %d MiB over its baseline, more than %d MiB: the verification holds the log", n, grew>>20, bound>>20)
	}
}

// TestVerifyCoversTheIntentsAgentAndReason: an intent's birth record names
// its agent (migration 00037) and its last record holds its reason, so an
// intent moved to another agent (and so another owner: who lists it, who
// gets its proofs) or given another reason after its records were written
// is reported. Found by a review: both verified OK.
func TestVerifyCoversTheIntentsAgentAndReason(t *testing.T) {
	ctx := context.Background()
	signer, verifier := testSigner(t, "audit.test")
	cases := []struct {
		name, set string
		kind      AuditProblemKind
		want      string
	}{
		{"moved to another owner's agent", `agent_id = $2`, AuditAgentMismatch, `its agent is "{B}", but its birth record (1) names "{A}" (the intent was moved to another agent)`},
		{"its agent removed", `agent_id = NULL`, AuditAgentMismatch, `its agent is "", but its birth record (1) names "{A}"`},
		{"its reason rewritten", `reason = 'approved by own_b by phone'`, AuditReasonMismatch, "its reason is not its last record's"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t)
			agA, err := s.CreateAgent(ctx, "own_a", "a")
			if err != nil {
				t.Fatal(err)
			}
			agB, err := s.CreateAgent(ctx, "own_b", "b")
			if err != nil {
				t.Fatal(err)
			}
			p := keyedProposal(t, 100)
			p.AgentID = agA.ID
			if _, err := startFirst(ctx, s, p); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Seal(ctx, signer); err != nil {
				t.Fatal(err)
			}
			var detail string
			if err := s.pool.QueryRow(ctx, `SELECT detail FROM audit_records WHERE sik = $1 AND from_state = ''`, p.SIK).Scan(&detail); err != nil {
				t.Fatal(err)
			}
			if want := "agent: " + agA.ID + "\ndistinct: case 100"; detail != want {
				t.Fatalf("birth record's detail = %q, want %q", detail, want)
			}
			opts := AuditVerifyOptions{Verifiers: []note.Verifier{verifier}, CheckActions: true}
			if rep, err := s.VerifyAudit(ctx, opts); err != nil || !rep.Ok() || rep.AgentsUnchecked != 0 {
				t.Fatalf("honest log: %+v, %v", rep, err)
			}
			args := []any{p.SIK}
			if strings.Contains(tc.set, "$2") {
				args = append(args, agB.ID)
			}
			tamper(t, s, `UPDATE intents SET `+tc.set+` WHERE sik = $1`, args...)
			rep, err := s.VerifyAudit(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			want := "intent " + p.SIK + ": " + strings.NewReplacer("{A}", agA.ID, "{B}", agB.ID).Replace(tc.want)
			for _, pr := range rep.Problems {
				if pr.Kind == tc.kind && pr.SIK == p.SIK && strings.HasPrefix(pr.Problem, want) {
					return
				}
			}
			t.Fatalf("problems %+v do not include %s %q", rep.Problems, tc.kind, want)
		})
	}
	t.Run("a birth record from before the agent was recorded", func(t *testing.T) {
		s := openTest(t)
		proposeN(t, s, 100, 2)
		// As migration 00037 found it: the detail without the agent's line.
		tamper(t, s, `UPDATE audit_records SET detail = regexp_replace(detail, '^agent: [^\n]*\n?', '') WHERE sik = $1 AND from_state = ''`, testSIK(100))
		if _, err := s.Seal(ctx, signer); err != nil {
			t.Fatal(err)
		}
		rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{Verifiers: []note.Verifier{verifier}})
		if err != nil || !rep.Ok() || rep.AgentsUnchecked != 1 {
			t.Fatalf("verify = %+v, %v; want ok with one intent's agent unchecked", rep, err)
		}
	})
}

// TestBirthAgent: the agent is the birth detail's first line, whatever
// the reason after it says (an agent writes its distinct reason).
func TestBirthAgent(t *testing.T) {
	cases := []struct {
		detail, agent, rest string
		named               bool
	}{
		{"agent: agt_a\ndistinct: case 1", "agt_a", "distinct: case 1", true},
		{"agent: agt_a\ndistinct: x\nagent: agt_b", "agt_a", "distinct: x\nagent: agt_b", true},
		{"agent: agt_a", "agt_a", "", true},
		{"agent: ", "", "", true},
		{"distinct: agent: agt_b", "", "distinct: agent: agt_b", false},
		{"", "", "", false},
	}
	for _, tc := range cases {
		agent, rest, named := birthAgent(tc.detail)
		if agent != tc.agent || rest != tc.rest || named != tc.named {
			t.Errorf("birthAgent(%q) = %q, %q, %v; want %q, %q, %v", tc.detail, agent, rest, named, tc.agent, tc.rest, tc.named)
		}
	}
}

// TestVerifyThroughPgBouncer: the verification's cursors live in its one
// transaction, so it runs behind transaction pooling as directly.
func TestVerifyThroughPgBouncer(t *testing.T) {
	ctx := context.Background()
	signer, verifier := testSigner(t, "audit.test")
	url := pgtest.NewDatabase(t)
	direct := openTestURL(t, url)
	proposeN(t, direct, 100, 3)
	if _, err := direct.Seal(ctx, signer); err != nil {
		t.Fatal(err)
	}
	s := openPooled(t, url, 1, Options{MaxConns: 2})
	opts := AuditVerifyOptions{Verifiers: []note.Verifier{verifier}, MaxUnsealedAge: time.Minute}
	if rep, err := s.VerifyAudit(ctx, opts); err != nil || !rep.Ok() || rep.Sealed != 9 {
		t.Fatalf("verify through PgBouncer = %+v, %v", rep, err)
	}
	tamper(t, direct, `UPDATE audit_records SET detail = 'nothing to see' WHERE leaf_index = 4`)
	rep, err := s.VerifyAudit(ctx, opts)
	if err != nil || len(rep.Problems) == 0 || rep.Problems[0].Kind != AuditAltered {
		t.Fatalf("verify of an altered log through PgBouncer = %+v, %v", rep, err)
	}
}

// TestVerifyWithoutAKeyVouchesForNothing: with no trusted key, a log
// re-sealed with any key under the real key's name is not Ok, and no
// heartbeat counts, so a forged fresh heartbeat does not hide records left
// unsealed. With the real key the forgery is named. Found by a review:
// with no key, OpenNote took any signature, so a forged log and a forged
// heartbeat verified Ok (the owner API of a replica without the signing
// key, `audit verify` without --audit-verifier-key).
func TestVerifyWithoutAKeyVouchesForNothing(t *testing.T) {
	ctx := context.Background()
	real, verifier := testSigner(t, "audit.test")
	forger, _ := testSigner(t, "audit.test") // same name, another key
	keyed := []note.Verifier{verifier}
	cases := []struct {
		name      string
		sealer    note.Signer
		unsealed  bool // records left unsealed, covered by a forged fresh heartbeat
		verifiers []note.Verifier
		maxAge    time.Duration
		wantOk    bool
		wantKinds []AuditProblemKind
	}{
		{"a forged log, no key", forger, false, nil, 0, false, nil},
		{"a forged log, no key, with an unsealed-age bound", forger, false, nil, time.Minute, false, nil},
		{"an honest log, no key (cannot be told from a forged one)", real, false, nil, 0, false, nil},
		{"a forged log and a forged heartbeat, no key", forger, true, nil, time.Minute, false, []AuditProblemKind{AuditStaleUnsealed}},
		{"a forged log, the real key", forger, false, keyed, 0, false, []AuditProblemKind{AuditUntrustedSigner}},
		{"a forged heartbeat, the real key", real, true, keyed, time.Minute, false, []AuditProblemKind{AuditStaleUnsealed}},
		{"an honest log, the real key", real, false, keyed, time.Minute, true, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t)
			proposeN(t, s, 100, 2)
			if _, err := s.Seal(ctx, tc.sealer); err != nil {
				t.Fatal(err)
			}
			// Five minutes on: the sealing pass's own heartbeat is older than
			// the bound, the forged one is not.
			now := time.Now().Add(5 * time.Minute)
			if tc.unsealed {
				proposeN(t, s, 200, 1)
				// A heartbeat "now" covering every record, by the forger.
				var maxID int64
				if err := s.pool.QueryRow(ctx, `SELECT max(id) FROM audit_records`).Scan(&maxID); err != nil {
					t.Fatal(err)
				}
				if _, err := s.writeHeartbeat(ctx, forger, AuditHeartbeat{MaxRecordID: maxID, AtMicros: now.UnixMicro()}); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{Verifiers: tc.verifiers, MaxUnsealedAge: tc.maxAge, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			got := kinds(rep)
			if rep.Ok() != tc.wantOk || fmt.Sprint(got) != fmt.Sprint(tc.wantKinds) || rep.Checkpoints == 0 ||
				rep.SignaturesChecked != (len(tc.verifiers) > 0) {
				t.Fatalf("verify = ok %v, problems %v (%+v), %d checkpoints, signatures checked %v; want ok %v, problems %v",
					rep.Ok(), got, rep.Problems, rep.Checkpoints, rep.SignaturesChecked, tc.wantOk, tc.wantKinds)
			}
			if tc.unsealed && (rep.NewestHeartbeatMicros == now.UnixMicro() || rep.Unsealed == 0) {
				t.Fatalf("the forged heartbeat was taken (newest %d), or nothing is unsealed (%d)", rep.NewestHeartbeatMicros, rep.Unsealed)
			}
			if tc.unsealed && tc.verifiers == nil && !strings.Contains(rep.Problems[0].Problem, "no trusted verifier key was given") {
				t.Fatalf("the stale finding does not say why: %q", rep.Problems[0].Problem)
			}
		})
	}
	// Nothing signed in the ledger: a verification with no key rests on no
	// signature, and may be Ok.
	s := openTest(t)
	proposeN(t, s, 300, 1)
	if rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{}); err != nil || !rep.Ok() || rep.Checkpoints != 0 || rep.Unsealed == 0 {
		t.Fatalf("verify of an unsealed ledger with no key and no bound = %+v, %v", rep, err)
	}
}
