package mandate

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
)

const smallYAML = `rail: razorpay
rail_account: acc_Abc
agent_id: agt_aaaaaaaa
purpose: p
valid_from: 2026-01-01T00:00:00Z
valid_until: 2026-02-01T00:00:00Z
mode: approval_required
grants:
  - {action_kind: refund, max_amount_minor: 100, currencies: [INR]}
`

// TestCanonicalGolden pins the canonical form and hash: mandates stored by
// one version must keep their identity in the next, so a change here is a
// breaking change to every stored mandate.
func TestCanonicalGolden(t *testing.T) {
	m, err := Parse([]byte(smallYAML))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Canonical(m)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"agent_id":"agt_aaaaaaaa","grants":[{"action_kind":"ACTION_KIND_REFUND","currencies":["INR"],"max_amount_minor":"100"}],` +
		`"mode":"MANDATE_MODE_APPROVAL_REQUIRED","purpose":"p","rail":"RAIL_RAZORPAY","rail_account":"acc_Abc",` +
		`"valid_from":"2026-01-01T00:00:00Z","valid_until":"2026-02-01T00:00:00Z"}`
	if string(c) != want {
		t.Errorf("Canonical =\n%s\nwant\n%s", c, want)
	}
	h, err := Hash(m)
	if err != nil {
		t.Fatal(err)
	}
	if h != "d3462936900ae3d73343847e89a8efa0cc644f5691d52187322ab76518ac8ecc" {
		t.Errorf("Hash = %s", h)
	}
	if h != HashCanonical(c) || !ValidHash(h) {
		t.Errorf("Hash %s disagrees with HashCanonical %s or has the wrong shape", h, HashCanonical(c))
	}
}

func mustHash(t *testing.T, src string) string {
	t.Helper()
	m, err := Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, src)
	}
	h, err := Hash(m)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestHashIdentifiesThePolicy(t *testing.T) {
	base := mustHash(t, validYAML)
	same := []struct {
		name     string
		old, new string
	}{
		{"comments and blank lines", "mode: budgeted\n", "# pre-approved\n\nmode: budgeted # within limits\n"},
		{"key order", "rail: stripe\nrail_account: acct_1Nv0FGQ9RKHgCVdK\n", "rail_account: acct_1Nv0FGQ9RKHgCVdK\nrail: stripe\n"},
		{"quoted strings", "purpose: Refunds and supplier payouts", `purpose: "Refunds and supplier payouts"`},
		{"payee order", "[ba_1001, ba_1002]", "[ba_1002, ba_1001]"},
		{"block list", "allowed_payees: [ba_1001, ba_1002]", "allowed_payees:\n  - ba_1001\n  - ba_1002"},
		{"currency order", "currencies: [USD, EUR]", "currencies: [EUR, USD]"},
		{"flow mapping", "fee_budget: {amount_minor: 10000, currency: USD}", "fee_budget:\n  currency: USD\n  amount_minor: 10000"},
		{"days or hours", "duration: 7d", "duration: 168h"},
		{"time zone offset", "valid_from: 2026-01-01T00:00:00Z", "valid_from: 2026-01-01T05:30:00+05:30"},
		{"explicit false", "    currencies: [USD]\n", "    currencies: [USD]\n    reversible: false\n"},
		{"explicit zero", "    max_amount_minor: 50000\n", "    min_amount_minor: 0\n    max_amount_minor: 50000\n"},
		{"grant order", "grants:\n  - action_kind: refund\n    max_amount_minor: 50000\n    currencies: [USD]\n  - action_kind: payout\n    min_amount_minor: 100\n    max_amount_minor: 1000000\n    currencies: [USD, EUR]\n    reversible: true\n",
			"grants:\n  - action_kind: payout\n    min_amount_minor: 100\n    max_amount_minor: 1000000\n    currencies: [USD, EUR]\n    reversible: true\n  - action_kind: refund\n    max_amount_minor: 50000\n    currencies: [USD]\n"},
		{"window order", "  - scope: agent\n    duration: 24h\n    max_amount: {amount_minor: 2500000, currency: USD}\n  - scope: payee\n    duration: 7d\n    max_calls: 3\n",
			"  - scope: payee\n    duration: 7d\n    max_calls: 3\n  - scope: agent\n    duration: 24h\n    max_amount: {amount_minor: 2500000, currency: USD}\n"},
		{"idempotency order", "  - action_kind: refund\n  - action_kind: payout\n    window: 24h\n", "  - action_kind: payout\n    window: 24h\n  - action_kind: refund\n"},
	}
	t.Run("same/free_text allow is the default", func(t *testing.T) {
		if a, b := mustHash(t, strings.Replace(validYAML, "free_text: hold\n", "", 1)), mustHash(t, edit(t, "free_text: hold", "free_text: allow")); a != b {
			t.Errorf("free_text: allow hashed %s, no free_text %s; an existing mandate must keep its hash", b, a)
		}
	})
	for _, tc := range same {
		t.Run("same/"+tc.name, func(t *testing.T) {
			if h := mustHash(t, edit(t, tc.old, tc.new)); h != base {
				t.Errorf("hash changed: %s != %s", h, base)
			}
		})
	}
	different := []struct {
		name     string
		old, new string
	}{
		{"purpose", "purpose: Refunds and supplier payouts", "purpose: Refunds and supplier payouts."},
		{"one minor unit", "max_amount_minor: 50000", "max_amount_minor: 50001"},
		{"mode", "mode: budgeted", "mode: approval_required"},
		{"validity", "valid_until: 2026-04-01T00:00:00Z", "valid_until: 2026-04-01T00:00:01Z"},
		{"advisory gate order matters", "gates: [first_payee]", "gates: [first_payee, night_time]"},
		{"reversible", "    reversible: true\n", ""},
		{"payee", "[ba_1001, ba_1002]", "[ba_1001, ba_1003]"},
		{"free_text", "free_text: hold", "free_text: refuse"},
		{"free_text against the default", "free_text: hold", "free_text: allow"},
	}
	for _, tc := range different {
		t.Run("different/"+tc.name, func(t *testing.T) {
			if h := mustHash(t, edit(t, tc.old, tc.new)); h == base {
				t.Errorf("hash unchanged by %s", tc.name)
			}
		})
	}
	t.Run("advisory gates keep their order", func(t *testing.T) {
		a := mustHash(t, edit(t, "gates: [first_payee]", "gates: [first_payee, night_time]"))
		b := mustHash(t, edit(t, "gates: [first_payee]", "gates: [night_time, first_payee]"))
		if a == b {
			t.Error("reordering advisory gates kept the hash; they run in order")
		}
	})
	t.Run("empty sections", func(t *testing.T) {
		a := mustHash(t, smallYAML)
		b := mustHash(t, smallYAML+"provenance: {}\nadvisory: {enabled: false}\n")
		if a != b {
			t.Error("empty provenance/advisory changed the hash")
		}
	})
}

func TestCanonicalDoesNotChangeItsInput(t *testing.T) {
	src := edit(t, "[ba_1001, ba_1002]", "[ba_1002, ba_1001]")
	m, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	before := proto.CloneOf(m)
	if _, err := Canonical(m); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(before, m) {
		t.Error("Canonical reordered the caller's mandate")
	}
	if _, err := Canonical(nil); err == nil {
		t.Error("Canonical(nil) succeeded")
	}
}

func TestFromCanonical(t *testing.T) {
	m, err := Parse([]byte(validYAML))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Canonical(m)
	if err != nil {
		t.Fatal(err)
	}
	back, err := FromCanonical(c)
	if err != nil {
		t.Fatalf("FromCanonical: %v", err)
	}
	h1, _ := Hash(m)
	h2, _ := Hash(back)
	if h1 != h2 {
		t.Errorf("hash after FromCanonical %s, want %s", h2, h1)
	}
	if err := Validate(back); err != nil {
		t.Errorf("Validate(FromCanonical) = %v", err)
	}
	rejects := []struct {
		name string
		in   string
	}{
		{"whitespace", strings.Replace(string(c), `{"advisory"`, `{ "advisory"`, 1)},
		{"key order", strings.Replace(string(c), `"agent_id":"agt_k3v9q2m1x7c4b8n6z5wd","allowed_payees":["ba_1001","ba_1002"]`, `"allowed_payees":["ba_1001","ba_1002"],"agent_id":"agt_k3v9q2m1x7c4b8n6z5wd"`, 1)},
		{"list order", strings.Replace(string(c), `["ba_1001","ba_1002"]`, `["ba_1002","ba_1001"]`, 1)},
		{"camelCase names", strings.Replace(string(c), `"agent_id"`, `"agentId"`, 1)},
		{"unknown field", strings.Replace(string(c), `{"advisory"`, `{"admin":true,"advisory"`, 1)},
		{"number amount", strings.Replace(string(c), `"amount_minor":"10000"`, `"amount_minor":10000`, 1)},
		{"not JSON", "rail: stripe"},
		{"empty", ""},
	}
	for _, tc := range rejects {
		t.Run(tc.name, func(t *testing.T) {
			if tc.in == string(c) {
				t.Fatal("the edit did not apply")
			}
			if _, err := FromCanonical([]byte(tc.in)); !errors.Is(err, ErrNotCanonical) {
				t.Errorf("FromCanonical = %v, want ErrNotCanonical", err)
			}
		})
	}
}

func TestToYAMLRoundTrip(t *testing.T) {
	for _, src := range []string{validYAML, smallYAML} {
		m, err := Parse([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		y, err := ToYAML(m)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(y)
		if err != nil {
			t.Fatalf("Parse(ToYAML) = %v\n%s", err, y)
		}
		h1, _ := Hash(m)
		h2, _ := Hash(back)
		if h1 != h2 {
			t.Errorf("hash changed through YAML:\n%s", y)
		}
	}
	m, _ := Parse([]byte(validYAML))
	y, _ := ToYAML(m)
	for _, want := range []string{
		"rail: stripe\n",
		"mode: budgeted\n",
		"  - action_kind: refund\n    max_amount_minor: 50000\n    currencies: [USD]\n",
		"currencies: [EUR, USD]", // canonical order
		"max_amount: {amount_minor: 2500000, currency: USD}",
		"duration: 7d\n",
		`api_version: "2024-06-20"`, // quoted, or it would read back as a date
		"approval_ttl: 1h\n",
		"free_text: hold\n",
	} {
		if !strings.Contains(string(y), want) {
			t.Errorf("ToYAML lacks %q:\n%s", want, y)
		}
	}
}

func TestRecord(t *testing.T) {
	m, err := Parse([]byte(validYAML))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := Record(m)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := Hash(m)
	c, _ := Canonical(m)
	if rec.Hash != h || string(rec.Canonical) != string(c) || rec.AgentID != m.GetAgentId() || rec.RailAccount != m.GetRailAccount() ||
		rec.Mode != "budgeted" || !rec.ValidFrom.Equal(m.GetValidFrom().AsTime()) || !rec.ValidUntil.Equal(m.GetValidUntil().AsTime()) ||
		rec.OwnerID != "" {
		t.Errorf("Record = %+v", rec)
	}
	if _, err := Record(nil); err == nil {
		t.Error("Record(nil) succeeded")
	}
}
