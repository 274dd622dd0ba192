package gate

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/sik"
)

func TestCheckScope(t *testing.T) {
	propose := func(in *Input) { in.Credential.Scope = credential.ScopePropose }
	runGate(t, refundIn, CheckScope, GateScope, []gateCase{
		{name: "refund granted", verdict: Allow, code: ReasonPassed, contains: []string{"cred_1", "refund in USD"}},
		{name: "payout granted", mod: func(in *Input) { *in = payoutIn() }, verdict: Allow, code: ReasonPassed},
		{name: "no clock", mod: func(in *Input) { in.Now = time.Time{} }, verdict: Block, code: ReasonClockMissing},
		{name: "credential revoked", mod: func(in *Input) { in.Credential.Revoked = true }, verdict: Block, code: ReasonCredentialRevoked, contains: []string{"cred_1"}},
		{name: "credential expires this instant", mod: func(in *Input) { in.Credential.ExpiresAt = t0 }, verdict: Block, code: ReasonCredentialExpired, contains: []string{"2026-03-01T12:00:00Z"}},
		{name: "credential without expiry", mod: func(in *Input) { in.Credential.ExpiresAt = time.Time{} }, verdict: Block, code: ReasonCredentialExpired},
		{name: "credential scope unknown", mod: func(in *Input) { in.Credential.Scope = "admin" }, verdict: Block, code: ReasonCredentialScopeInvalid, contains: []string{`"admin"`}},
		{name: "agent revoked", mod: func(in *Input) { in.Agent.Revoked = true }, verdict: Block, code: ReasonAgentRevoked, contains: []string{"agt_1"}},
		{name: "no mandate", mod: func(in *Input) { in.Mandate = nil }, verdict: Block, code: ReasonMandateMissing, contains: []string{"agt_1", "acct_1"}},
		{name: "mandate revoked", mod: func(in *Input) { in.MandateRevoked = true }, verdict: Block, code: ReasonMandateRevoked, contains: []string{"mandate 3f9a0c1d2e4b"}},
		{name: "mandate without mode", mod: func(in *Input) { in.Mandate.Mode = 0 }, verdict: Block, code: ReasonMandateInvalid, contains: []string{"MANDATE_MODE_UNSPECIFIED"}},
		{name: "mandate without valid_from", mod: func(in *Input) { in.Mandate.ValidFrom = nil }, verdict: Block, code: ReasonMandateInvalid, contains: []string{"valid_from"}},
		{name: "mandate without valid_until", mod: func(in *Input) { in.Mandate.ValidUntil = nil }, verdict: Block, code: ReasonMandateInvalid, contains: []string{"valid_until"}},
		{name: "mandate ends before it starts", mod: func(in *Input) { in.Mandate.ValidUntil = timestamppb.New(t0.Add(-2 * day)) }, verdict: Block, code: ReasonMandateInvalid},
		{name: "mandate not yet valid", mod: func(in *Input) { in.Mandate.ValidFrom = timestamppb.New(t0.Add(time.Second)) }, verdict: Block, code: ReasonMandateNotYetValid, contains: []string{"2026-03-01T12:00:01Z"}},
		{name: "mandate valid from this instant", mod: func(in *Input) { in.Mandate.ValidFrom = timestamppb.New(t0) }, verdict: Allow, code: ReasonPassed},
		{name: "mandate ends this instant", mod: func(in *Input) { in.Mandate.ValidUntil = timestamppb.New(t0) }, verdict: Block, code: ReasonMandateExpired, contains: []string{"2026-03-01T12:00:00Z"}},
		{name: "mandate for another agent", mod: func(in *Input) { in.Mandate.AgentId = "agt_2" }, verdict: Block, code: ReasonMandateWrongAgent, contains: []string{"agt_2", "agt_1"}},
		{name: "mandate for another account", mod: func(in *Input) { in.RailAccount = "acct_2" }, verdict: Block, code: ReasonMandateWrongRailAccount, contains: []string{"acct_1", "acct_2"}},
		{name: "mandate for another rail", mod: func(in *Input) { in.Rail = sik.RailRazorpay }, verdict: Block, code: ReasonMandateWrongRailAccount, contains: []string{"RAIL_STRIPE", "razorpay"}},
		{name: "transfer not granted", mod: func(in *Input) { in.Action.Kind = sik.KindTransfer }, verdict: Block, code: ReasonActionNotGranted, contains: []string{"transfer"}},
		{name: "unknown kind not granted", mod: func(in *Input) { in.Action.Kind = "chargeback" }, verdict: Block, code: ReasonActionNotGranted},
		{name: "currency not granted", mod: func(in *Input) { in.Action.Currency = "EUR" }, verdict: Block, code: ReasonCurrencyNotGranted, contains: []string{"EUR", "[USD]"}},
		{name: "irreversible under a reversible grant", mod: func(in *Input) {
			*in = payoutIn()
			in.Mandate.Grants[1].Reversible = true
		}, verdict: Block, code: ReasonActionNotReversible},
		{name: "reversible under a reversible grant", mod: func(in *Input) {
			*in = payoutIn()
			in.Mandate.Grants[1].Reversible, in.Action.Reversible = true, true
		}, verdict: Allow, code: ReasonPassed},
		{name: "propose-only credential is held", mod: propose, verdict: Hold, code: ReasonCredentialProposeOnly, contains: []string{"cred_1", "send the identical request again"}},
		{name: "propose-only credential with approval", mod: func(in *Input) { propose(in); approve(in) }, verdict: Allow, code: ReasonApproved},
		{name: "propose-only credential, approval expired", mod: func(in *Input) {
			propose(in)
			approve(in)
			in.ApprovalExpiresAt = t0
		}, verdict: Hold, code: ReasonCredentialProposeOnly, contains: []string{"expired"}},
		{name: "propose-only credential still blocked by an expired mandate", mod: func(in *Input) {
			propose(in)
			approve(in)
			in.Mandate.ValidUntil = timestamppb.New(t0)
		}, verdict: Block, code: ReasonMandateExpired},
	})
}

func TestValidityAcceptsOnlyKnownModes(t *testing.T) {
	for mode := range countersignv1.MandateMode_name {
		m := testMandate()
		m.Mode = countersignv1.MandateMode(mode)
		_, _, problem := validity(m)
		want := mode == int32(countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED) || mode == int32(countersignv1.MandateMode_MANDATE_MODE_BUDGETED)
		if (problem == "") != want {
			t.Errorf("mode %v: problem %q", m.Mode, problem)
		}
	}
}
