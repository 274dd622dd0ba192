package api

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"buf.build/go/protovalidate"
	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/sik"
	"github.com/countersign/countersign/internal/testing/ledgertest"
	"github.com/countersign/countersign/internal/testing/pgtest"
	"github.com/countersign/countersign/internal/testing/wait"
)

const acct = "acct_audit"

// auditFixture is a ledger where own_a and own_b share acct (own_a's agent
// mandated on it) and own_c holds nothing, with 12 proposed intents, 8 of
// own_a's, 4 of own_b's; siks maps each intent to its agent.
func auditFixture(t *testing.T) (store *ledger.Store, s *OwnerServer, url string, siks map[string]string, mine, theirs string) {
	t.Helper()
	ctx := context.Background()
	url = pgtest.NewDatabase(t)
	store, err := ledger.Open(ctx, url, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	s = NewOwnerServer(store, func(ctx context.Context) (string, error) {
		o, _ := ctx.Value(ownerKey{}).(string)
		return o, nil
	})
	// own_a and own_b share the account; own_c holds none.
	for _, o := range []string{"own_a", "own_b"} {
		if _, err := store.GrantRailAccount(ctx, acct, o); err != nil {
			t.Fatal(err)
		}
	}
	agentOf := func(owner string, mandate bool) string {
		t.Helper()
		a, err := s.CreateAgent(as(owner), &countersignv1.CreateAgentRequest{Agent: &countersignv1.Agent{DisplayName: "bot"}})
		if err != nil {
			t.Fatal(err)
		}
		id := a.GetAgent().GetAgentId()
		if mandate {
			now := time.Now().Truncate(time.Second)
			m := &countersignv1.Mandate{Rail: countersignv1.Rail_RAIL_STRIPE, RailAccount: acct, AgentId: id, Purpose: "refunds",
				ValidFrom: timestamppb.New(now), ValidUntil: timestamppb.New(now.Add(time.Hour)), Mode: countersignv1.MandateMode_MANDATE_MODE_BUDGETED,
				Grants: []*countersignv1.Grant{{ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND, MaxAmountMinor: 5000, Currencies: []string{"USD"}}}}
			if _, err := s.CreateMandate(as(owner), &countersignv1.CreateMandateRequest{Mandate: m}); err != nil {
				t.Fatal(err)
			}
		}
		return id
	}
	mine, theirs = agentOf("own_a", true), agentOf("own_b", false)
	siks = map[string]string{} // sik → agent
	for i := range 12 {
		agent := mine
		if i%3 == 2 {
			agent = theirs
		}
		ni := keyedRefund(t, i, agent)
		if err := ledgertest.InFlight(ctx, store, ni, ni.SIK); err != nil {
			t.Fatal(err)
		}
		siks[ni.SIK] = agent
	}
	return store, s, url, siks, mine, theirs
}

// keyedRefund is a refund of 1 USD on pi_a on acct by agentID, keyed as
// the engine keys it (its SIK that of its canonical action), made
// distinct by n.
func keyedRefund(t *testing.T, n int, agentID string) ledger.NewIntent {
	t.Helper()
	a := sik.Action{V: sik.Version, RailAccount: acct, Action: "refund", Subject: "pi_a", AmountMinor: 1, Currency: "USD",
		Distinct: fmt.Sprintf("refund %d", n)}
	canon, k, err := a.Keyed()
	if err != nil {
		t.Fatal(err)
	}
	return ledger.NewIntent{Key: ledger.Key{RailAccount: acct, SIK: string(k)}, Rail: "stripe", Action: a.Action, Subject: a.Subject,
		AmountMinor: a.AmountMinor, Currency: a.Currency, DistinctReason: a.Distinct, Canonical: string(canon), AgentID: agentID}
}

func testAuditKey(t *testing.T) (note.Signer, note.Verifier) {
	t.Helper()
	skey, _, err := audit.GenerateKey("api.audit.test")
	if err != nil {
		t.Fatal(err)
	}
	sg, v, err := audit.ParseSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return sg, v
}

func TestOwnerAPIListsAndVerifiesTheAudit(t *testing.T) {
	ctx := context.Background()
	store, s, url, siks, mine, theirs := auditFixture(t)
	signer, verifier := testAuditKey(t)
	s.WithAuditVerifier(verifier)

	// Every record of own_a's intents, none of own_b's, in record id
	// order, across pages.
	var got []*countersignv1.AuditRecord
	tok := ""
	for pages := 0; ; pages++ {
		l, err := s.ListAuditRecords(as("own_a"), &countersignv1.ListAuditRecordsRequest{PageSize: 5, PageToken: tok})
		if err != nil || pages > 50 {
			t.Fatalf("page %d: %v", pages, err)
		}
		got = append(got, l.GetAuditRecords()...)
		if tok = l.GetNextPageToken(); tok == "" {
			break
		}
	}
	perSIK := map[string]int{}
	for i, r := range got {
		if siks[r.GetSik()] != mine {
			t.Fatalf("record %d is of intent %s, not own_a's", i, r.GetSik())
		}
		if r.GetRailAccount() != acct || r.LeafIndex != nil || r.GetToState() == countersignv1.IntentState_INTENT_STATE_UNSPECIFIED {
			t.Fatalf("record %d: %v", i, r)
		}
		if h := RecordOf(r).LeafHash(); r.GetLeafHash() != hex.EncodeToString(h[:]) {
			t.Fatalf("record %d: leaf hash %s, the record's fields hash to %x", i, r.GetLeafHash(), h)
		}
		if i > 0 && got[i-1].GetRecordId() >= r.GetRecordId() {
			t.Fatalf("records %d and %d out of order: %d, %d", i-1, i, got[i-1].GetRecordId(), r.GetRecordId())
		}
		perSIK[r.GetSik()]++
	}
	for sk, agent := range siks {
		if agent == mine {
			one, err := s.ListAuditRecords(as("own_a"), &countersignv1.ListAuditRecordsRequest{RailAccount: acct, Sik: sk, PageSize: 100})
			if err != nil || len(one.GetAuditRecords()) == 0 || len(one.GetAuditRecords()) != perSIK[sk] {
				t.Fatalf("records of %s: %d listed alone, %d in the full listing (%v)", sk, len(one.GetAuditRecords()), perSIK[sk], err)
			}
		}
	}
	if l, err := s.ListAuditRecords(as("own_b"), &countersignv1.ListAuditRecordsRequest{RailAccount: acct}); err != nil || len(l.GetAuditRecords()) == 0 {
		t.Fatalf("own_b lists %v, %v", l, err)
	} else {
		for _, r := range l.GetAuditRecords() {
			if siks[r.GetSik()] != theirs {
				t.Fatalf("own_b sees own_a's record %v", r)
			}
		}
	}
	if _, err := s.ListAuditRecords(as("own_a"), &countersignv1.ListAuditRecordsRequest{Sik: "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}); code(err) != codes.InvalidArgument {
		t.Fatalf("sik without rail_account: %v", err)
	}
	if _, err := s.ListAuditRecords(as("own_a"), &countersignv1.ListAuditRecordsRequest{PageToken: "not-a-token"}); code(err) != codes.InvalidArgument {
		t.Fatalf("forged page token: %v", err)
	}

	// Verification covers every record of the account's log.
	if _, err := store.Seal(ctx, signer); err != nil {
		t.Fatal(err)
	}
	v, err := s.VerifyAudit(as("own_a"), &countersignv1.VerifyAuditRequest{RailAccount: acct})
	if err != nil || !v.GetOk() || v.GetCheckpointsChecked() != 1 || !v.GetSignaturesChecked() || v.GetRecordsChecked() <= int64(len(got)) ||
		v.GetTreeSize() != v.GetRecordsChecked() || v.GetRecordsUnsealed() != 0 {
		t.Fatalf("verify = %v, %v (own_a's records alone: %d)", v, err, len(got))
	}
	if v, err := s.VerifyAudit(as("own_b"), &countersignv1.VerifyAuditRequest{RailAccount: acct}); err != nil || !v.GetOk() {
		t.Fatalf("a co-owner of the account verifies = %v, %v", v, err)
	}
	// An owner that does not hold the account neither verifies nor lists
	// it, and cannot tell it from an account that does not exist.
	var refusals []string
	for _, a := range []string{acct, "acct_nowhere"} {
		_, verr := s.VerifyAudit(as("own_c"), &countersignv1.VerifyAuditRequest{RailAccount: a})
		_, lerr := s.ListAuditRecords(as("own_c"), &countersignv1.ListAuditRecordsRequest{RailAccount: a})
		for _, err := range []error{verr, lerr} {
			if code(err) != codes.PermissionDenied {
				t.Fatalf("own_c on %s: %v, want PermissionDenied", a, err)
			}
			refusals = append(refusals, strings.ReplaceAll(err.Error(), a, "X"))
		}
	}
	if refusals[0] != refusals[2] || refusals[1] != refusals[3] {
		t.Fatalf("refusals tell a real account from a missing one: %q", refusals)
	}
	if l, err := s.ListAuditRecords(as("own_c"), &countersignv1.ListAuditRecordsRequest{}); err != nil || len(l.GetAuditRecords()) != 0 {
		t.Fatalf("own_c lists %v, %v; want nothing", l, err)
	}
	// A hand edit is found and named.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `UPDATE audit_records SET detail = 'edited' WHERE id = $1`, got[0].GetRecordId()); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	v, err = s.VerifyAudit(as("own_a"), &countersignv1.VerifyAuditRequest{RailAccount: acct})
	if err != nil || v.GetOk() || len(v.GetProblems()) == 0 {
		t.Fatalf("after editing record %d: %v, %v", got[0].GetRecordId(), v, err)
	}
	if p := v.GetProblems()[0]; p.GetKind() != string(ledger.AuditAltered) || p.GetRecordId() != got[0].GetRecordId() || p.GetSik() != got[0].GetSik() {
		t.Fatalf("after editing record %d: %v", got[0].GetRecordId(), v.GetProblems())
	}
	// own_b verifies the same log, but is not told which of own_a's
	// intents the edited record is of.
	v, err = s.VerifyAudit(as("own_b"), &countersignv1.VerifyAuditRequest{RailAccount: acct})
	if err != nil || v.GetOk() || v.GetProblems()[0].GetSik() != "" || strings.Contains(v.GetProblems()[0].GetProblem(), got[0].GetSik()) {
		t.Fatalf("own_b's report: %v, %v", v, err)
	}

	// An intent's amount edited after it was sealed: own_a is told which
	// and how; own_b that an intent was edited, not its amount.
	edited := got[len(got)-1].GetSik()
	if _, err := pgxExec(ctx, url, `UPDATE intents SET amount_minor = 987654 WHERE sik = $1`, edited); err != nil {
		t.Fatal(err)
	}
	v, err = s.VerifyAudit(as("own_a"), &countersignv1.VerifyAuditRequest{RailAccount: acct})
	if err != nil || !hasProblem(v, string(ledger.AuditActionMismatch), edited, "its amount is 987654, its canonical action's 1") {
		t.Fatalf("own_a's report after an intent's amount was edited: %v, %v", v.GetProblems(), err)
	}
	v, err = s.VerifyAudit(as("own_b"), &countersignv1.VerifyAuditRequest{RailAccount: acct})
	if err != nil || !hasProblem(v, string(ledger.AuditActionMismatch), "", "(another owner's intent) is not the action its SIK was derived from") ||
		strings.Contains(fmt.Sprint(v.GetProblems()), "987654") || strings.Contains(fmt.Sprint(v.GetProblems()), edited) {
		t.Fatalf("own_b's report after own_a's intent was edited: %v, %v", v.GetProblems(), err)
	}
}

func hasProblem(v *countersignv1.VerifyAuditResponse, kind, sik, text string) bool {
	for _, p := range v.GetProblems() {
		if p.GetKind() == kind && p.GetSik() == sik && strings.Contains(p.GetProblem(), text) {
			return true
		}
	}
	return false
}

// pgxExec runs sql as the database superuser around the append-only and
// intent guards, as an attacker with write access would.
func pgxExec(ctx context.Context, url, sql string, args ...any) (int64, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL session_replication_role = replica`); err != nil {
		return 0, err
	}
	tag, err := tx.Exec(ctx, sql, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), tx.Commit(ctx)
}

func TestOwnerAuditProofs(t *testing.T) {
	ctx := context.Background()
	store, s, _, siks, mine, _ := auditFixture(t)
	signer, verifier := testAuditKey(t)
	first, err := store.Seal(ctx, signer)
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.ListAuditRecords(as("own_a"), &countersignv1.ListAuditRecordsRequest{RailAccount: acct, PageSize: 1000})
	if err != nil || len(l.GetAuditRecords()) == 0 {
		t.Fatalf("list: %v, %v", l, err)
	}
	recs := l.GetAuditRecords()
	// One more intent, unsealed until a second sealing.
	sk := "AUDITSIKZZZZZZZZZZZZZZZZZZZZZZZZ"
	k := ledger.Key{RailAccount: acct, SIK: sk}
	if err := ledgertest.InFlight(ctx, store, ledger.NewIntent{Key: k, Rail: "stripe", Action: "refund", Subject: "pi_a", AmountMinor: 1,
		Currency: "USD", Canonical: "{}", AgentID: mine}, k.SIK); err != nil {
		t.Fatal(err)
	}
	// Its birth and its answer: two records, so the next checkpoint is two
	// larger and first.Records+1 is a size no checkpoint has.
	if _, err := store.Commit(ctx, ledger.AttemptResult{Key: k, Seq: 1, Outcome: ledger.OutcomeApplied, EntityID: "re_a", Reason: "applied"}); err != nil {
		t.Fatal(err)
	}
	late, err := s.ListAuditRecords(as("own_a"), &countersignv1.ListAuditRecordsRequest{RailAccount: acct, Sik: sk})
	if err != nil || len(late.GetAuditRecords()) == 0 {
		t.Fatalf("list the new intent: %v, %v", late, err)
	}
	unsealed := late.GetAuditRecords()[0].GetRecordId()
	if _, err := s.GetAuditInclusionProof(as("own_a"), &countersignv1.GetAuditInclusionProofRequest{RecordId: unsealed}); code(err) != codes.FailedPrecondition {
		t.Fatalf("proof of an unsealed record: %v, want FailedPrecondition", err)
	}
	if _, err := store.Seal(ctx, signer); err != nil {
		t.Fatal(err)
	}

	// Every one of own_a's records has a proof against the latest
	// checkpoint and against the first, that verifies with tlog.
	for _, size := range []int64{0, first.Records} {
		for _, r := range append(recs, late.GetAuditRecords()...) {
			p, err := s.GetAuditInclusionProof(as("own_a"), &countersignv1.GetAuditInclusionProofRequest{RecordId: r.GetRecordId(), TreeSize: size})
			if size != 0 && r.GetRecordId() >= unsealed {
				if code(err) != codes.InvalidArgument {
					t.Fatalf("proof of a later record against the first checkpoint: %v", err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("record %d, size %d: %v", r.GetRecordId(), size, err)
			}
			c, err := audit.OpenCheckpoint(p.GetCheckpoint().GetNote(), verifier)
			if err != nil {
				t.Fatal(err)
			}
			proof, err := ProofHashes(p.GetProof())
			if err != nil {
				t.Fatal(err)
			}
			if err := tlog.CheckRecord(proof, c.Size, c.Root, p.GetRecord().GetLeafIndex(), RecordOf(p.GetRecord()).LeafHash()); err != nil {
				t.Fatalf("record %d: %v", r.GetRecordId(), err)
			}
			if siks[p.GetRecord().GetSik()] != mine && p.GetRecord().GetSik() != sk {
				t.Fatalf("proof of another owner's record %v", p.GetRecord())
			}
		}
	}
	cons, err := s.GetAuditConsistencyProof(as("own_b"), &countersignv1.GetAuditConsistencyProofRequest{RailAccount: acct, FromSize: first.Records})
	if err != nil {
		t.Fatal(err)
	}
	older, err := audit.OpenCheckpoint(cons.GetFrom().GetNote(), verifier)
	if err != nil {
		t.Fatal(err)
	}
	newer, err := audit.OpenCheckpoint(cons.GetTo().GetNote(), verifier)
	if err != nil {
		t.Fatal(err)
	}
	proof, err := ProofHashes(cons.GetProof())
	if err != nil {
		t.Fatal(err)
	}
	if err := tlog.CheckTree(proof, newer.Size, newer.Root, older.Size, older.Root); err != nil || newer.Size <= older.Size {
		t.Fatalf("consistency %d → %d: %v", older.Size, newer.Size, err)
	}

	// Refusals: another owner's record is NotFound (own_b shares the
	// account, own_c holds nothing); an account not held is
	// PermissionDenied; checkpoints that do not exist are NotFound.
	for _, o := range []string{"own_b", "own_c"} {
		if _, err := s.GetAuditInclusionProof(as(o), &countersignv1.GetAuditInclusionProofRequest{RecordId: recs[0].GetRecordId()}); code(err) != codes.NotFound {
			t.Fatalf("%s asks for own_a's record: %v, want NotFound", o, err)
		}
	}
	if _, err := s.GetAuditConsistencyProof(as("own_c"), &countersignv1.GetAuditConsistencyProofRequest{RailAccount: acct, FromSize: 1}); code(err) != codes.PermissionDenied {
		t.Fatalf("own_c asks for a consistency proof: %v, want PermissionDenied", err)
	}
	if _, err := s.GetAuditConsistencyProof(as("own_a"), &countersignv1.GetAuditConsistencyProofRequest{RailAccount: acct, FromSize: first.Records + 1}); code(err) != codes.NotFound {
		t.Fatalf("consistency from a size no checkpoint has: %v, want NotFound", err)
	}
	if _, err := s.GetAuditInclusionProof(as("own_a"), &countersignv1.GetAuditInclusionProofRequest{RecordId: recs[0].GetRecordId(), TreeSize: 2}); code(err) != codes.NotFound {
		t.Fatalf("inclusion in a size no checkpoint has: %v, want NotFound", err)
	}

	// Bad inputs are refused before the handler runs.
	validator, err := protovalidate.New()
	if err != nil {
		t.Fatal(err)
	}
	intercept := ValidationInterceptor(validator)
	for _, req := range []proto.Message{
		&countersignv1.GetAuditInclusionProofRequest{},
		&countersignv1.GetAuditInclusionProofRequest{RecordId: -1},
		&countersignv1.GetAuditInclusionProofRequest{RecordId: 1, TreeSize: -1},
		&countersignv1.GetAuditConsistencyProofRequest{RailAccount: acct},
		&countersignv1.GetAuditConsistencyProofRequest{FromSize: 1},
		&countersignv1.GetAuditConsistencyProofRequest{RailAccount: acct, FromSize: 5, ToSize: 3},
		&countersignv1.VerifyAuditRequest{RailAccount: acct, MaxUnsealedAge: durationpb.New(-time.Second)},
	} {
		_, err := intercept(as("own_a"), req, &grpc.UnaryServerInfo{}, func(context.Context, any) (any, error) {
			t.Fatalf("%T %v reached the handler", req, req)
			return nil, nil
		})
		if code(err) != codes.InvalidArgument {
			t.Fatalf("%T %v: %v, want InvalidArgument", req, req, err)
		}
	}
}

// TestOwnerAPIVerifyAuditRunsOneAtATime: while one verification runs in
// the server, another (of any owner) is refused at once with
// ResourceExhausted and AUDIT_VERIFY_BUSY, not queued; when it ends the
// next runs. Found by a review: every call loaded the whole log, so a
// burst of them OOM-killed the sidecar.
func TestOwnerAPIVerifyAuditRunsOneAtATime(t *testing.T) {
	ctx := context.Background()
	_, s, url, _, _, _ := auditFixture(t)
	_, verifier := testAuditKey(t)
	s.WithAuditVerifier(verifier)
	// No sequencer ran here (no heartbeat): no unsealed-age bound, so the
	// verifications find nothing wrong and only their concurrency is tested.
	req := &countersignv1.VerifyAuditRequest{RailAccount: acct, MaxUnsealedAge: durationpb.New(0)}
	// The server's clock, moved by hand: the first verification is made
	// to run for a minute.
	var clock atomic.Int64
	clock.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	s.now = func() time.Time { return time.Unix(0, clock.Load()) }
	advance := func(d time.Duration) { clock.Add(int64(d)) }
	// The first verification waits inside the server on a lock held here.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE audit_records IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	first := make(chan error, 1)
	go func() {
		v, err := s.VerifyAudit(as("own_a"), req)
		if err == nil && !v.GetOk() {
			err = fmt.Errorf("the first verification found problems: %v", v.GetProblems())
		}
		first <- err
	}()
	watch, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(ctx)
	if !wait.Until(10*time.Second, func() bool {
		var waiting bool
		err := watch.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE c.relname = 'audit_records' AND NOT l.granted)`).Scan(&waiting)
		return err == nil && waiting
	}) {
		t.Fatal("the first verification never reached the audit records")
	}
	for _, owner := range []string{"own_a", "own_b"} {
		start := time.Now()
		// A call that queued would wait on the lock: its deadline fails it.
		cctx, cancel := context.WithTimeout(as(owner), 5*time.Second)
		_, err := s.VerifyAudit(cctx, req)
		cancel()
		st, _ := status.FromError(err)
		reason := ""
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				reason = info.GetReason()
			}
		}
		if st.Code() != codes.ResourceExhausted || reason != "AUDIT_VERIFY_BUSY" || !strings.Contains(st.Message(), "one runs at a time") {
			t.Fatalf("%s's verification while another runs: %v (reason %q), want ResourceExhausted AUDIT_VERIFY_BUSY", owner, err, reason)
		}
		if el := time.Since(start); el > 5*time.Second {
			t.Fatalf("the refusal took %s: it waited", el)
		}
	}
	advance(time.Minute)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// own_a's verification ran a minute: its next may start a minute after
	// it ended, and other owners' at once.
	advance(59 * time.Second)
	_, err = s.VerifyAudit(as("own_a"), req)
	st, _ := status.FromError(err)
	var retry time.Duration
	reason := ""
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			reason = d.GetReason()
		case *errdetails.RetryInfo:
			retry = d.GetRetryDelay().AsDuration()
		}
	}
	if st.Code() != codes.ResourceExhausted || reason != "AUDIT_VERIFY_TOO_SOON" || retry != time.Second {
		t.Fatalf("own_a's next verification 59 s after its minute-long one ended: %v (reason %q, retry in %s), want ResourceExhausted AUDIT_VERIFY_TOO_SOON in 1s", err, reason, retry)
	}
	if v, err := s.VerifyAudit(as("own_b"), req); err != nil || !v.GetOk() {
		t.Fatalf("another owner's verification after the first ended = %v, %v", v, err)
	}
	// own_b's ran no time on this clock: it may verify again at once.
	if v, err := s.VerifyAudit(as("own_b"), req); err != nil || !v.GetOk() {
		t.Fatalf("a second short verification of the same owner = %v, %v", v, err)
	}
	advance(time.Second)
	if v, err := s.VerifyAudit(as("own_a"), req); err != nil || !v.GetOk() {
		t.Fatalf("own_a's verification once its turn came = %v, %v", v, err)
	}
}

// TestOwnerAPIVerifyAuditSaysAnIntentWasMoved: an intent moved to another
// owner's agent is reported to both owners (to the one it was moved to by
// its SIK), without naming either agent.
func TestOwnerAPIVerifyAuditSaysAnIntentWasMoved(t *testing.T) {
	ctx := context.Background()
	_, s, url, siks, mine, theirs := auditFixture(t)
	_, verifier := testAuditKey(t)
	s.WithAuditVerifier(verifier)
	var moved string
	for k, agent := range siks {
		if agent == theirs {
			moved = k
			break
		}
	}
	if n, err := pgxExec(ctx, url, `UPDATE intents SET agent_id = $2 WHERE rail_account = $3 AND sik = $1`, moved, mine, acct); err != nil || n != 1 {
		t.Fatalf("move the intent: %d, %v", n, err)
	}
	for owner, sik := range map[string]string{"own_a": moved, "own_b": ""} {
		v, err := s.VerifyAudit(as(owner), &countersignv1.VerifyAuditRequest{RailAccount: acct})
		if err != nil {
			t.Fatal(err)
		}
		if v.GetOk() || !hasProblem(v, string(ledger.AuditAgentMismatch), sik, "is not made by the agent its birth record names") {
			t.Fatalf("%s: problems %v do not say intent %q was moved", owner, v.GetProblems(), sik)
		}
		for _, p := range v.GetProblems() {
			if strings.Contains(p.GetProblem(), mine) || strings.Contains(p.GetProblem(), theirs) {
				t.Fatalf("%s: problem %q names an agent", owner, p.GetProblem())
			}
		}
	}
}
