package cli

import (
	"bytes"
	"strings"
	"testing"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// unseen reports the first character of s a terminal would not print as
// itself (an escape, a line break inside a row, a bidi override, a C1
// control), or -1.
func unseen(s string) int {
	return strings.IndexFunc(s, func(r rune) bool {
		return r == 0x1b || r == '\r' || r == 0x07 || r == '\u202e' || r == '\u009b' || r == '\u200b'
	})
}

// An approval's fields are written so that nothing of them drives the
// owner's terminal: a decoy's subject that moves the cursor up and redraws
// the real hold's row for a smaller amount, or sets the clipboard, prints
// quoted (found by a review).
func TestApprovalOutputEscapesWhatTheAgentChose(t *testing.T) {
	real := &countersignv1.Approval{ApprovalId: "apr_real", Rail: countersignv1.Rail_RAIL_STRIPE,
		ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND, Subject: "pi_1", Amount: &countersignv1.Money{AmountMinor: 500000, Currency: "USD"}}
	evil := "acct_1\x1b[1A\r\x1b[2Kapr_real  PENDING  agt_1  refund  pi_1  5.00 USD  -\n\x1b]52;c;Y291bnRlcnNpZ24=\x07\u202e\u009b1A\u200b"
	decoy := &countersignv1.Approval{ApprovalId: "apr_decoy", Rail: countersignv1.Rail_RAIL_STRIPE,
		ActionKind: countersignv1.ActionKind_ACTION_KIND_TRANSFER, Subject: evil, Payee: evil + "x",
		Amount: &countersignv1.Money{AmountMinor: 500, Currency: "USD"}, CanonicalRequest: `{"extra":{"k":"` + evil + `"}}`,
		HeldBy: &countersignv1.GateResult{Gate: "G3_limits", Reason: "held:\n" + evil}, Note: evil}
	var list, get bytes.Buffer
	table(&list, "APPROVAL\tSUBJECT", [][]string{approvalRow(real), approvalRow(decoy)})
	printApproval(&get, decoy)
	for name, out := range map[string]string{"list": list.String(), "get": get.String(), "approve": shown(approvalWhat(decoy))} {
		if i := unseen(out); i >= 0 {
			t.Errorf("%s writes %q of what the agent chose raw: %q", name, out[i:min(len(out), i+8)], out)
		}
	}
	// Three lines: the header and one per approval; the decoy's line
	// break did not make a row of its own.
	if n := strings.Count(list.String(), "\n"); n != 3 {
		t.Errorf("the list has %d lines, want 3:\n%s", n, list.String())
	}
	// What prints as itself is left as it is.
	for _, s := range []string{"pi_1", "25.00 USD", "refund of 5.00 USD on pi_1", "Ünïcödé €", `"k"="v"`} {
		if got := shown(s); got != s {
			t.Errorf("shown(%q) = %q, want it unchanged", s, got)
		}
	}
}
