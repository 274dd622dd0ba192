package api

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/testing/ledgertest"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

func TestOwnerAPIListsAndVerifiesTheAudit(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	store, err := ledger.Open(ctx, url, ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	s := NewOwnerServer(store, func(ctx context.Context) (string, error) {
		o, _ := ctx.Value(ownerKey{}).(string)
		return o, nil
	})
	const acct = "acct_audit"
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
	mine, theirs := agentOf("own_a", true), agentOf("own_b", false)
	siks := map[string]string{} // sik → agent
	for i := range 12 {
		agent := mine
		if i%3 == 2 {
			agent = theirs
		}
		sk := strings.NewReplacer("0", "A", "1", "B", "2", "C", "3", "D", "4", "E", "5", "F", "6", "G", "7", "H", "8", "I", "9", "J").
			Replace(fmt.Sprintf("AUDITSIK%024d", i))
		k := ledger.Key{RailAccount: acct, SIK: sk}
		if err := ledgertest.InFlight(ctx, store, ledger.NewIntent{Key: k, Rail: "stripe", Action: "refund", Subject: "pi_a", AmountMinor: 1,
			Currency: "USD", Canonical: "{}", AgentID: agent}, k.SIK); err != nil {
			t.Fatal(err)
		}
		siks[sk] = agent
	}

	// Every record of own_a's intents, none of own_b's, chain by chain in
	// sequence order, across pages.
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
		if !strings.HasPrefix(r.GetChain(), acct+"#") || len(r.GetHash()) != 64 || len(r.GetPayloadHash()) != 64 || r.GetToState() == countersignv1.IntentState_INTENT_STATE_UNSPECIFIED {
			t.Fatalf("record %d: %v", i, r)
		}
		if i > 0 {
			p := got[i-1]
			if p.GetChain() > r.GetChain() || (p.GetChain() == r.GetChain() && p.GetSeq() >= r.GetSeq()) {
				t.Fatalf("records %d and %d out of order: %s#%d, %s#%d", i-1, i, p.GetChain(), p.GetSeq(), r.GetChain(), r.GetSeq())
			}
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

	// Verification covers every record on the account's chains.
	v, err := s.VerifyAudit(as("own_a"), &countersignv1.VerifyAuditRequest{RailAccount: acct})
	if err != nil || !v.GetOk() || v.GetChainsChecked() < 1 || v.GetRecordsChecked() <= int64(len(got)) {
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
	if _, err := tx.Exec(ctx, `UPDATE audit_records SET detail = 'edited' WHERE chain = $1 AND seq = $2`, got[0].GetChain(), got[0].GetSeq()); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	v, err = s.VerifyAudit(as("own_a"), &countersignv1.VerifyAuditRequest{RailAccount: acct})
	if err != nil || v.GetOk() || len(v.GetBreaks()) != 1 || v.GetBreaks()[0].GetChain() != got[0].GetChain() || v.GetBreaks()[0].GetSeq() != got[0].GetSeq() {
		t.Fatalf("after editing %s#%d: %v, %v", got[0].GetChain(), got[0].GetSeq(), v, err)
	}
}
