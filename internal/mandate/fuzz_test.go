package mandate

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary bytes to the parser of owner-supplied YAML. It
// must never panic, must explain every rejection with a located problem,
// and a mandate it accepts must keep its hash through ToYAML and Parse and
// through Canonical and FromCanonical.
func FuzzParse(f *testing.F) {
	f.Add([]byte(validYAML))
	f.Add([]byte(smallYAML))
	for _, s := range []string{
		"", "rail: stripe\n", "- a\n", "a: &x [*x]\n", "rail: stripe\n---\nrail: mcp\n",
		"grants:\n  - {action_kind: refund, max_amount_minor: 1e3}\n",
		"provenance: {mcp_tool_description_hashes: {\"a[0]\": x}}\n",
		"provenance: {mcp_tool_entry_hashes: {\"a[0]\": x}, mcp_tools_list_hash: [x]}\n",
		"provenance:\n  mcp_tool_entry_hashes: {create_refund: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef}\n  mcp_tools_list_hash: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n",
		"valid_from: 2026-01-01T00:00:00.1234567Z\n",
		"\xff\xfe", "{rail: stripe, rail: stripe}",
	} {
		f.Add([]byte(s))
	}
	// Near-valid mandates the id, text and explicit-zero rules refuse.
	for _, e := range [][2]string{
		{"allowed_payees: [ba_1001, ba_1002]", "allowed_payees: [\"ba_1001\", \"ba_\u202e2001\"]"},
		{"allowed_payees: [ba_1001, ba_1002]", "allowed_payees: [\"ba_1001\", \"ba_1002\u200b\", \"ba_1003 \"]"},
		{"rail_account: acct_1Nv0FGQ9RKHgCVdK", "rail_account: \"acct_1Nv0\u202eFGQ9\""},
		{"purpose: Refunds and supplier payouts", "purpose: \"Refunds\\0 and \u2066payouts\\n\""},
		{"recurrence_limit: 2", "recurrence_limit: 0"},
		{"max_calls: 3", "max_calls: 0"},
	} {
		f.Add([]byte(strings.Replace(validYAML, e[0], e[1], 1)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Parse(data)
		if err != nil {
			var perr *Error
			if !errors.As(err, &perr) || len(perr.Problems) == 0 {
				t.Fatalf("rejection without problems: %v", err)
			}
			for _, p := range perr.Problems {
				if p.Line < 1 || p.Column < 1 || p.Message == "" {
					t.Fatalf("problem without a position or message: %#v", p)
				}
			}
			return
		}
		h, err := Hash(m)
		if err != nil {
			t.Fatalf("Hash of a parsed mandate: %v", err)
		}
		y, err := ToYAML(m)
		if err != nil {
			t.Fatalf("ToYAML: %v", err)
		}
		again, err := Parse(y)
		if err != nil {
			t.Fatalf("Parse(ToYAML(m)) = %v\n%s", err, y)
		}
		if h2, _ := Hash(again); h2 != h {
			t.Fatalf("hash changed through YAML: %s -> %s\n%s", h, h2, y)
		}
		c, err := Canonical(m)
		if err != nil {
			t.Fatal(err)
		}
		back, err := FromCanonical(c)
		if err != nil {
			t.Fatalf("FromCanonical(Canonical(m)) = %v", err)
		}
		if c2, _ := Canonical(back); !bytes.Equal(c, c2) {
			t.Fatalf("canonical form changed: %s -> %s", c, c2)
		}
	})
}
