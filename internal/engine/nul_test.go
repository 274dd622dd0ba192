package engine

import (
	"context"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// TestANULInTheActionIsRefusedNamingIt: PostgreSQL's text holds no U+0000,
// so an action holding one (in its subject, currency, payee, distinct
// reason, or any member's name or value) could not be keyed or recorded:
// it is refused as invalid, naming where, before anything is read or
// written — not denied as a ledger failure, nor allowed with the character
// in its key (found by a review: a subject with one was answered "could
// not record its decision", an extra member's was allowed).
func TestANULInTheActionIsRefusedNamingIt(t *testing.T) {
	r := newRig(t)
	amount := int64(500)
	for _, tc := range []struct {
		name string
		a    rail.Action
		says string
	}{
		{"subject", rail.Action{Subject: "pi_1\x00"}, "the subject"},
		{"currency", rail.Action{Subject: "pi_1", Currency: "US\x00D"}, "the currency"},
		{"distinct", rail.Action{Subject: "pi_1", Distinct: "x\x00y"}, "the distinct reason"},
		{"extra value", rail.Action{Subject: "pi_1", Extra: map[string]string{"reason": "a\x00b"}}, `member "reason"`},
		{"extra name", rail.Action{Subject: "pi_1", Extra: map[string]string{"re\x00ason": "x"}}, `member "re\x00ason"`},
		{"label value", rail.Action{Subject: "pi_1", Labels: map[string]rail.Label{"metadata[k]": {Value: "v\x00"}}}, `member "metadata[k]"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tc.a
			a.Kind, a.AmountMinor = sik.KindRefund, &amount
			out := r.e.DecideAction(context.Background(), Request{Source: SourceDecide, RequestID: "nul-" + tc.name, Credential: r.secret}, "acct_1", a)
			if out.Verdict != Block || out.ReasonCode != ReasonInvalidAction || !strings.Contains(out.Reason, tc.says) || !strings.Contains(out.Reason, "NUL") {
				t.Fatalf("%s %s: %s; want invalid_action naming %s", out.Verdict, out.ReasonCode, out.Reason, tc.says)
			}
		})
	}
}
