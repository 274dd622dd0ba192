package ledger

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/countersign/countersign/internal/audit"
)

func testSigner(t *testing.T, name string) (note.Signer, note.Verifier) {
	t.Helper()
	skey, _, err := audit.GenerateKey(name)
	if err != nil {
		t.Fatal(err)
	}
	s, v, err := audit.ParseSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return s, v
}

// tamper runs sql as the database superuser around the append-only
// triggers, as an attacker with write access would.
func tamper(t *testing.T, s *Store, sql string, args ...any) {
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
	tag, err := tx.Exec(ctx, sql, args...)
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() == 0 {
		t.Fatalf("tamper %q changed nothing", sql)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func proposeN(t *testing.T, s *Store, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if _, err := startFirst(context.Background(), s, proposal(i)); err != nil {
			t.Fatal(err)
		}
	}
}

func kinds(rep AuditReport) []AuditProblemKind {
	var out []AuditProblemKind
	for _, p := range rep.Problems {
		out = append(out, p.Kind)
	}
	return out
}

func TestSealThenVerify(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	signer, verifier := testSigner(t, "audit.test")
	proposeN(t, s, 100, 3) // 9 records: PROPOSED, AUTHORIZED, IN_FLIGHT each
	rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{Verifiers: []note.Verifier{verifier}})
	if err != nil || !rep.Ok() || rep.Unsealed != 9 || rep.Sealed != 0 || rep.Checkpoints != 0 {
		t.Fatalf("before sealing: %+v, %v", rep, err)
	}
	sr, err := s.Seal(ctx, signer)
	if err != nil || sr.Records != 9 || sr.Accounts != 1 {
		t.Fatalf("seal = %+v, %v", sr, err)
	}
	if sr, err := s.Seal(ctx, signer); err != nil || sr.Records != 0 {
		t.Fatalf("second seal = %+v, %v; want nothing left to seal", sr, err)
	}
	proposeN(t, s, 103, 2)
	if sr, err := s.Seal(ctx, signer); err != nil || sr.Records != 6 {
		t.Fatalf("third seal = %+v, %v", sr, err)
	}
	rep, err = s.VerifyAudit(ctx, AuditVerifyOptions{Verifiers: []note.Verifier{verifier}, MaxUnsealedAge: time.Minute})
	if err != nil || !rep.Ok() || rep.Sealed != 15 || rep.Unsealed != 0 || rep.TreeSize != 15 || rep.Checkpoints != 2 || !rep.SignaturesChecked {
		t.Fatalf("after sealing: %+v, %v", rep, err)
	}
	// The latest checkpoint is a C2SP checkpoint in a note signed by the key.
	cp, err := checkpointAt(ctx, s.pool, "acct_test", 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := audit.OpenCheckpoint(cp.Note, verifier)
	if err != nil || c.Size != 15 || c.Origin != "countersign/audit/acct_test" {
		t.Fatalf("checkpoint %q = %+v, %v", cp.Note, c, err)
	}
	if !strings.HasPrefix(cp.Note, "countersign/audit/acct_test\n15\n") || !strings.Contains(cp.Note, "\n\n— audit.test ") {
		t.Fatalf("checkpoint note is not origin, size, root, blank line, signature:\n%s", cp.Note)
	}
	// A sealed record cannot be edited, unsealed or resealed, even by the
	// sequencer's own UPDATE; an unsealed one gets a leaf index and nothing
	// else.
	proposeN(t, s, 105, 1)
	for _, sql := range []string{
		`UPDATE audit_records SET leaf_index = leaf_index + 100 WHERE leaf_index = 0`,
		`UPDATE audit_records SET leaf_index = NULL WHERE leaf_index = 0`,
		`UPDATE audit_records SET detail = 'x', leaf_index = 500 + id WHERE leaf_index IS NULL`,
		`UPDATE audit_records SET at_micros = at_micros + 1 WHERE leaf_index IS NULL`,
		`UPDATE audit_records SET detail = 'x', leaf_index = 99 WHERE leaf_index = 1`,
		`DELETE FROM audit_records WHERE leaf_index = 2`,
		`UPDATE audit_hashes SET hash = hash WHERE idx = 0`,
		`DELETE FROM audit_checkpoints`,
		`TRUNCATE audit_records`,
	} {
		if _, err := s.pool.Exec(ctx, sql); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: err = %v, want append-only refusal", sql, err)
		}
	}
}

func TestVerifyNamesEachTampering(t *testing.T) {
	ctx := context.Background()
	signer, verifier := testSigner(t, "audit.test")
	otherSigner, _ := testSigner(t, "audit.test")
	cases := []struct {
		name   string
		tamper func(t *testing.T, s *Store)
		kind   AuditProblemKind
		want   string // in the problem's text
	}{
		{"altered record field", func(t *testing.T, s *Store) {
			tamper(t, s, `UPDATE audit_records SET detail = 'nothing to see' WHERE leaf_index = 4`)
		}, AuditAltered, "record 5 (leaf 4)"},
		{"deleted sealed record", func(t *testing.T, s *Store) {
			tamper(t, s, `DELETE FROM audit_records WHERE leaf_index = 7`)
		}, AuditMissing, "leaves 7 to 7 hold no record"},
		{"deleted sealed tail", func(t *testing.T, s *Store) {
			tamper(t, s, `DELETE FROM audit_records WHERE leaf_index = 14`)
		}, AuditMissing, "leaves 14 to 14 hold no record"},
		{"swapped leaf indexes", func(t *testing.T, s *Store) {
			tamper(t, s, `UPDATE audit_records SET leaf_index = 1000 WHERE leaf_index = 2`)
			tamper(t, s, `UPDATE audit_records SET leaf_index = 2 WHERE leaf_index = 9`)
			tamper(t, s, `UPDATE audit_records SET leaf_index = 9 WHERE leaf_index = 1000`)
		}, AuditReordered, "record 3 is at leaf 9, but it was sealed as leaf 2"},
		{"altered checkpoint", func(t *testing.T, s *Store) {
			tamper(t, s, `UPDATE audit_checkpoints SET note = replace(note, E'\n15\n', E'\n14\n') WHERE tree_size = 15`)
		}, AuditBadSignature, "checkpoint of size 15"},
		{"checkpoint signed by another key", func(t *testing.T, s *Store) {
			// The attacker rewrites a record and re-signs a matching
			// checkpoint with a key of its own, under the same name.
			tamper(t, s, `UPDATE audit_records SET detail = 'rewritten' WHERE leaf_index = 14`)
			tamper(t, s, `UPDATE audit_hashes SET hash = $1 WHERE idx = $2`, leafHashOf(t, s, 14), tlog.StoredHashIndex(0, 14))
			root := rootOf(t, s, 15)
			forged, err := audit.SignCheckpoint(audit.Checkpoint{Origin: audit.Origin("acct_test"), Size: 15, Root: root}, otherSigner)
			if err != nil {
				t.Fatal(err)
			}
			tamper(t, s, `UPDATE audit_checkpoints SET note = $1 WHERE tree_size = 15`, forged)
		}, AuditUntrustedSigner, "not signed by the trusted key"},
		{"dropped middle record still unsealed", func(t *testing.T, s *Store) {
			proposeN(t, s, 205, 1)
			tamper(t, s, `DELETE FROM audit_records WHERE leaf_index IS NULL AND to_state = 'AUTHORIZED'`)
		}, AuditPathBroken, "goes from AUTHORIZED, but the record before it"},
		{"dropped last record still unsealed", func(t *testing.T, s *Store) {
			proposeN(t, s, 206, 1)
			tamper(t, s, `DELETE FROM audit_records WHERE leaf_index IS NULL AND to_state = 'IN_FLIGHT'`)
		}, AuditPathBroken, "later records are missing"},
		{"forged birth still unsealed", func(t *testing.T, s *Store) {
			// The birth record rewritten to say the intent was born applied.
			proposeN(t, s, 207, 1)
			tamper(t, s, `UPDATE audit_records SET event = 'RAIL_APPLIED' WHERE leaf_index IS NULL AND from_state = ''`)
		}, AuditIllegalTransition, "an intent is born PROPOSED"},
		{"forged transition still unsealed", func(t *testing.T, s *Store) {
			proposeN(t, s, 208, 1)
			tamper(t, s, `UPDATE audit_records SET event = 'FOUND_APPLIED' WHERE leaf_index IS NULL AND to_state = 'AUTHORIZED'`)
		}, AuditIllegalTransition, "PROPOSED → AUTHORIZED by FOUND_APPLIED, which the intent state machine does not allow"},
		{"removed checkpoint", func(t *testing.T, s *Store) {
			tamper(t, s, `DELETE FROM audit_checkpoints WHERE tree_size = 15`)
		}, AuditBeyondCheckpoint, "outside the latest checkpoint (size 9)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := openTest(t)
			proposeN(t, s, 200, 3)
			if _, err := s.Seal(ctx, signer); err != nil {
				t.Fatal(err)
			}
			proposeN(t, s, 203, 2)
			if _, err := s.Seal(ctx, signer); err != nil {
				t.Fatal(err)
			}
			if rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{Verifiers: []note.Verifier{verifier}}); err != nil || !rep.Ok() {
				t.Fatalf("clean log: %+v, %v", rep, err)
			}
			tc.tamper(t, s)
			rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{Verifiers: []note.Verifier{verifier}})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range rep.Problems {
				if p.Kind == tc.kind && strings.Contains(p.Problem, tc.want) {
					return
				}
			}
			t.Fatalf("problems %v do not include %s %q:\n%+v", kinds(rep), tc.kind, tc.want, rep.Problems)
		})
	}
}

// leafHashOf recomputes the leaf hash of the record now at leaf i.
func leafHashOf(t *testing.T, s *Store, i int64) []byte {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT `+auditRecordColumns+` FROM audit_records r WHERE leaf_index = $1`, i)
	if err != nil {
		t.Fatal(err)
	}
	r, err := pgx.CollectExactlyOneRow(rows, scanAuditRecord)
	if err != nil {
		t.Fatal(err)
	}
	h := r.Leaf().LeafHash()
	return h[:]
}

// rootOf is the root the stored hashes give for a tree of size n.
func rootOf(t *testing.T, s *Store, n int64) tlog.Hash {
	t.Helper()
	h, err := tlog.TreeHash(n, s.hashReader(context.Background(), "acct_test"))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// sameOldChain returns two SIKs the chain-era trigger put on one chain
// (the first byte of their SHA-256 equal mod 16), so an old-style head lock
// would have made one wait for the other.
func sameOldChain(t *testing.T) (string, string) {
	t.Helper()
	byChain := map[byte]string{}
	for i := range 1000 {
		sik := testSIK(1000 + i)
		sum := sha256.Sum256([]byte(sik))
		if other, ok := byChain[sum[0]%16]; ok {
			return other, sik
		}
		byChain[sum[0]%16] = sik
	}
	t.Fatal("no two SIKs share a chain")
	return "", ""
}

// TestDecisionsOnOneAccountDoNotWaitForEachOther: a deciding transaction
// that stays open does not hold up another one on the same rail account
// (the chain-era trigger locked the chain head until commit), nor the
// sequencer.
func TestDecisionsOnOneAccountDoNotWaitForEachOther(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	signer, verifier := testSigner(t, "audit.test")
	a, b := sameOldChain(t)
	first, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Rollback(ctx) }()
	if _, err := first.Exec(ctx, insertIntentSQL, a); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Exec(ctx, `UPDATE intents SET state = 'AUTHORIZED', last_event = 'GATES_PASSED' WHERE sik = $1`, a); err != nil {
		t.Fatal(err)
	}
	// The second transaction writes its records and commits while the
	// first is still open, within a deadline it would miss if it waited.
	dl, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = pgx.BeginFunc(dl, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(dl, insertIntentSQL, b); err != nil {
			return err
		}
		_, err := tx.Exec(dl, `UPDATE intents SET state = 'AUTHORIZED', last_event = 'GATES_PASSED' WHERE sik = $1`, b)
		return err
	})
	if err != nil {
		t.Fatalf("second decision on the account while the first is open: %v", err)
	}
	// The sequencer seals what is committed, without waiting either.
	sr, err := s.Seal(dl, signer)
	if err != nil || sr.Records != 2 {
		t.Fatalf("seal while a decision is open = %+v, %v; want the second decision's 2 records", sr, err)
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if sr, err := s.Seal(ctx, signer); err != nil || sr.Records != 2 {
		t.Fatalf("seal after the first commits = %+v, %v", sr, err)
	}
	rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{Verifiers: []note.Verifier{verifier}})
	if err != nil || !rep.Ok() || rep.Sealed != 4 {
		t.Fatalf("verify = %+v, %v", rep, err)
	}
}

const insertIntentSQL = `INSERT INTO intents (rail_account, sik, state, last_event, rail, action, subject, amount_minor, currency, canonical)
	VALUES ('acct_test', $1, 'PROPOSED', 'PROPOSED', 'stripe', 'refund', 'pi_1', 100, 'USD', '{}')`

// TestConcurrentSequencersKeepOneLog: sequencers sealing the same account
// at once (as several sidecars sharing a ledger do), while decisions keep
// writing, produce one contiguous, consistent log.
func TestConcurrentSequencersKeepOneLog(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	signer, verifier := testSigner(t, "audit.test")
	const writers, perWriter = 3, 8
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	done := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				if _, err := startFirst(ctx, s, proposal(300+w*perWriter+i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var seq sync.WaitGroup
	for range 3 {
		seq.Add(1)
		go func() {
			defer seq.Done()
			for {
				// Small batches, so sealings interleave.
				if _, err := s.SealAccount(ctx, "acct_test", signer, 2); err != nil {
					errs <- err
					return
				}
				select {
				case <-done:
					return
				default:
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	seq.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if _, err := s.Seal(ctx, signer); err != nil {
		t.Fatal(err)
	}
	const total = writers * perWriter * 3
	rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{Verifiers: []note.Verifier{verifier}})
	if err != nil || !rep.Ok() || rep.Sealed != total || rep.TreeSize != total || rep.Checkpoints < 2 {
		t.Fatalf("verify = %+v, %v; want %d records in one log", rep, err, total)
	}
	var distinct, maxLeaf int64
	if err := s.pool.QueryRow(ctx, `SELECT count(DISTINCT leaf_index), max(leaf_index) FROM audit_records`).Scan(&distinct, &maxLeaf); err != nil {
		t.Fatal(err)
	}
	if distinct != total || maxLeaf != total-1 {
		t.Fatalf("leaf indexes: %d distinct, max %d; want 0..%d", distinct, maxLeaf, total-1)
	}
}

func TestProofsVerifyWithTlog(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	signer, verifier := testSigner(t, "audit.test")
	a, err := s.CreateAgent(ctx, "own_p", "bot")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GrantRailAccount(ctx, "acct_test", "own_p"); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		p := proposal(400 + i)
		p.AgentID = a.ID
		if _, err := startFirst(ctx, s, p); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Seal(ctx, signer); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := s.OwnerAuditRecords(ctx, "own_p", AuditFilter{}, 0, 100)
	if err != nil || len(recs) != 15 {
		t.Fatalf("records = %d, %v", len(recs), err)
	}
	for _, size := range []int64{0, 9} {
		for _, r := range recs {
			if size != 0 && *r.LeafIndex >= size {
				if _, err := s.OwnerInclusionProof(ctx, "own_p", r.ID, size); err == nil {
					t.Fatalf("proof of leaf %d in a tree of %d", *r.LeafIndex, size)
				}
				continue
			}
			p, err := s.OwnerInclusionProof(ctx, "own_p", r.ID, size)
			if err != nil {
				t.Fatal(err)
			}
			c, err := audit.OpenCheckpoint(p.Checkpoint.Note, verifier)
			if err != nil {
				t.Fatal(err)
			}
			if err := audit.CheckInclusion(c, *p.Record.LeafIndex, p.Record.Leaf(), p.Proof); err != nil {
				t.Fatalf("record %d: %v", r.ID, err)
			}
			altered := p.Record.Leaf()
			altered.Detail += "!"
			if audit.CheckInclusion(c, *p.Record.LeafIndex, altered, p.Proof) == nil {
				t.Fatalf("an altered record %d verified", r.ID)
			}
		}
	}
	if _, err := s.OwnerInclusionProof(ctx, "own_other", recs[0].ID, 0); err == nil {
		t.Fatal("another owner got a proof")
	}
	cp, err := s.AuditConsistencyProof(ctx, "acct_test", 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	older, err := audit.OpenCheckpoint(cp.From.Note, verifier)
	if err != nil {
		t.Fatal(err)
	}
	newer, err := audit.OpenCheckpoint(cp.To.Note, verifier)
	if err != nil || newer.Size != 15 || older.Size != 3 {
		t.Fatalf("checkpoints %+v %+v, %v", older, newer, err)
	}
	if err := audit.CheckConsistency(older, newer, cp.Proof); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AuditConsistencyProof(ctx, "acct_test", 4, 0); err == nil {
		t.Fatal("a consistency proof from a size no checkpoint has")
	}
}

// TestKeyRotation: checkpoints signed before a rotation verify with the old
// verifier key, later ones with the new, and the log stays one log.
func TestKeyRotation(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	oldSigner, oldVerifier := testSigner(t, "audit.test")
	newSigner, newVerifier := testSigner(t, "audit.test")
	proposeN(t, s, 500, 2)
	if _, err := s.Seal(ctx, oldSigner); err != nil {
		t.Fatal(err)
	}
	proposeN(t, s, 502, 2)
	if _, err := s.Seal(ctx, newSigner); err != nil {
		t.Fatal(err)
	}
	rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{Verifiers: []note.Verifier{newVerifier, oldVerifier}})
	if err != nil || !rep.Ok() || rep.Checkpoints != 2 || rep.Sealed != 12 {
		t.Fatalf("verify with both keys = %+v, %v", rep, err)
	}
	rep, err = s.VerifyAudit(ctx, AuditVerifyOptions{Verifiers: []note.Verifier{newVerifier}})
	if err != nil || len(rep.Problems) != 1 || rep.Problems[0].Kind != AuditUntrustedSigner || rep.Problems[0].TreeSize != 6 {
		t.Fatalf("verify with the new key only = %+v, %v; want the first checkpoint untrusted", rep.Problems, err)
	}
}

// checkChains verifies the chain-era hash chains (what the migrations
// before 00011 wrote, and 00011's Down writes): every record on a chain,
// numbered from 1, each hash over its predecessor's and its fields.
func checkChains(t *testing.T, url string, want int) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT chain, seq, rail_account, sik, from_state, to_state, event, attempt_seq, detail, at_micros, prev_hash, hash
		FROM audit_records ORDER BY chain, seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	var chain string
	var prev []byte
	var next int64
	for rows.Next() {
		var c, acct, sik, from, to, ev, detail string
		var seq, at int64
		var attempt int
		var prevHash, hash []byte
		if err := rows.Scan(&c, &seq, &acct, &sik, &from, &to, &ev, &attempt, &detail, &at, &prevHash, &hash); err != nil {
			t.Fatal(err)
		}
		if c != chain {
			chain, prev, next = c, make([]byte, 32), 1
		}
		var b strings.Builder
		for _, f := range []string{c, fmt.Sprint(seq), acct, sik, from, to, ev, fmt.Sprint(attempt), detail, fmt.Sprint(at)} {
			fmt.Fprintf(&b, "%d:%s", len(f), f)
		}
		sum := sha256.Sum256(append(append([]byte{}, prev...), b.String()...))
		if seq != next || string(prevHash) != string(prev) || string(hash) != string(sum[:]) {
			t.Fatalf("chain %s record %d does not verify", c, seq)
		}
		prev, next = hash, seq+1
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Fatalf("%d chained records, want %d", n, want)
	}
}

// TestMigrationCarriesChainedRecordsIntoTheLog: records the chain-era
// trigger wrote are sealed first, in chain order, into the new log, and
// 00011's Down chains the records written since its Up.
func TestMigrationCarriesChainedRecordsIntoTheLog(t *testing.T) {
	ctx := context.Background()
	url, p, _ := migrationTest(t)
	phase := func(f func(s *Store)) {
		t.Helper()
		s, err := Open(ctx, url, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		f(s)
	}
	phase(func(s *Store) { proposeN(t, s, 600, 2) }) // 6 unchained records
	if _, err := p.DownTo(ctx, 10); err != nil {
		t.Fatal(err)
	}
	checkChains(t, url, 6)
	phase(func(s *Store) { proposeN(t, s, 602, 2) }) // 6 more, chained by the old trigger
	checkChains(t, url, 12)
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	signer, verifier := testSigner(t, "audit.test")
	phase(func(s *Store) {
		proposeN(t, s, 604, 1)
		if sr, err := s.Seal(ctx, signer); err != nil || sr.Records != 15 {
			t.Fatalf("seal = %+v, %v", sr, err)
		}
		rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{Verifiers: []note.Verifier{verifier}})
		if err != nil || !rep.Ok() || rep.Sealed != 15 {
			t.Fatalf("verify = %+v, %v", rep, err)
		}
		var chained, inOrder int
		if err := s.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE leaf_index = rn - 1) FROM (
			SELECT leaf_index, row_number() OVER (ORDER BY chain, seq) AS rn FROM audit_records WHERE chain IS NOT NULL) x`).Scan(&chained, &inOrder); err != nil {
			t.Fatal(err)
		}
		if chained != 12 || inOrder != 12 {
			t.Fatalf("%d chained records, %d of them sealed first in chain order; want 12 and 12", chained, inOrder)
		}
	})
}

// TestVerifyReportsRecordsUnsealedTooLong: records that waited longer
// than the bound (no sequencer heartbeat since, by the verifier's clock)
// are reported, one finding per account.
func TestVerifyReportsRecordsUnsealedTooLong(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	signer, verifier := testSigner(t, "audit.test")
	if _, err := s.Seal(ctx, signer); err != nil {
		t.Fatal(err)
	}
	proposeN(t, s, 700, 2)
	opts := AuditVerifyOptions{Verifiers: []note.Verifier{verifier}, MaxUnsealedAge: time.Minute, Now: time.Now()}
	if rep, err := s.VerifyAudit(ctx, opts); err != nil || !rep.Ok() || rep.Unsealed != 6 || rep.OldestUnsealedMicros == 0 {
		t.Fatalf("fresh unsealed records: %+v, %v", rep, err)
	}
	// An hour on, by the verifier's clock, with no sequencer since.
	opts.Now = time.Now().Add(time.Hour)
	rep, err := s.VerifyAudit(ctx, opts)
	if err != nil || len(rep.Problems) != 1 || rep.Problems[0].Kind != AuditStaleUnsealed ||
		!strings.Contains(rep.Problems[0].Problem, "6 records unsealed for longer than 1m0s") {
		t.Fatalf("stale unsealed records: %+v, %v", rep.Problems, err)
	}
	if rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{Now: opts.Now}); err != nil || !rep.Ok() {
		t.Fatalf("without a bound: %+v, %v", rep, err)
	}
}
