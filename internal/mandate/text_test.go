package mandate

import (
	"errors"
	"strings"
	"testing"

	"buf.build/go/protovalidate"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/proto"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// TestRealIDsAndTextAccepted: the id and text rules refuse no id a rail
// hands out or the gates compare (payees are the rails' [A-Za-z0-9_] ids,
// internal/rail/*/parse.go isID; rail accounts are internal/rails'
// [A-Za-z0-9_.:-]) and no text a person writes.
func TestRealIDsAndTextAccepted(t *testing.T) {
	payees := []string{
		"ba_1NvABC2eZvKYlo2C0aBcDeFg",  // Stripe bank account
		"card_1NvABC2eZvKYlo2Cxyz",     // Stripe debit card
		"acct_1Nv0FGQ9RKHgCVdK",        // Stripe connected account (transfers)
		"fa_00000000000001",            // Razorpay fund account
		"cont_00000000000001",          // Razorpay contact
		"name@okbank",                  // a UPI address
		"payee+ops@example.com",        // an account email
		"urn:acct:payee-1.eu",          // another rail's id form
		strings.Repeat("a", 255),       // the longest
		"ba_" + strings.Repeat("9", 9), // digits
	}
	accounts := []string{"acct_1Nv0FGQ9RKHgCVdK", "rzp_test_acct", "mcp:payments.example", "acct-eu.1"}
	purposes := []string{
		"Refunds and supplier payouts",
		"Remboursements d’été — 返金処理 (≤ 500 €) 🙂",
		"Zahlungen an Lieferanten: Müller & Söhne, Q3/2026",
		"café with a combining accent: cafe\u0301",
		"non-breaking\u00a0space",
	}
	for i := range max(len(payees), len(accounts), len(purposes)) {
		m, err := Parse([]byte(validYAML))
		if err != nil {
			t.Fatal(err)
		}
		if i < len(payees) {
			m.AllowedPayees = []string{payees[i]}
		}
		if i < len(accounts) {
			m.RailAccount = accounts[i]
		}
		if i < len(purposes) {
			m.Purpose = purposes[i]
		}
		m.Provenance.ApiVersion = "2024-06-20; example_beta=v1"
		m.Provenance.RailHost = "api.stripe.com:443"
		if err := Validate(m); err != nil {
			t.Errorf("Validate refuses a real mandate: %v", err)
			continue
		}
		y, err := ToYAML(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(y); err != nil {
			t.Errorf("Parse(ToYAML) refuses a real mandate: %v\n%s", err, y)
		}
	}
}

// TestTextRulesInProtoAndGo: each rule is the proto's too (an API client
// and the server's request validator refuse what Parse refuses), and Parse
// and Validate report it once, with the Go check's precise message, not
// again as protovalidate's.
func TestTextRulesInProtoAndGo(t *testing.T) {
	cases := []struct {
		rule, field string
		set         func(*countersignv1.Mandate)
	}{
		{"mandate.payee_id", "allowed_payees[1]", func(m *countersignv1.Mandate) { m.AllowedPayees[1] = "ba_\u202e2001" }},
		{"mandate.payee_id", "allowed_payees[0]", func(m *countersignv1.Mandate) { m.AllowedPayees[0] = "ba_1001\u200b" }},
		{"mandate.payee_id", "allowed_payees[0]", func(m *countersignv1.Mandate) { m.AllowedPayees[0] = "ba_1001 " }},
		{"mandate.rail_account", "rail_account", func(m *countersignv1.Mandate) { m.RailAccount = "acct_1Nv0\u202eFGQ9" }},
		{"mandate.text", "purpose", func(m *countersignv1.Mandate) { m.Purpose = "Refunds\x00 and payouts" }},
		{"mandate.text", "purpose", func(m *countersignv1.Mandate) { m.Purpose = "Refunds\u2066 and payouts" }},
		{"mandate.text", "purpose", func(m *countersignv1.Mandate) { m.Purpose = "Refunds\nand payouts" }},
		{"mandate.rail_host", "provenance.rail_host", func(m *countersignv1.Mandate) { m.Provenance.RailHost = "api.stripe.com\u200b" }},
		{"mandate.api_version", "provenance.api_version", func(m *countersignv1.Mandate) { m.Provenance.ApiVersion = "2024-06-20\x7f" }},
	}
	base, err := Parse([]byte(validYAML))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.field+" "+tc.rule, func(t *testing.T) {
			m := proto.CloneOf(base)
			tc.set(m)
			var verr *protovalidate.ValidationError
			if err := protovalidate.Validate(m); !errors.As(err, &verr) || len(verr.Violations) != 1 || verr.Violations[0].Proto.GetRuleId() != tc.rule {
				t.Errorf("protovalidate = %v, want one %s violation", err, tc.rule)
			}
			err := Validate(m)
			var merr *Error
			if !errors.As(err, &merr) || len(merr.Problems) != 1 {
				t.Fatalf("Validate = %v, want one problem", err)
			}
			p := merr.Problems[0]
			if p.Rule != tc.rule || p.Field != tc.field || p.Line != 0 || !strings.Contains(p.Message, " it holds ") {
				t.Errorf("problem = %#v, want the Go check's %s on %s without a line", p, tc.rule, tc.field)
			}
		})
	}
}

// TestStoredMandateStaysReadable: a mandate stored before these rules
// (its payee holds a bidi override) still decodes from its canonical form,
// as the engine reads it at decision time (FromCanonical does not
// validate), keeps its hash, and is shown to the owner with the hidden
// character escaped, not as the payee it imitates.
func TestStoredMandateStaysReadable(t *testing.T) {
	old, err := Parse([]byte(validYAML))
	if err != nil {
		t.Fatal(err)
	}
	old.AllowedPayees = []string{"ba_1001", "ba_\u202e2001"}
	old.Purpose = "Refunds\u200b and payouts\x00"
	if Validate(old) == nil {
		t.Fatal("Validate accepts the old mandate; the test no longer shows a stored mandate the rules refuse")
	}
	c, err := Canonical(old)
	if err != nil {
		t.Fatal(err)
	}
	back, err := FromCanonical(c)
	if err != nil {
		t.Fatalf("FromCanonical of a mandate stored under older rules: %v", err)
	}
	if hashOf(t, back) != hashOf(t, old) || back.GetAllowedPayees()[1] != "ba_\u202e2001" {
		t.Fatalf("the stored mandate changed: %v", back)
	}
	y, err := ToYAML(back)
	if err != nil {
		t.Fatalf("ToYAML: %v", err)
	}
	for _, want := range []string{`"ba_\u202E2001"`, `purpose: "Refunds\u200B and payouts\0"`} {
		if !strings.Contains(string(y), want) {
			t.Errorf("ToYAML does not show %s:\n%s", want, y)
		}
	}
	if strings.ContainsRune(string(y), '\u202e') || strings.ContainsRune(string(y), '\u200b') {
		t.Errorf("ToYAML writes an invisible character raw:\n%q", y)
	}
	// The escapes mean the same characters: the YAML still names this
	// mandate (and Parse refuses it, under today's rules).
	var perr *Error
	if _, err := Parse(y); !errors.As(err, &perr) {
		t.Fatalf("Parse(ToYAML(old)) = %v, want the rules' refusal", err)
	}
	root, problems := decodeDocument(y)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	p := &parser{root: root, nodes: map[string]*yaml.Node{}}
	again := &countersignv1.Mandate{}
	p.message(root, "", again.ProtoReflect())
	if len(p.problems) > 0 || hashOf(t, again) != HashCanonical(c) {
		t.Errorf("the shown YAML reads back as another mandate: %v, %v", p.problems, again)
	}
}

func hashOf(t *testing.T, m *countersignv1.Mandate) string {
	t.Helper()
	h, err := Hash(m)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
