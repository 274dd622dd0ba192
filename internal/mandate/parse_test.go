package mandate

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

func TestParseValid(t *testing.T) {
	m, err := Parse([]byte(validYAML))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"rail", m.GetRail(), countersignv1.Rail_RAIL_STRIPE},
		{"rail_account", m.GetRailAccount(), "acct_1Nv0FGQ9RKHgCVdK"},
		{"agent_id", m.GetAgentId(), "agt_k3v9q2m1x7c4b8n6z5wd"},
		{"valid_from", m.GetValidFrom().AsTime(), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"mode", m.GetMode(), countersignv1.MandateMode_MANDATE_MODE_BUDGETED},
		{"grants", len(m.GetGrants()), 2},
		{"grant 1 kind", m.GetGrants()[1].GetActionKind(), countersignv1.ActionKind_ACTION_KIND_PAYOUT},
		{"grant 1 min", m.GetGrants()[1].GetMinAmountMinor(), int64(100)},
		{"grant 1 max", m.GetGrants()[1].GetMaxAmountMinor(), int64(1000000)},
		{"grant 1 currencies", strings.Join(m.GetGrants()[1].GetCurrencies(), ","), "USD,EUR"},
		{"grant 1 reversible", m.GetGrants()[1].GetReversible(), true},
		{"payees", strings.Join(m.GetAllowedPayees(), ","), "ba_1001,ba_1002"},
		{"budget", m.GetBudgets()[0].GetAmountMinor(), int64(5000000)},
		{"window 0 duration", m.GetWindows()[0].GetDuration().AsDuration(), 24 * time.Hour},
		{"window 0 amount", m.GetWindows()[0].GetMaxAmount().GetAmountMinor(), int64(2500000)},
		{"window 1 scope", m.GetWindows()[1].GetScope(), countersignv1.WindowScope_WINDOW_SCOPE_PAYEE},
		{"window 1 duration (7d)", m.GetWindows()[1].GetDuration().AsDuration(), 7 * 24 * time.Hour},
		{"window 1 calls", m.GetWindows()[1].GetMaxCalls(), int32(3)},
		{"fee budget", m.GetFeeBudget().GetAmountMinor(), int64(10000)},
		{"recurrence", m.GetRecurrenceLimit(), int32(2)},
		{"refund idempotency has no window", m.GetIdempotency()[0].GetWindow() == nil, true},
		{"payout idempotency window", m.GetIdempotency()[1].GetWindow().AsDuration(), 24 * time.Hour},
		{"api version", m.GetProvenance().GetApiVersion(), "2024-06-20"},
		{"advisory", m.GetAdvisory().GetGates()[0], "first_payee"},
		{"approval ttl", m.GetApprovalTtl().AsDuration(), time.Hour},
		{"free text", m.GetFreeText(), countersignv1.FreeText_FREE_TEXT_HOLD},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if p := Lint([]byte(validYAML)); p != nil {
		t.Errorf("Lint(valid) = %v, want nil", p)
	}
}

// TestEntryAndListPins: the entry and list pins parse from YAML, are part
// of the canonical form, and each changes the mandate's hash.
func TestEntryAndListPins(t *testing.T) {
	const h1 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	h2 := strings.Repeat("f", 64)
	base, err := Parse([]byte(edit(t, `  api_version: "2024-06-20"`, "  mcp_tool_description_hashes: {create_refund: "+h1+"}")))
	if err != nil {
		t.Fatal(err)
	}
	baseHash, err := Hash(base)
	if err != nil {
		t.Fatal(err)
	}
	src := edit(t, `  api_version: "2024-06-20"`, "  mcp_tool_description_hashes: {create_refund: "+h1+"}\n  mcp_tool_entry_hashes: {create_refund: "+h2+", fetch.payment-v2: "+h1+"}\n  mcp_tools_list_hash: "+h2)
	m, err := Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if err := Validate(m); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	p := m.GetProvenance()
	if p.GetMcpToolEntryHashes()["create_refund"] != h2 || p.GetMcpToolEntryHashes()["fetch.payment-v2"] != h1 || p.GetMcpToolsListHash() != h2 {
		t.Fatalf("provenance = %v", p)
	}
	c, err := Canonical(m)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"mcp_tool_entry_hashes":{"create_refund":"` + h2 + `","fetch.payment-v2":"` + h1 + `"}`, `"mcp_tools_list_hash":"` + h2 + `"`} {
		if !strings.Contains(string(c), want) {
			t.Errorf("canonical form %s lacks %s", c, want)
		}
	}
	back, err := FromCanonical(c)
	if err != nil || !proto.Equal(back.GetProvenance(), p) {
		t.Fatalf("FromCanonical = %v, %v", back, err)
	}
	y, err := ToYAML(m)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := Parse(y); err != nil || !proto.Equal(again.GetProvenance(), p) {
		t.Fatalf("Parse(ToYAML) = %v, %v", again, err)
	}
	seen := map[string]string{baseHash: "description pins only"}
	for name, mod := range map[string]func(*countersignv1.Provenance){
		"entry pin":        func(p *countersignv1.Provenance) { p.McpToolEntryHashes = map[string]string{"create_refund": h2} },
		"entry pin, other": func(p *countersignv1.Provenance) { p.McpToolEntryHashes = map[string]string{"create_refund": h1} },
		"list pin":         func(p *countersignv1.Provenance) { p.McpToolsListHash = h2 },
		"list pin, other":  func(p *countersignv1.Provenance) { p.McpToolsListHash = h1 },
	} {
		n := proto.Clone(base).(*countersignv1.Mandate)
		mod(n.Provenance)
		h, err := Hash(n)
		if err != nil {
			t.Fatal(err)
		}
		if prev, dup := seen[h]; dup {
			t.Errorf("%s has the hash of %s", name, prev)
		}
		seen[h] = name
	}
	// An empty list pin pins nothing, and is not in the canonical form.
	n := proto.Clone(base).(*countersignv1.Mandate)
	n.Provenance.McpToolsListHash, n.Provenance.McpToolEntryHashes = "", map[string]string{}
	if h, err := Hash(n); err != nil || h != baseHash {
		t.Errorf("empty entry and list pins: hash %s, %v; want the mandate's own %s", h, err, baseHash)
	}
}

// TestToolPinsOnEveryRail: an account reached through a payment MCP server
// is a Stripe or Razorpay account, so its mandate (rail stripe/razorpay)
// must be able to pin the server's tool descriptions (G6).
func TestToolPinsOnEveryRail(t *testing.T) {
	const h = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, r := range []string{"stripe", "razorpay", "mcp"} {
		t.Run(r, func(t *testing.T) {
			src := edit(t, `  api_version: "2024-06-20"`, "  mcp_tool_description_hashes: {create_refund: "+h+", fetch.payment-v2: "+h+"}")
			src = strings.Replace(src, "rail: stripe", "rail: "+r, 1)
			m, err := Parse([]byte(src))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := m.GetProvenance().GetMcpToolDescriptionHashes()["create_refund"]; got != h {
				t.Errorf("pin = %q", got)
			}
			if err := Validate(m); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

// edit replaces old (which must occur once) in validYAML.
func edit(t *testing.T, old, new string) string {
	t.Helper()
	if strings.Count(validYAML, old) != 1 {
		t.Fatalf("edit: %q occurs %d times in validYAML", old, strings.Count(validYAML, old))
	}
	return strings.Replace(validYAML, old, new, 1)
}

func TestParseRejects(t *testing.T) {
	const hash64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	cases := []struct {
		name     string
		old, new string    // edit of validYAML; old "" means new is the whole file
		also     [2]string // a second edit, if any
		line     int
		col      int // 0: not checked
		field    string
		contains string
		rule     string // "" : not checked
	}{
		// Amounts are integers in minor units, written plainly.
		{name: "float amount", old: "max_amount_minor: 50000", new: "max_amount_minor: 500.00",
			line: 10, col: 23, field: "grants[0].max_amount_minor", contains: "500.00 is not an integer"},
		{name: "string amount", old: "max_amount_minor: 50000", new: `max_amount_minor: "50000"`,
			line: 10, field: "grants[0].max_amount_minor", contains: `got the string "50000"`},
		{name: "single-quoted amount", old: "max_amount_minor: 50000", new: `max_amount_minor: '50000'`,
			line: 10, field: "grants[0].max_amount_minor", contains: "without quotes"},
		{name: "exponent amount", old: "max_amount_minor: 50000", new: "max_amount_minor: 5e4",
			line: 10, field: "grants[0].max_amount_minor", contains: "exponent form 5e4"},
		{name: "exponent with fraction", old: "max_amount_minor: 50000", new: "max_amount_minor: 5.0E+4",
			line: 10, field: "grants[0].max_amount_minor", contains: "exponent"},
		{name: "hex amount", old: "max_amount_minor: 50000", new: "max_amount_minor: 0xC350",
			line: 10, field: "grants[0].max_amount_minor", contains: "plain decimal digits"},
		{name: "underscored amount", old: "max_amount_minor: 50000", new: "max_amount_minor: 50_000",
			line: 10, field: "grants[0].max_amount_minor", contains: "plain decimal digits"},
		{name: "leading zero is not octal", old: "max_amount_minor: 50000", new: "max_amount_minor: 050000",
			line: 10, field: "grants[0].max_amount_minor", contains: "plain decimal digits"},
		{name: "plus sign", old: "max_amount_minor: 50000", new: "max_amount_minor: +50000",
			line: 10, field: "grants[0].max_amount_minor", contains: "plain decimal digits"},
		{name: "infinite amount", old: "max_amount_minor: 50000", new: "max_amount_minor: .inf",
			line: 10, field: "grants[0].max_amount_minor", contains: "got .inf"},
		{name: "boolean amount", old: "max_amount_minor: 50000", new: "max_amount_minor: true",
			line: 10, field: "grants[0].max_amount_minor", contains: "got the boolean true"},
		{name: "negative amount", old: "max_amount_minor: 50000", new: "max_amount_minor: -5",
			line: 10, field: "grants[0].max_amount_minor", contains: "greater than 0", rule: "int64.gt"},
		{name: "amount beyond int64", old: "max_amount_minor: 50000", new: "max_amount_minor: 9223372036854775808",
			line: 10, field: "grants[0].max_amount_minor", contains: "does not fit in a 64-bit integer"},
		{name: "string money amount", old: "{amount_minor: 5000000, currency: USD}", new: `{amount_minor: "5000000", currency: USD}`,
			line: 19, col: 20, field: "budgets[0].amount_minor", contains: "string"},
		{name: "float window amount", old: "{amount_minor: 2500000, currency: USD}", new: "{amount_minor: 25000.00, currency: USD}",
			line: 23, field: "windows[0].max_amount.amount_minor", contains: "not an integer"},
		{name: "int32 overflow", old: "recurrence_limit: 2", new: "recurrence_limit: 3000000000",
			line: 28, field: "recurrence_limit", contains: "32-bit"},
		{name: "float count is not an amount", old: "max_calls: 3", new: "max_calls: 2.5",
			line: 26, field: "windows[1].max_calls", contains: "must be an integer, got 2.5"},

		// Structure and types.
		{name: "unknown key with suggestion", old: "    currencies: [USD]\n", new: "    currency: [USD]\n",
			line: 11, col: 5, field: "grants[0].currency", contains: `unknown field "currency"; did you mean "currencies"?`},
		{name: "camel case key", old: "rail_account:", new: "railAccount:",
			line: 2, col: 1, field: "railAccount", contains: `did you mean "rail_account"?`},
		{name: "unknown key lists known", old: "recurrence_limit: 2", new: "colour: blue",
			line: 28, field: "colour", contains: "known fields: advisory, agent_id"},
		{name: "duplicate key", old: "purpose: Refunds and supplier payouts", new: "rail: stripe",
			line: 4, col: 1, field: "rail", contains: `duplicate key "rail" (first given at line 1)`},
		{name: "duplicate nested key", old: "    currencies: [USD]\n", new: "    max_amount_minor: 1\n",
			line: 11, col: 5, field: "grants[0].max_amount_minor", contains: "duplicate key"},
		{name: "duplicate map key", old: "  api_version: \"2024-06-20\"", new: "  mcp_tool_description_hashes: {t: " + hash64 + ", t: " + hash64 + "}",
			line: 35, field: `provenance.mcp_tool_description_hashes["t"]`, contains: "duplicate key"},
		{name: "enum spelled in capitals", old: "rail: stripe", new: "rail: Stripe",
			line: 1, col: 7, field: "rail", contains: `must be one of stripe, razorpay, mcp, got "Stripe"`},
		{name: "enum unspecified", old: "mode: budgeted", new: "mode: unspecified",
			line: 7, field: "mode", contains: "must be one of approval_required, budgeted"},
		{name: "integer where enum", old: "mode: budgeted", new: "mode: 2",
			line: 7, field: "mode", contains: "got the integer 2"},
		{name: "word where integer", old: "recurrence_limit: 2", new: "recurrence_limit: two",
			line: 28, field: "recurrence_limit", contains: `must be an integer, got the string "two"`},
		{name: "string where bool", old: "reversible: true", new: `reversible: "yes"`,
			line: 16, field: "grants[1].reversible", contains: "must be true or false"},
		{name: "scalar where list", old: "allowed_payees: [ba_1001, ba_1002]", new: "allowed_payees: ba_1001",
			line: 17, field: "allowed_payees", contains: "must be a list"},
		{name: "list where mapping", old: "fee_budget: {amount_minor: 10000, currency: USD}", new: "fee_budget: [10000, USD]",
			line: 27, field: "fee_budget", contains: "must be a mapping of fields, got a list"},
		{name: "key without value", old: "fee_budget: {amount_minor: 10000, currency: USD}", new: "fee_budget:",
			line: 27, field: "fee_budget", contains: "has no value"},
		{name: "number where string", old: "rail_account: acct_1Nv0FGQ9RKHgCVdK", new: "rail_account: 12345",
			line: 2, field: "rail_account", contains: "must be a string, got the integer 12345; quote it"},
		{name: "unquoted date where string", old: `api_version: "2024-06-20"`, new: "api_version: 2024-06-20",
			line: 35, field: "provenance.api_version", contains: "got the timestamp 2024-06-20; quote it"},
		{name: "timestamp without zone", old: "valid_from: 2026-01-01T00:00:00Z", new: "valid_from: 2026-01-01 00:00:00",
			line: 5, field: "valid_from", contains: "with a time zone"},
		{name: "date only", old: "valid_from: 2026-01-01T00:00:00Z", new: "valid_from: 2026-01-01",
			line: 5, field: "valid_from", contains: "RFC 3339"},
		{name: "nanosecond timestamp", old: "valid_from: 2026-01-01T00:00:00Z", new: "valid_from: 2026-01-01T00:00:00.000000001Z",
			line: 5, field: "valid_from", contains: "microsecond"},
		{name: "bad duration", old: "duration: 24h", new: "duration: one day",
			line: 22, field: "windows[0].duration", contains: "duration such as 24h"},
		{name: "anchor", old: "allowed_payees: [ba_1001, ba_1002]", new: "allowed_payees: &p [ba_1001, ba_1002]",
			line: 17, field: "allowed_payees", contains: "anchors (&p) are not allowed"},
		{name: "alias", old: "fee_budget: {amount_minor: 10000, currency: USD}", new: "fee_budget: *b",
			also: [2]string{"  - {amount_minor: 5000000, currency: USD}", "  - &b {amount_minor: 10000, currency: USD}"},
			line: 27, field: "fee_budget", contains: "aliases (*b) are not allowed"},
		{name: "undefined alias", old: "fee_budget: {amount_minor: 10000, currency: USD}", new: "fee_budget: *b",
			line: 1, contains: "YAML syntax: unknown anchor 'b' referenced"},
		{name: "second document", old: "approval_ttl: 1h\n", new: "approval_ttl: 1h\n---\nrail: stripe\n",
			line: 40, contains: "one YAML document"},
		{name: "syntax error", old: "allowed_payees: [ba_1001, ba_1002]", new: "allowed_payees: [ba_1001, ba_1002",
			line: 17, contains: "YAML syntax: did not find expected ',' or ']'"},
		{name: "tab indentation", old: "  - action_kind: refund\n    max_amount_minor: 50000", new: "  - action_kind: refund\n\tmax_amount_minor: 50000",
			line: 10, contains: "YAML syntax: found a tab character"},
		{name: "list at the root", new: "- rail: stripe\n", line: 1, col: 1, contains: "a mandate is a YAML mapping of fields, got a list"},
		{name: "empty file", new: "", line: 1, contains: "empty"},
		{name: "comments only", new: "# nothing\n", line: 1, contains: "empty"},
		{name: "invalid UTF-8", old: "Refunds and supplier payouts", new: "Refunds \xff",
			line: 4, col: 18, contains: "not valid UTF-8"},

		// protovalidate rules, mapped back to lines.
		{name: "missing purpose", old: "purpose: Refunds and supplier payouts\n", new: "",
			line: 1, col: 1, field: "purpose", contains: "is required", rule: "string.min_len"},
		{name: "missing mode", old: "mode: budgeted\n", new: "",
			line: 1, field: "mode", contains: "is required: one of approval_required, budgeted", rule: "enum.not_in"},
		{name: "missing valid_until", old: "valid_until: 2026-04-01T00:00:00Z\n", new: "",
			line: 1, field: "valid_until", contains: "is required", rule: "required"},
		{name: "lower-case currency", old: "    currencies: [USD]\n", new: "    currencies: [usd]\n",
			line: 11, col: 18, field: "grants[0].currencies[0]", contains: "regex", rule: "string.pattern"},
		{name: "window too long", old: "duration: 7d", new: "duration: 40d",
			line: 25, field: "windows[1].duration", contains: "less than or equal to 2678400s"},
		{name: "approval ttl too long", old: "approval_ttl: 1h", new: "approval_ttl: 30d",
			line: 39, field: "approval_ttl", contains: "less than or equal to 604800s"},
		{name: "free_text not a policy", old: "free_text: hold", new: "free_text: deny",
			line: 40, col: 12, field: "free_text", contains: `must be one of allow, refuse, hold, got "deny"`},
		{name: "free_text not a string", old: "free_text: hold", new: "free_text: [hold]",
			line: 40, field: "free_text", contains: "must be one of allow, refuse, hold"},
		{name: "free_text unspecified spelt out", old: "free_text: hold", new: "free_text: unspecified",
			line: 40, field: "free_text", contains: "must be one of allow, refuse, hold"},
		{name: "negative window", old: "duration: 24h", new: "duration: -24h",
			line: 22, field: "windows[0].duration", contains: "greater than 0s"},
		{name: "advisory gate name", old: "gates: [first_payee]", new: "gates: [First-Payee]",
			line: 38, field: "advisory.gates[0]", rule: "string.pattern"},
		{name: "tool hash not hex", old: "rail: stripe", new: "rail: mcp",
			also: [2]string{`  api_version: "2024-06-20"`, "  mcp_tool_description_hashes: {refund: abc}"},
			line: 35, field: `provenance.mcp_tool_description_hashes["refund"]`, rule: "string.pattern"},
		{name: "empty grants", old: "grants:\n  - action_kind: refund\n    max_amount_minor: 50000\n    currencies: [USD]\n  - action_kind: payout\n    min_amount_minor: 100\n    max_amount_minor: 1000000\n    currencies: [USD, EUR]\n    reversible: true\n", new: "grants: []\n",
			line: 8, field: "grants", contains: "is required", rule: "repeated.min_items"},

		// Semantic checks, with the line of the field to change.
		{name: "valid_until before valid_from", old: "valid_until: 2026-04-01T00:00:00Z", new: "valid_until: 2025-12-31T00:00:00Z",
			line: 6, col: 14, field: "valid_until", contains: "must be after valid_from (2026-01-01T00:00:00Z) (line 5)", rule: "mandate.validity"},
		{name: "empty validity window", old: "valid_until: 2026-04-01T00:00:00Z", new: "valid_until: 2026-01-01T00:00:00Z",
			line: 6, field: "valid_until", rule: "mandate.validity"},
		{name: "refund idempotency window", old: "  - action_kind: refund\n  - action_kind: payout", new: "  - {action_kind: refund, window: 1h}\n  - action_kind: payout",
			line: 30, field: "idempotency[0].window", contains: "refunds have no idempotency window", rule: "idempotency.refund_no_window"},
		{name: "two budgets in one currency", old: "budgets:\n  - {amount_minor: 5000000, currency: USD}", new: "budgets: [{amount_minor: 5000000, currency: USD},\n  {amount_minor: 1, currency: USD}]",
			line: 19, field: "budgets[1].currency", contains: "a second budget in USD; budgets[0] (line 18)", rule: "mandate.budgets_unique_currency"},
		{name: "two grants for one action", old: "  - action_kind: payout\n    min_amount_minor: 100", new: "  - action_kind: refund\n    min_amount_minor: 100",
			line: 12, field: "grants[1].action_kind", contains: "a second grant for refund", rule: "mandate.grants_unique_action"},
		{name: "two idempotency settings for one action", old: "  - action_kind: payout\n    window: 24h", new: "  - action_kind: refund\n    window: 24h",
			line: 31, field: "idempotency[1].action_kind", rule: "mandate.idempotency_unique_action"},
		{name: "max below min", old: "min_amount_minor: 100", new: "min_amount_minor: 2000000",
			line: 14, col: 23, field: "grants[1].max_amount_minor", contains: "below min_amount_minor 2000000", rule: "grant.amount_bounds"},
		{name: "window without limit", old: "    duration: 7d\n    max_calls: 3\n", new: "    duration: 7d\n",
			line: 24, col: 5, field: "windows[1]", rule: "window.has_limit"},
		{name: "payout without payees", old: "allowed_payees: [ba_1001, ba_1002]", new: "allowed_payees: []",
			line: 12, field: "grants[1].action_kind", contains: "allowed_payees is empty", rule: "mandate.payees_required"},
		{name: "reversible refund", old: "    currencies: [USD]\n", new: "    currencies: [USD]\n    reversible: true\n",
			line: 12, field: "grants[0].reversible", rule: "grant.refund_reversible"},
		{name: "budget in an ungranted currency", old: "{amount_minor: 5000000, currency: USD}", new: "{amount_minor: 5000000, currency: GBP}",
			line: 19, field: "budgets[0].currency", contains: "grants permit EUR, USD", rule: "mandate.currency_granted"},
		{name: "fee budget in an ungranted currency", old: "fee_budget: {amount_minor: 10000, currency: USD}", new: "fee_budget: {amount_minor: 10000, currency: INR}",
			line: 27, field: "fee_budget.currency", rule: "mandate.currency_granted"},
		{name: "zero budget", old: "{amount_minor: 5000000, currency: USD}", new: "{amount_minor: 0, currency: USD}",
			line: 19, field: "budgets[0].amount_minor", rule: "mandate.positive_limit"},
		{name: "zero window amount", old: "{amount_minor: 2500000, currency: USD}", new: "{amount_minor: 0, currency: USD}",
			line: 23, field: "windows[0].max_amount.amount_minor", rule: "mandate.positive_limit"},
		{name: "tool pin name with a space", old: `  api_version: "2024-06-20"`, new: "  mcp_tool_description_hashes: {\"create_refund \": " + hash64 + "}",
			line: 35, field: `provenance.mcp_tool_description_hashes["create_refund "]`, contains: "is not an MCP tool name", rule: "provenance.mcp_tool_name"},
		{name: "tool pin name too long", old: `  api_version: "2024-06-20"`, new: "  mcp_tool_description_hashes: {" + strings.Repeat("t", 129) + ": " + hash64 + "}",
			line: 35, field: `provenance.mcp_tool_description_hashes["` + strings.Repeat("t", 129) + `"]`},
		{name: "tool hash upper-case on a card rail", old: `  api_version: "2024-06-20"`, new: "  mcp_tool_description_hashes: {create_refund: " + strings.ToUpper(hash64) + "}",
			line: 35, field: `provenance.mcp_tool_description_hashes["create_refund"]`, rule: "string.pattern"},
		{name: "tool hash too short on a card rail", old: `  api_version: "2024-06-20"`, new: "  mcp_tool_description_hashes: {create_refund: " + hash64[:63] + "}",
			line: 35, field: `provenance.mcp_tool_description_hashes["create_refund"]`, rule: "string.pattern"},
		{name: "duplicate tool pin on a card rail", old: `  api_version: "2024-06-20"`, new: "  mcp_tool_description_hashes: {create_refund: " + hash64 + ", create_refund: " + hash64 + "}",
			line: 35, field: `provenance.mcp_tool_description_hashes["create_refund"]`, contains: "duplicate key"},
		{name: "entry pin name with a space", old: `  api_version: "2024-06-20"`, new: "  mcp_tool_entry_hashes: {\"create_refund \": " + hash64 + "}",
			line: 35, field: `provenance.mcp_tool_entry_hashes["create_refund "]`, contains: "is not an MCP tool name", rule: "provenance.mcp_tool_name"},
		{name: "entry hash upper-case", old: `  api_version: "2024-06-20"`, new: "  mcp_tool_entry_hashes: {create_refund: " + strings.ToUpper(hash64) + "}",
			line: 35, field: `provenance.mcp_tool_entry_hashes["create_refund"]`, rule: "string.pattern"},
		{name: "duplicate entry pin", old: `  api_version: "2024-06-20"`, new: "  mcp_tool_entry_hashes: {create_refund: " + hash64 + ", create_refund: " + hash64 + "}",
			line: 35, field: `provenance.mcp_tool_entry_hashes["create_refund"]`, contains: "duplicate key"},
		{name: "list hash too short", old: `  api_version: "2024-06-20"`, new: "  mcp_tools_list_hash: " + hash64[:63],
			line: 35, field: "provenance.mcp_tools_list_hash", rule: "string.pattern"},
		{name: "list hash not a string", old: `  api_version: "2024-06-20"`, new: "  mcp_tools_list_hash: [" + hash64 + "]",
			line: 35, field: "provenance.mcp_tools_list_hash"},
		// An explicit 0 means no limit and vanishes from the stored form:
		// refused, like a budget of 0; leave the field out for no limit.
		{name: "explicit zero recurrence limit", old: "recurrence_limit: 2", new: "recurrence_limit: 0",
			line: 28, col: 19, field: "recurrence_limit", contains: "0 here means no limit, not a limit of 0, and is not kept in the stored mandate; leave recurrence_limit out", rule: "mandate.positive_limit"},
		{name: "explicit zero max_calls beside an amount", old: "    max_amount: {amount_minor: 2500000, currency: USD}", new: "    max_calls: 0\n    max_amount: {amount_minor: 2500000, currency: USD}",
			line: 23, col: 16, field: "windows[0].max_calls", contains: "leave max_calls out for no limit", rule: "mandate.positive_limit"},
		{name: "explicit zero max_calls alone", old: "max_calls: 3", new: "max_calls: 0",
			line: 26, col: 16, field: "windows[1].max_calls", contains: "0 here means no limit", rule: "mandate.positive_limit"},

		// Ids are printable ASCII and text is visible: what the owner
		// reads is what is stored.
		{name: "bidi override in a payee", old: "allowed_payees: [ba_1001, ba_1002]", new: "allowed_payees: [\"ba_1001\", \"ba_\u202e2001\"]",
			line: 17, col: 29, field: "allowed_payees[1]", contains: `"ba_\u202e2001" is not a payee id: after "ba_" it holds U+202E, an invisible format character (it can hide or reorder the text around it); payee ids are`, rule: "mandate.payee_id"},
		{name: "zero-width space in a payee", old: "allowed_payees: [ba_1001, ba_1002]", new: "allowed_payees: [\"ba_1001\", \"ba_1002\u200b\"]",
			line: 17, col: 29, field: "allowed_payees[1]", contains: `holds U+200B, an invisible format character`, rule: "mandate.payee_id"},
		{name: "trailing space in a payee", old: "allowed_payees: [ba_1001, ba_1002]", new: "allowed_payees: [\"ba_1001\", \"ba_1002 \"]",
			line: 17, col: 29, field: "allowed_payees[1]", contains: `"ba_1002 " is not a payee id: after "ba_1002" it holds a space;`, rule: "mandate.payee_id"},
		{name: "look-alike letter in a payee", old: "allowed_payees: [ba_1001, ba_1002]", new: "allowed_payees: [b\u0430_1001, ba_1002]",
			line: 17, col: 18, field: "allowed_payees[0]", contains: "after \"b\" it holds U+0430 (\u0430), a non-ASCII character (it may look like an ASCII one)", rule: "mandate.payee_id"},
		{name: "bidi override in the rail account", old: "rail_account: acct_1Nv0FGQ9RKHgCVdK", new: "rail_account: \"acct_1Nv0\u202eFGQ9\"",
			line: 2, col: 15, field: "rail_account", contains: `"acct_1Nv0\u202eFGQ9" is not a rail account id: after "acct_1Nv0" it holds U+202E, an invisible format character`, rule: "mandate.rail_account"},
		{name: "rail account with a space", old: "rail_account: acct_1Nv0FGQ9RKHgCVdK", new: "rail_account: acct_1Nv0 FGQ9",
			line: 2, field: "rail_account", contains: `after "acct_1Nv0" it holds a space`, rule: "mandate.rail_account"},
		{name: "NUL in the purpose", old: "purpose: Refunds and supplier payouts", new: `purpose: "Refunds\0 and payouts"`,
			line: 4, col: 10, field: "purpose", contains: `"Refunds\x00 and payouts" cannot be shown as it is stored: after "Refunds" it holds a NUL (U+0000); write purpose as one line of visible text`, rule: "mandate.text"},
		{name: "bidi isolate in the purpose", old: "purpose: Refunds and supplier payouts", new: "purpose: \"Refunds \u2066and supplier payouts\"",
			line: 4, field: "purpose", contains: "U+2066, an invisible format character", rule: "mandate.text"},
		{name: "newline in the purpose", old: "purpose: Refunds and supplier payouts", new: "purpose: |\n  Refunds and supplier payouts",
			line: 4, field: "purpose", contains: `after "Refunds and supplier payouts" it holds a line break (U+000A)`, rule: "mandate.text"},
		{name: "line separator in the purpose", old: "purpose: Refunds and supplier payouts", new: "purpose: \"Refunds\u2028and payouts\"",
			line: 4, field: "purpose", contains: "U+2028, a line separator", rule: "mandate.text"},
		{name: "long prefix is shortened", old: "purpose: Refunds and supplier payouts", new: "purpose: \"Refunds and supplier payouts for the spring\u200b\"",
			line: 4, field: "purpose", contains: `after "… supplier payouts for the spring" it holds U+200B`, rule: "mandate.text"},
		{name: "zero-width space in the host pin", old: "rail_host: api.stripe.com", new: "rail_host: \"api.stripe.com\u200b\"",
			line: 34, field: "provenance.rail_host", contains: `"api.stripe.com\u200b" is not a host: after "api.stripe.com" it holds U+200B`, rule: "mandate.rail_host"},
		{name: "control character in the version pin", old: `api_version: "2024-06-20"`, new: `api_version: "2024-06-20\t"`,
			line: 35, field: "provenance.api_version", contains: `"2024-06-20\t" is not an API version: after "2024-06-20" it holds a tab;`, rule: "mandate.api_version"},
		{name: "agent id shape", old: "agent_id: agt_k3v9q2m1x7c4b8n6z5wd", new: "agent_id: refund-bot",
			line: 3, field: "agent_id", rule: "mandate.agent_id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.new
			if tc.old != "" {
				src = edit(t, tc.old, tc.new)
			}
			if tc.also[0] != "" {
				src = strings.Replace(src, tc.also[0], tc.also[1], 1)
			}
			m, err := Parse([]byte(src))
			if err == nil {
				t.Fatalf("Parse accepted it: %v", m)
			}
			var perr *Error
			if !errors.As(err, &perr) {
				t.Fatalf("error %T %v is not *Error", err, err)
			}
			if got := Lint([]byte(src)); len(got) != len(perr.Problems) {
				t.Errorf("Lint found %d problems, Parse %d", len(got), len(perr.Problems))
			}
			for _, p := range perr.Problems {
				if lineMatches(p.Line, tc.line, tc.contains) && (tc.col == 0 || p.Column == tc.col) && p.Field == tc.field &&
					strings.Contains(p.Message, tc.contains) && (tc.rule == "" || p.Rule == tc.rule) {
					return
				}
			}
			t.Errorf("want a problem at line %d col %d field %q containing %q rule %q; got:\n%v",
				tc.line, tc.col, tc.field, tc.contains, tc.rule, err)
		})
	}
}

// lineMatches allows the YAML library's syntax errors, which name the line
// where the enclosing construct starts (0-based for parser errors), to be
// one line early.
func lineMatches(got, want int, contains string) bool {
	if strings.HasPrefix(contains, "YAML syntax") {
		return got == want || got == want-1
	}
	return got == want
}

func TestProblemsAreSortedAndAllReported(t *testing.T) {
	src := edit(t, "max_amount_minor: 50000", "max_amount_minor: 12.50")
	src = strings.Replace(src, "recurrence_limit: 2", `recurrence_limit: "2"`, 1)
	src = strings.Replace(src, "rail: stripe", "rail: visa", 1)
	problems := Lint([]byte(src))
	var lines []int
	for _, p := range problems {
		lines = append(lines, p.Line)
	}
	if len(lines) != 3 || lines[0] != 1 || lines[1] != 10 || lines[2] != 28 {
		t.Fatalf("problems on lines %v, want [1 10 28]: %v", lines, problems)
	}
	if got := problems[1].String(); got != "10:23: grants[0].max_amount_minor: 12.50 is not an integer: amounts are integers in the currency's minor units (1250 for 12.50)" {
		t.Errorf("String() = %q", got)
	}
}

func TestProtovalidateDuplicatesAreDropped(t *testing.T) {
	// The proto's CEL rule and the Go check both see the inverted window;
	// only the precise Go problem is reported.
	src := edit(t, "valid_until: 2026-04-01T00:00:00Z", "valid_until: 2025-01-01T00:00:00Z")
	problems := Lint([]byte(src))
	if len(problems) != 1 || problems[0].Rule != "mandate.validity" || problems[0].Line != 6 {
		t.Fatalf("problems = %v, want one mandate.validity on line 6", problems)
	}
}

func TestValidateWithoutSource(t *testing.T) {
	m, err := Parse([]byte(validYAML))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(m); err != nil {
		t.Fatalf("Validate(valid) = %v", err)
	}
	bad := proto.CloneOf(m)
	bad.Grants[0].MaxAmountMinor = 0
	bad.Idempotency[0].Window = bad.Idempotency[1].Window
	bad.ValidFrom.Nanos = 1
	bad.FreeText = 7
	err = Validate(bad)
	var verr *Error
	if !errors.As(err, &verr) {
		t.Fatalf("Validate = %v, want *Error", err)
	}
	fields := map[string]bool{}
	for _, p := range verr.Problems {
		if p.Line != 0 || p.Column != 0 {
			t.Errorf("problem %v has a position without a source", p)
		}
		fields[p.Field] = true
	}
	for _, f := range []string{"grants[0].max_amount_minor", "idempotency[0].window", "valid_from", "free_text"} {
		if !fields[f] {
			t.Errorf("no problem for %s in %v", f, err)
		}
	}
	if !strings.HasPrefix(err.Error(), "invalid mandate (") {
		t.Errorf("Error() = %q", err.Error())
	}
	if err := Validate(nil); err == nil {
		t.Error("Validate(nil) = nil")
	}
}

func TestParentPath(t *testing.T) {
	cases := []struct{ in, want string }{
		{"grants[0].currencies[1]", "grants[0].currencies"},
		{"grants[0].currencies", "grants[0]"},
		{"grants[0]", "grants"},
		{"grants", ""},
		{`provenance.mcp_tool_description_hashes["a[1].b"]`, "provenance.mcp_tool_description_hashes"},
		{`provenance.mcp_tool_description_hashes["x"]`, "provenance.mcp_tool_description_hashes"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			if got := parentPath(tc.in); got != tc.want {
				t.Errorf("parentPath(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestDurations(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		out  string
	}{
		{"24h", 24 * time.Hour, "24h"},
		{"7d", 7 * 24 * time.Hour, "7d"},
		{"48h", 48 * time.Hour, "2d"},
		{"36h", 36 * time.Hour, "36h"},
		{"90m", 90 * time.Minute, "1h30m"},
		{"45s", 45 * time.Second, "45s"},
		{"1h0m30s", time.Hour + 30*time.Second, "1h0m30s"},
		{"1.5s", 1500 * time.Millisecond, "1.5s"},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			d, err := ParseDuration(tc.in)
			if err != nil || d != tc.want {
				t.Fatalf("ParseDuration(%q) = %v, %v; want %v", tc.in, d, err, tc.want)
			}
			if got := FormatDuration(d); got != tc.out {
				t.Errorf("FormatDuration(%v) = %q, want %q", d, got, tc.out)
			}
			if back, err := ParseDuration(FormatDuration(d)); err != nil || back != d {
				t.Errorf("round trip %v -> %q -> %v, %v", d, FormatDuration(d), back, err)
			}
		})
	}
	for _, bad := range []string{"", "d", "1.5d", "-1d", "1w", "123456d"} {
		if _, err := ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q) accepted", bad)
		}
	}
}

// TestValidateRefusesUnknownFields: a mandate carrying fields this version
// does not know (a gRPC client built on another schema) is refused, at the
// message that carries them, since the gates would never see a limit in
// them.
func TestValidateRefusesUnknownFields(t *testing.T) {
	m, err := Parse([]byte(validYAML))
	if err != nil {
		t.Fatal(err)
	}
	unknown := protowire.AppendTag(nil, 999, protowire.VarintType)
	unknown = protowire.AppendVarint(unknown, 1000)
	for path, set := range map[string]func(*countersignv1.Mandate){
		"":          func(m *countersignv1.Mandate) { m.ProtoReflect().SetUnknown(unknown) },
		"grants[0]": func(m *countersignv1.Mandate) { m.Grants[0].ProtoReflect().SetUnknown(unknown) },
		"budgets[0]": func(m *countersignv1.Mandate) {
			m.Budgets[0].ProtoReflect().SetUnknown(unknown)
		},
	} {
		bad := proto.CloneOf(m)
		set(bad)
		err := Validate(bad)
		var verr *Error
		if !errors.As(err, &verr) {
			t.Fatalf("%q: Validate = %v, want *Error", path, err)
		}
		found := false
		for _, p := range verr.Problems {
			found = found || p.Field == path && strings.Contains(p.Message, "field numbers 999")
		}
		if !found {
			t.Errorf("%q: no problem naming field 999 there: %v", path, err)
		}
	}
}
