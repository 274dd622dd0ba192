package gate

import (
	"testing"

	"pgregory.net/rapid"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

func TestVerdictNamesAndProto(t *testing.T) {
	for _, tc := range []struct {
		v     Verdict
		name  string
		proto countersignv1.Verdict
	}{
		{Block, "BLOCK", countersignv1.Verdict_VERDICT_BLOCK},
		{Hold, "HOLD", countersignv1.Verdict_VERDICT_HOLD},
		{Allow, "ALLOW", countersignv1.Verdict_VERDICT_ALLOW},
		{Verdict(7), "INVALID(7)", countersignv1.Verdict_VERDICT_BLOCK},
		{Verdict(-1), "INVALID(-1)", countersignv1.Verdict_VERDICT_BLOCK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.v.String(); got != tc.name {
				t.Errorf("String() = %q", got)
			}
			if got := tc.v.Proto(); got != tc.proto {
				t.Errorf("Proto() = %v, want %v", got, tc.proto)
			}
		})
	}
	var zero Verdict
	if zero != Block {
		t.Fatalf("the zero Verdict is %v; it must be BLOCK so an unset verdict denies", zero)
	}
	if Block >= Hold || Hold >= Allow {
		t.Fatal("want Block < Hold < Allow")
	}
}

func TestMeet(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []Verdict
		want Verdict
	}{
		{"none is the identity", nil, Allow},
		{"one", []Verdict{Hold}, Hold},
		{"allow and hold", []Verdict{Allow, Hold, Allow}, Hold},
		{"block absorbs", []Verdict{Allow, Block, Hold}, Block},
		{"out of range blocks", []Verdict{Allow, Verdict(3)}, Block},
		{"negative blocks", []Verdict{Allow, Verdict(-2)}, Block},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Meet(tc.in...); got != tc.want {
				t.Fatalf("Meet(%v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

var verdicts = rapid.SampledFrom([]Verdict{Block, Hold, Allow})

func TestMeetProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a, b, c := verdicts.Draw(t, "a"), verdicts.Draw(t, "b"), verdicts.Draw(t, "c")
		if Meet(a, b) != Meet(b, a) {
			t.Fatalf("not commutative: %v %v", a, b)
		}
		if Meet(Meet(a, b), c) != Meet(a, Meet(b, c)) || Meet(a, b, c) != Meet(Meet(a, b), c) {
			t.Fatalf("not associative: %v %v %v", a, b, c)
		}
		if Meet(a, Block) != Block || Meet(Block, a) != Block {
			t.Fatalf("BLOCK does not absorb %v", a)
		}
		if Meet(a, Allow) != a || Meet(Allow, a) != a {
			t.Fatalf("ALLOW is not the identity for %v", a)
		}
		if Meet(a, a) != a {
			t.Fatalf("not idempotent: %v", a)
		}
		if m := Meet(a, b); m > a || m > b {
			t.Fatalf("Meet(%v, %v) = %v is above an operand", a, b, m)
		}
		vs := rapid.SliceOf(verdicts).Draw(t, "vs")
		m := Meet(vs...)
		for _, v := range vs {
			if m > v {
				t.Fatalf("Meet(%v) = %v is above %v", vs, m, v)
			}
		}
		if len(vs) > 0 && !containsVerdict(vs, m) {
			t.Fatalf("Meet(%v) = %v is none of them", vs, m)
		}
	})
}

func containsVerdict(vs []Verdict, v Verdict) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

func TestLadder(t *testing.T) {
	v, rs := Ladder()
	seenCodes[ReasonNoGates] = true
	if v != Block || len(rs) != 1 || rs[0].ReasonCode != ReasonNoGates {
		t.Fatalf("empty ladder = %v %+v, want BLOCK no_gates", v, rs)
	}

	in := []Result{
		{Gate: GateScope, Verdict: Allow, ReasonCode: ReasonPassed},
		{Gate: GateValue, Verdict: Hold, ReasonCode: ReasonApprovalRequired},
		{Gate: GateLimits, Verdict: Verdict(9), ReasonCode: ReasonPassed, Reason: "looks fine"},
	}
	v, rs = Ladder(in...)
	seenCodes[ReasonVerdictInvalid] = true
	if v != Block {
		t.Fatalf("verdict %v, want BLOCK from the out-of-range result", v)
	}
	if len(rs) != 3 || rs[0] != in[0] || rs[1] != in[1] {
		t.Fatalf("results not kept in order: %+v", rs)
	}
	if rs[2].Verdict != Block || rs[2].ReasonCode != ReasonVerdictInvalid || rs[2].Gate != GateLimits {
		t.Fatalf("out-of-range result became %+v", rs[2])
	}
	rs[0].Reason = "changed"
	if in[0].Reason == "changed" {
		t.Fatal("Ladder returned the caller's slice")
	}
}

func TestPrimary(t *testing.T) {
	rs := []Result{
		{Gate: GateScope, Verdict: Hold, ReasonCode: ReasonCredentialProposeOnly},
		{Gate: GateValue, Verdict: Block, ReasonCode: ReasonCurrencyMismatch},
		{Gate: GateLimits, Verdict: Block, ReasonCode: ReasonBudgetExceeded},
	}
	if p := Primary(rs); p.ReasonCode != ReasonCurrencyMismatch {
		t.Fatalf("Primary = %+v, want the first BLOCK", p)
	}
	if p := Primary(rs[:1]); p.ReasonCode != ReasonCredentialProposeOnly {
		t.Fatalf("Primary = %+v, want the HOLD", p)
	}
	if p := Primary(nil); p.Verdict != Block || p.ReasonCode != ReasonNoGates {
		t.Fatalf("Primary(nil) = %+v", p)
	}
}

func TestResultProto(t *testing.T) {
	r := Result{Gate: GateValue, Verdict: Block, ReasonCode: ReasonAmountExceedsRefundable, Reason: "2,500.00 USD exceeds the 1,899.00 USD still refundable on pay_1002."}
	p := r.Proto()
	if p.GetGate() != r.Gate || p.GetVerdict() != countersignv1.Verdict_VERDICT_BLOCK || p.GetReasonCode() != r.ReasonCode || p.GetReason() != r.Reason {
		t.Fatalf("Proto() = %v", p)
	}
}

func TestResultReasonIsASentence(t *testing.T) {
	for _, tc := range []struct {
		r    Result
		want string
	}{
		{block(GateScope, ReasonMandateRevoked, "mandate %s was revoked.", "abc"), "Mandate abc was revoked."},
		{hold(GateLimits, ReasonApprovalRequired, "%d is ok", 5), "5 is ok"},
		{pass(GateValue, "éclair"), "Éclair"},
		{result(GateValue, Allow, ReasonPassed, ""), ""},
	} {
		if tc.r.Reason != tc.want {
			t.Errorf("reason %q, want %q", tc.r.Reason, tc.want)
		}
	}
}
