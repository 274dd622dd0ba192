package ledger

import (
	"context"
	"reflect"
	"testing"

	"github.com/countersign/countersign/internal/gate"
)

// A gate that passed is stored as its name alone and read back whole; any
// other result, and rows written whole before the short form, read back as
// they were.
func TestGateRecordsStoredShort(t *testing.T) {
	if GatePassed != gate.ReasonPassed {
		t.Fatalf("GatePassed = %q, gate.ReasonPassed = %q", GatePassed, gate.ReasonPassed)
	}
	s := openTest(t)
	ctx := context.Background()
	gates := []GateRecord{
		{Gate: "G1_scope", Verdict: "ALLOW", ReasonCode: "passed"},
		{Gate: "G5_advisory", Verdict: "HOLD", ReasonCode: "new_payee", Reason: "first payment to this payee"},
		{Gate: "G2_value", Verdict: "ALLOW", ReasonCode: "approved"},
		{Gate: "G3_limits", Verdict: "ALLOW", ReasonCode: "passed", Reason: "a sentence kept"},
		{Gate: "G4_once", Verdict: "BLOCK", ReasonCode: "passed"},
	}
	if _, err := s.RecordDecision(ctx, Decision{RequestID: "short", Source: "ext_authz", Verdict: "BLOCK",
		ReasonCode: "x", Reason: "x", Gates: gates}); err != nil {
		t.Fatal(err)
	}
	var stored string
	if err := s.pool.QueryRow(ctx, `SELECT gates::text FROM decisions WHERE request_id = 'short'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	want := `[{"gate": "G1_scope"}, {"gate": "G5_advisory", "reason": "first payment to this payee", "verdict": "HOLD", "reason_code": "new_payee"}, ` +
		`{"gate": "G2_value", "verdict": "ALLOW", "reason_code": "approved"}, {"gate": "G3_limits", "reason": "a sentence kept", "verdict": "ALLOW", "reason_code": "passed"}, ` +
		`{"gate": "G4_once", "verdict": "BLOCK", "reason_code": "passed"}]`
	if stored != want {
		t.Errorf("stored gates\n %s\nwant\n %s", stored, want)
	}
	// A row of the whole form, as every row was before.
	if _, err := s.pool.Exec(ctx, `INSERT INTO decisions (request_id, source, verdict, reason_code, reason, method, host, path, gates)
		VALUES ('whole', 'ext_authz', 'ALLOW', 'allowed', 'x', 'POST', 'h', '/', '[{"gate": "G1_scope", "verdict": "ALLOW", "reason_code": "passed"}]')`); err != nil {
		t.Fatal(err)
	}
	for req, want := range map[string][]GateRecord{"short": gates, "whole": gates[:1]} {
		got, err := s.DecisionsByRequest(ctx, req)
		if err != nil || len(got) != 1 {
			t.Fatalf("%s: DecisionsByRequest = %+v, %v", req, got, err)
		}
		if !reflect.DeepEqual(got[0].Gates, want) {
			t.Errorf("%s: gates read back\n %+v\nwant\n %+v", req, got[0].Gates, want)
		}
	}
	// A result with nothing to say would read back as passed: refused.
	if _, err := s.RecordDecision(ctx, Decision{RequestID: "empty", Source: "ext_authz", Verdict: "BLOCK",
		ReasonCode: "x", Reason: "x", Gates: []GateRecord{{Gate: "G1_scope"}}}); err == nil {
		t.Error("a gate result with no verdict, reason code or reason was stored")
	}
}
