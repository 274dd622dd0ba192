package gate

import (
	"testing"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// fixed is a test advisor that always answers o and counts its calls.
type fixed struct {
	name  string
	o     *Objection
	calls *int
}

func (f fixed) Name() string { return f.name }
func (f fixed) Advise(Input) *Objection {
	if f.calls != nil {
		*f.calls++
	}
	return f.o
}

type panicky struct{}

func (panicky) Name() string            { return "panicky" }
func (panicky) Advise(Input) *Objection { panic("model timed out") }

func TestCheckAdvisory(t *testing.T) {
	enable := func(in *Input, gates ...string) {
		in.Mandate.Advisory = &countersignv1.AdvisorySettings{Enabled: true, Gates: gates}
	}
	newPayee := func(in *Input) { enable(in); in.PayeeSeenBefore = false }
	cases := []struct {
		gateCase
		advisors []Advisor
	}{
		{gateCase{name: "off by default", mod: func(in *Input) { in.PayeeSeenBefore = false }, verdict: Allow, code: ReasonPassed, contains: []string{"off"}}, []Advisor{NewPayee{}}},
		{gateCase{name: "off without a mandate", mod: func(in *Input) { in.Mandate = nil }, verdict: Allow, code: ReasonPassed}, []Advisor{fixed{"no", BlockFor("no", "no"), nil}}},
		{gateCase{name: "known payee", mod: func(in *Input) { enable(in) }, verdict: Allow, code: ReasonPassed, contains: []string{"1 ran"}}, []Advisor{NewPayee{}}},
		{gateCase{name: "new payee is held", mod: newPayee, verdict: Hold, code: ReasonNewPayee,
			contains: []string{"Advisory gate new_payee objected: ba_1 has never been paid from acct_1", "first payment of 10,000.00 USD, so", "send the identical request again"}}, []Advisor{NewPayee{}}},
		{gateCase{name: "refund to a new payer passes", mod: func(in *Input) { *in = refundIn(); enable(in) }, verdict: Allow, code: ReasonPassed}, []Advisor{NewPayee{}}},
		{gateCase{name: "new payee approved", mod: func(in *Input) { newPayee(in); approve(in) }, verdict: Allow, code: ReasonApproved, contains: []string{"new_payee"}}, []Advisor{NewPayee{}}},
		{gateCase{name: "block outranks hold", mod: newPayee, verdict: Block, code: "sanctioned_payee", contains: []string{"new_payee", "on a list"}},
			[]Advisor{NewPayee{}, fixed{"sanctions", BlockFor("sanctioned_payee", "ba_1 is on a list"), nil}}},
		{gateCase{name: "approval never lifts an advisory block", mod: func(in *Input) { enable(in); approve(in) }, verdict: Block, code: "sanctioned_payee"},
			[]Advisor{fixed{"sanctions", BlockFor("sanctioned_payee", "ba_1 is on a list"), nil}}},
		{gateCase{name: "only the listed advisors run", mod: func(in *Input) { enable(in, "new_payee"); in.PayeeSeenBefore = true }, verdict: Allow, code: ReasonPassed},
			[]Advisor{NewPayee{}, fixed{"sanctions", BlockFor("sanctioned_payee", "x"), nil}}},
		{gateCase{name: "listed advisor missing", mod: func(in *Input) { enable(in, "new_payee", "velocity") }, verdict: Block, code: ReasonAdvisoryGateUnknown, contains: []string{`"velocity"`}},
			[]Advisor{NewPayee{}}},
		{gateCase{name: "advisor panics", mod: func(in *Input) { enable(in) }, verdict: Block, code: ReasonAdvisoryFailed, contains: []string{"panicky", "model timed out"}},
			[]Advisor{panicky{}}},
		{gateCase{name: "zero objection blocks", mod: func(in *Input) { enable(in) }, verdict: Block, code: ReasonAdvisoryObjection, contains: []string{"without saying why"}},
			[]Advisor{fixed{"lazy", &Objection{}, nil}}},
	}
	for _, tc := range cases {
		runGate(t, payoutIn, func(in Input) Result { return CheckAdvisory(in, tc.advisors...) }, GateAdvisory, []gateCase{tc.gateCase})
	}
}

func TestEvaluateSkipsAdvisorsAfterBlock(t *testing.T) {
	calls := 0
	in := payoutIn()
	in.Mandate.Advisory = &countersignv1.AdvisorySettings{Enabled: true}
	in.Action.Payee = "ba_9" // off the allowlist: G2 blocks
	v, rs := Evaluate(in, fixed{"counting", HoldFor("x", "x"), &calls})
	if v != Block || calls != 0 {
		t.Fatalf("verdict %v after %d advisor calls; want BLOCK without asking the advisor", v, calls)
	}
	if g5 := rs[4]; g5.Gate != GateAdvisory || g5.Verdict != Block || g5.ReasonCode != ReasonNotEvaluated {
		t.Fatalf("G5 = %+v", g5)
	}
	in.Action.Payee = "ba_1"
	if v, _ := Evaluate(in, fixed{"counting", HoldFor("x", "x"), &calls}); v != Hold || calls != 1 {
		t.Fatalf("verdict %v after %d advisor calls; want HOLD after one", v, calls)
	}
}
