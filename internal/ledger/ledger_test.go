package ledger

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

func TestReadyTracksSchema(t *testing.T) {
	ctx := context.Background()
	c := pgtest.NewCluster(t)
	if err := c.CreateDatabase(ctx, "fresh", ""); err != nil {
		t.Fatal(err)
	}
	url := c.URL("fresh")
	s, err := Open(ctx, url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ready(ctx); !errors.Is(err, ErrSchemaBehind) {
		t.Fatalf("Ready on empty database = %v, want ErrSchemaBehind", err)
	}
	res, err := Migrate(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) == 0 || res[len(res)-1].Version != LatestVersion() {
		t.Fatalf("migrate applied %+v, want up to %d", res, LatestVersion())
	}
	if err := s.Ready(ctx); err != nil {
		t.Fatalf("Ready after migrate = %v", err)
	}
	// Migrating again is a no-op.
	if res, err := Migrate(ctx, url, nil); err != nil || len(res) != 0 {
		t.Fatalf("second migrate = %v, %v; want nothing applied", res, err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Ready with postgres stopped = %v, want ErrUnavailable", err)
	}
}

func TestInTxRetriesSerializationFailures(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	agent, err := s.CreateAgent(ctx, "own_1", "retry")
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	err = s.InTx(ctx, func(tx *Tx) error {
		n := calls.Add(1)
		if _, err := tx.tx.Exec(ctx, `UPDATE agents SET name = name || 'x' WHERE id = $1`, agent.ID); err != nil {
			return err
		}
		if n < 3 {
			return &pgconn.PgError{Code: "40001", Message: "could not serialize access"}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("InTx = %v", err)
	}
	if calls.Load() != 3 {
		t.Fatalf("callback ran %d times, want 3", calls.Load())
	}
	var name string
	if err := s.pool.QueryRow(ctx, `SELECT name FROM agents WHERE id = $1`, agent.ID).Scan(&name); err != nil {
		t.Fatal(err)
	}
	if name != "retryx" {
		t.Fatalf("name = %q: rolled-back attempts leaked their writes", name)
	}
}

func TestInTxDoesNotRetryOtherErrors(t *testing.T) {
	s := openTest(t)
	boom := errors.New("boom")
	calls := 0
	err := s.InTx(context.Background(), func(*Tx) error { calls++; return boom })
	if !errors.Is(err, boom) || calls != 1 {
		t.Fatalf("InTx = %v after %d calls, want boom after 1", err, calls)
	}
}

func TestDecisionsAreAppendOnly(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	id, err := s.RecordDecision(ctx, Decision{RequestID: "r1", Source: "ext_authz", Verdict: "BLOCK",
		ReasonCode: "credential_missing", Reason: "no credential", Gates: []GateRecord{{Gate: "G1", Verdict: "BLOCK", ReasonCode: "credential_missing"}}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.DecisionsByRequest(ctx, "r1")
	if err != nil || len(got) != 1 || got[0].ID != id || got[0].Gates[0].Gate != "G1" {
		t.Fatalf("DecisionsByRequest = %+v, %v", got, err)
	}
	for _, stmt := range []string{
		`UPDATE decisions SET verdict = 'ALLOW'`,
		`DELETE FROM decisions`,
		`TRUNCATE decisions`,
	} {
		if _, err := s.pool.Exec(ctx, stmt); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: err = %v, want append-only refusal", stmt, err)
		}
	}
}

func TestDecisionChecks(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	cases := []struct {
		name string
		d    Decision
	}{
		{"unknown verdict", Decision{RequestID: "r", Source: "ext_authz", Verdict: "MAYBE", ReasonCode: "x", Reason: "x"}},
		{"unknown source", Decision{RequestID: "r", Source: "carrier_pigeon", Verdict: "BLOCK", ReasonCode: "x", Reason: "x"}},
		{"bad reason code", Decision{RequestID: "r", Source: "decide", Verdict: "BLOCK", ReasonCode: "Not A Code", Reason: "x"}},
		{"credential without agent", Decision{RequestID: "r", Source: "decide", Verdict: "BLOCK", ReasonCode: "x", Reason: "x", CredentialID: "crd_aaaaaaaaaaaaaaaaaaaa"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.RecordDecision(ctx, tc.d); err == nil {
				t.Fatal("the database accepted an invalid decision")
			}
		})
	}
}

func TestCredentialLifecycle(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	agent, err := s.CreateAgent(ctx, "own_1", "refund-bot")
	if err != nil {
		t.Fatal(err)
	}
	secret, hash, err := credential.Generate()
	if err != nil {
		t.Fatal(err)
	}
	cred, err := s.IssueCredential(ctx, agent.ID, credential.ScopeExecute, time.Now().Add(time.Hour), hash)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := credential.Hash(secret)
	p, err := s.LookupCredential(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	if p.Credential.ID != cred.ID || p.Agent.ID != agent.ID || p.Agent.Revoked || p.Credential.RevokedAt != nil || p.Credential.Scope != credential.ScopeExecute {
		t.Fatalf("lookup = %+v", p)
	}
	if _, err := s.LookupCredential(ctx, [32]byte{1}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown hash lookup = %v, want ErrNotFound", err)
	}
	if _, err := s.IssueCredential(ctx, agent.ID, "admin", time.Now().Add(time.Hour), [32]byte{2}); err == nil {
		t.Fatal("unknown scope accepted")
	}
	if _, err := s.IssueCredential(ctx, agent.ID, credential.ScopePropose, time.Now().Add(-time.Hour), [32]byte{3}); err == nil {
		t.Fatal("credential expiring before creation accepted")
	}
	if err := s.RevokeCredential(ctx, cred.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.RevokeCredential(ctx, cred.ID); err != nil {
		t.Fatalf("second revoke = %v, want no-op", err)
	}
	if p, err = s.LookupCredential(ctx, h); err != nil || p.Credential.RevokedAt == nil {
		t.Fatalf("after revoke: %+v, %v", p, err)
	}
	// The database itself refuses to un-revoke.
	if _, err := s.pool.Exec(ctx, `UPDATE credentials SET revoked_at = NULL WHERE id = $1`, cred.ID); err == nil || !strings.Contains(err.Error(), "one-way") {
		t.Fatalf("un-revoke err = %v, want one-way refusal", err)
	}
	if err := s.RevokeAgent(ctx, agent.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `UPDATE agents SET status = 'active', revoked_at = NULL WHERE id = $1`, agent.ID); err == nil {
		t.Fatal("agent un-revoked")
	}
	if _, err := s.IssueCredential(ctx, agent.ID, credential.ScopeExecute, time.Now().Add(time.Hour), [32]byte{4}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("credential for revoked agent = %v, want ErrNotFound", err)
	}
	if err := s.RevokeAgent(ctx, "agt_doesnotexist0000000"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoke unknown agent = %v", err)
	}
}
