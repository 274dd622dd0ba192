package ledger

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// putHeartbeat stores a heartbeat signed by signer, as a sequencer at
// clock at would, whatever the pacing says.
func putHeartbeat(t *testing.T, s *Store, signer note.Signer, h AuditHeartbeat) {
	t.Helper()
	signed, err := note.Sign(&note.Note{Text: h.body()}, signer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(context.Background(), `INSERT INTO audit_heartbeats (max_record_id, signed_micros, note) VALUES ($1, $2, $3)`,
		h.MaxRecordID, h.AtMicros, string(signed)); err != nil {
		t.Fatal(err)
	}
}

func maxRecordID(t *testing.T, s *Store) int64 {
	t.Helper()
	var id int64
	if err := s.pool.QueryRow(context.Background(), `SELECT COALESCE(max(id), 0) FROM audit_records`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestStaleUnsealedIsNotTheRecordsOwnClock: with the sequencer stopped, a
// database writer erases one unsealed intent, edits another's record and
// sets every unsealed record's at_micros to now. Verify, by its own clock
// past the bound since the last signed heartbeat, still reports the
// records stale: their times and the database's clock count for nothing.
func TestStaleUnsealedIsNotTheRecordsOwnClock(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	signer, verifier := testSigner(t, "audit.test")
	if rep, err := s.Seal(ctx, signer); err != nil || !rep.Heartbeat {
		t.Fatalf("first pass = %+v, %v; want a heartbeat", rep, err)
	}
	// The sequencer stops; three intents are decided and wait.
	proposeN(t, s, 100, 3)
	eraseIntent(t, s, testSIK(100))
	tamper(t, s, `UPDATE audit_records SET at_micros = (extract(epoch FROM clock_timestamp()) * 1000000)::bigint
		WHERE leaf_index IS NULL`)
	opts := AuditVerifyOptions{Verifiers: []note.Verifier{verifier}, MaxUnsealedAge: time.Minute}

	opts.Now = time.Now()
	if rep, err := s.VerifyAudit(ctx, opts); err != nil || !rep.Ok() || rep.Unsealed != 6 {
		t.Fatalf("within the bound of the last heartbeat: %+v, %v", rep, err)
	}
	opts.Now = time.Now().Add(2 * time.Minute)
	rep, err := s.VerifyAudit(ctx, opts)
	if err != nil || !slices.Equal(kinds(rep), []AuditProblemKind{AuditStaleUnsealed}) || rep.NewestHeartbeatMicros == 0 {
		t.Fatalf("two minutes on, by the verifier's clock: %+v, %v; want stale-unsealed", rep, err)
	}
}

// TestStaleUnsealedCoveredByAnOldHeartbeat: a heartbeat older than the
// bound said every record up to its id was sealed; an unsealed record at
// or below that id is stale, however fresh the newest heartbeat.
func TestStaleUnsealedCoveredByAnOldHeartbeat(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	signer, verifier := testSigner(t, "audit.test")
	proposeN(t, s, 100, 2)
	top, now := maxRecordID(t, s), time.Now()
	putHeartbeat(t, s, signer, AuditHeartbeat{MaxRecordID: top - 1, AtMicros: now.Add(-2 * time.Minute).UnixMicro()})
	putHeartbeat(t, s, signer, AuditHeartbeat{MaxRecordID: top - 1, AtMicros: now.Add(-5 * time.Second).UnixMicro()})
	rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{Verifiers: []note.Verifier{verifier}, MaxUnsealedAge: time.Minute, Now: now})
	if err != nil || !slices.Equal(kinds(rep), []AuditProblemKind{AuditStaleUnsealed}) || rep.Problems[0].RecordID != top-5 {
		t.Fatalf("records an old heartbeat covers, unsealed: %+v, %v; want stale-unsealed from record %d", rep, err, top-5)
	}
	if p := rep.Problems[0].Problem; !strings.Contains(p, "5 records unsealed for longer than 1m0s") {
		t.Fatalf("problem %q: want the 5 covered records counted, not the newest", p)
	}
}

// TestRunningSequencerIsNotStale: records waiting for the next pass of a
// running sequencer are not stale, whatever their at_micros says.
func TestRunningSequencerIsNotStale(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	signer, verifier := testSigner(t, "audit.test")
	proposeN(t, s, 100, 2)
	if rep, err := s.Seal(ctx, signer); err != nil || rep.Records != 6 || !rep.Heartbeat {
		t.Fatalf("seal = %+v, %v", rep, err)
	}
	proposeN(t, s, 102, 1)
	// Their at_micros (informational now) says an hour ago.
	tamper(t, s, `UPDATE audit_records SET at_micros = at_micros - 3600000000 WHERE leaf_index IS NULL`)
	rep, err := s.VerifyAudit(ctx, AuditVerifyOptions{Verifiers: []note.Verifier{verifier}, MaxUnsealedAge: time.Minute, Now: time.Now()})
	if err != nil || !rep.Ok() || rep.Unsealed != 3 || rep.Sealed != 6 || rep.NewestHeartbeatMicros == 0 || rep.HeartbeatsIgnored != 0 {
		t.Fatalf("records waiting for a running sequencer: %+v, %v", rep, err)
	}
}

// TestForgedHeartbeatsCountForNothing: heartbeats the trusted key did not
// sign, or whose row says other than their note, are ignored, so a
// database writer cannot keep stale records fresh with them.
func TestForgedHeartbeatsCountForNothing(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	signer, verifier := testSigner(t, "audit.test")
	other, _ := testSigner(t, "audit.test")
	if _, err := s.Seal(ctx, signer); err != nil {
		t.Fatal(err)
	}
	proposeN(t, s, 100, 1)
	later := time.Now().Add(2 * time.Minute)
	fresh := AuditHeartbeat{MaxRecordID: 0, AtMicros: later.Add(-time.Second).UnixMicro()}
	putHeartbeat(t, s, other, fresh) // the same name, another key
	if _, err := s.pool.Exec(ctx, `INSERT INTO audit_heartbeats (max_record_id, signed_micros, note) VALUES (0, $1, $2)`,
		fresh.AtMicros, fresh.body()); err != nil { // unsigned
		t.Fatal(err)
	}
	// A real heartbeat, its row re-dated to look fresh.
	tamper(t, s, `INSERT INTO audit_heartbeats (max_record_id, signed_micros, note)
		SELECT max_record_id, $1, note FROM audit_heartbeats ORDER BY id LIMIT 1`, fresh.AtMicros)
	opts := AuditVerifyOptions{Verifiers: []note.Verifier{verifier}, MaxUnsealedAge: time.Minute, Now: later}
	rep, err := s.VerifyAudit(ctx, opts)
	if err != nil || !slices.Equal(kinds(rep), []AuditProblemKind{AuditStaleUnsealed}) || rep.HeartbeatsIgnored != 3 {
		t.Fatalf("forged heartbeats: %+v, %v; want stale-unsealed and 3 ignored", rep, err)
	}
	// Deleting every heartbeat only makes it stale too.
	tamper(t, s, `DELETE FROM audit_heartbeats`)
	opts.Now = time.Now()
	if rep, err := s.VerifyAudit(ctx, opts); err != nil || !slices.Equal(kinds(rep), []AuditProblemKind{AuditStaleUnsealed}) {
		t.Fatalf("no heartbeat at all: %+v, %v; want stale-unsealed", rep, err)
	}
}

// TestHeartbeatPacing: a heartbeat is written when the highest record id
// moved on (at most once a second), else once per HeartbeatIdle; the
// table is append-only.
func TestHeartbeatPacing(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	signer, verifier := testSigner(t, "audit.test")
	t0 := time.Now().Add(-time.Hour)
	at := func(d time.Duration) int64 { return t0.Add(d).UnixMicro() }
	// A row dated in the future (a clock set back, or a writer stopping
	// heartbeats) does not make one unnecessary.
	putHeartbeat(t, s, signer, AuditHeartbeat{MaxRecordID: 99, AtMicros: time.Now().Add(time.Hour).UnixMicro()})
	for _, tc := range []struct {
		name string
		h    AuditHeartbeat
		want bool
	}{
		{"the first", AuditHeartbeat{MaxRecordID: 5, AtMicros: at(0)}, true},
		{"nothing new, soon after", AuditHeartbeat{MaxRecordID: 5, AtMicros: at(10 * time.Second)}, false},
		{"new records within a second", AuditHeartbeat{MaxRecordID: 6, AtMicros: at(500 * time.Millisecond)}, false},
		{"new records a second on", AuditHeartbeat{MaxRecordID: 6, AtMicros: at(1500 * time.Millisecond)}, true},
		{"nothing new, before the idle period", AuditHeartbeat{MaxRecordID: 6, AtMicros: at(HeartbeatIdle)}, false},
		{"nothing new, an idle period on", AuditHeartbeat{MaxRecordID: 6, AtMicros: at(HeartbeatIdle + 2*time.Second)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.writeHeartbeat(ctx, signer, tc.h)
			if err != nil || got != tc.want {
				t.Fatalf("writeHeartbeat(%+v) = %v, %v; want %v", tc.h, got, err, tc.want)
			}
		})
	}
	var n int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM audit_heartbeats`).Scan(&n); err != nil || n != 4 {
		t.Fatalf("%d heartbeats stored, %v; want 4", n, err)
	}
	for _, q := range []string{`UPDATE audit_heartbeats SET signed_micros = 0`, `DELETE FROM audit_heartbeats`, `TRUNCATE audit_heartbeats`} {
		if _, err := s.pool.Exec(ctx, q); err == nil {
			t.Fatalf("%s: allowed, want refused", q)
		}
	}
	// Every heartbeat written opens with the trusted key.
	var signed string
	if err := s.pool.QueryRow(ctx, `SELECT note FROM audit_heartbeats WHERE signed_micros = $1`, at(0)).Scan(&signed); err != nil {
		t.Fatal(err)
	}
	if h, err := openHeartbeat(signed, verifier); err != nil || h != (AuditHeartbeat{MaxRecordID: 5, AtMicros: at(0)}) {
		t.Fatalf("openHeartbeat = %+v, %v", h, err)
	}
}

// TestParseHeartbeat: only the canonical text is a heartbeat, and a
// checkpoint never reads as one.
func TestParseHeartbeat(t *testing.T) {
	good := AuditHeartbeat{MaxRecordID: 12, AtMicros: 1700000000000000}
	if h, err := parseHeartbeat(good.body()); err != nil || h != good {
		t.Fatalf("parseHeartbeat(body) = %+v, %v", h, err)
	}
	for _, tc := range []struct{ name, text string }{
		{"a checkpoint", "countersign/audit/acct_test\n3\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n"},
		{"a leading zero", "countersign/audit-heartbeat\nmax-record-id 012\ntime 1\n"},
		{"a negative time", "countersign/audit-heartbeat\nmax-record-id 1\ntime -1\n"},
		{"an extra line", "countersign/audit-heartbeat\nmax-record-id 1\ntime 1\nx\n"},
		{"fields swapped", "countersign/audit-heartbeat\ntime 1\nmax-record-id 1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if h, err := parseHeartbeat(tc.text); err == nil {
				t.Fatalf("parseHeartbeat = %+v, want an error", h)
			}
		})
	}
}
