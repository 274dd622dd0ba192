package mandate

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"buf.build/go/protovalidate"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// Validate checks a mandate that did not come from YAML (an API request, a
// stored row): the proto's protovalidate rules and the semantic checks below.
// The error, if any, is an *[Error] whose problems carry field paths but no
// lines.
//
// The semantic checks, beyond what protovalidate expresses:
//
//   - a payout or transfer grant needs a non-empty allowed_payees: an empty
//     allowlist permits no payee (the gate fails closed), so such a grant
//     could never be used;
//   - a refund grant cannot be reversible (refunds are irreversible);
//   - every budget, window amount and fee budget is in a currency some grant
//     permits: a limit in another currency limits nothing and is almost
//     always a typo that leaves the real currency unlimited;
//   - a grant naming more than one currency needs the mandate to set a
//     budget or an amount window: its bounds are one number of minor units
//     for all its currencies (see grantCurrencies);
//   - budgets and window amounts are positive (a zero limit blocks every
//     action; to forbid an action, leave out its grant);
//   - MCP tool-description pins are keyed by MCP tool names (they are
//     valid on every rail: G6 applies them to calls through an MCP server);
//   - agent_id has the shape of a Countersign agent id (agt_…);
//   - rail_account and every allowed_payees item are ids of printable
//     ASCII, and purpose and the provenance pins hold no control, invisible
//     format or line-separator character (text.go): a mandate the owner
//     reviews must read as what it stores;
//   - timestamps are valid and no finer than the microsecond the ledger
//     stores (a finer one would not round-trip through Postgres).
//
// It also repeats, with a precise position, the proto's message-level rules
// (validity window, one grant/budget/idempotency setting per key, refunds
// without an idempotency window, grant bounds, windows with a limit).
func Validate(m *countersignv1.Mandate) error {
	if m == nil {
		return &Error{Problems: []Problem{{Message: "no mandate"}}}
	}
	if problems := check(m, nil); len(problems) > 0 {
		return &Error{Problems: problems}
	}
	return nil
}

// locator maps a field path to its position in the source; nil when there
// is no source.
type locator func(path string, forKey bool) (line, col int)

type checker struct {
	at       locator
	problems []Problem
	rules    map[string]bool // rules this checker reported
}

func (c *checker) add(path, rule, format string, args ...any) {
	c.addAt(path, false, rule, fmt.Sprintf(format, args...))
}

func (c *checker) addAt(path string, forKey bool, rule, msg string) {
	p := Problem{Field: path, Message: msg, Rule: rule}
	if c.at != nil {
		p.Line, p.Column = c.at(path, forKey)
	}
	c.problems = append(c.problems, p)
	if rule != "" {
		c.rules[rule] = true
	}
}

// line is " (line N)" for messages that point at a second place.
func (c *checker) line(path string) string {
	if c.at == nil {
		return ""
	}
	l, _ := c.at(path, false)
	return fmt.Sprintf(" (line %d)", l)
}

// covered are the proto's rules this package re-checks with a precise
// position; protovalidate's own report of them is dropped when the Go check
// fired, and kept if the two ever disagree.
var covered = map[string]bool{
	"mandate.validity":                  true,
	"mandate.budgets_unique_currency":   true,
	"mandate.grants_unique_action":      true,
	"mandate.idempotency_unique_action": true,
	"grant.amount_bounds":               true,
	"idempotency.refund_no_window":      true,
	"window.has_limit":                  true,
	"mandate.rail_account":              true,
	"mandate.payee_id":                  true,
	"mandate.text":                      true,
	"mandate.rail_host":                 true,
	"mandate.api_version":               true,
}

// ruleField points a message-level rule at the field a person has to change.
var ruleField = map[string]string{
	"mandate.validity":             "valid_until",
	"grant.amount_bounds":          "max_amount_minor",
	"idempotency.refund_no_window": "window",
}

var agentID = regexp.MustCompile(`^agt_[a-z0-9]{8,64}$`)

func check(m *countersignv1.Mandate, at locator) []Problem {
	c := &checker{at: at, rules: map[string]bool{}}
	c.unknown("", m.ProtoReflect())
	c.semantic(m)
	c.protovalidate(m)
	return c.problems
}

// unknown reports fields m carries that this version of the mandate does
// not know (a client built on another schema, a misspelled member a reader
// kept as unknown): the gates would never see them, so a limit the owner
// wrote would silently not apply. The mandate is refused instead.
func (c *checker) unknown(path string, m protoreflect.Message) {
	if raw := m.GetUnknown(); len(raw) > 0 {
		where := path
		if where == "" {
			where = "the mandate"
		}
		var nums []string
		for b := raw; len(b) > 0; {
			num, _, n := protowire.ConsumeField(b)
			if n < 0 {
				break
			}
			nums = append(nums, strconv.Itoa(int(num)))
			b = b[n:]
		}
		c.add(path, "mandate.unknown_field", "%s carries fields this version does not know (field numbers %s): a limit in them would not apply; write the mandate with this version's fields",
			where, strings.Join(nums, ", "))
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil {
			return true
		}
		name := string(fd.Name())
		if path != "" {
			name = path + "." + name
		}
		switch {
		case fd.IsList():
			for i := range v.List().Len() {
				c.unknown(fmt.Sprintf("%s[%d]", name, i), v.List().Get(i).Message())
			}
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
					c.unknown(fmt.Sprintf("%s[%q]", name, k.String()), mv.Message())
					return true
				})
			}
		default:
			c.unknown(name, v.Message())
		}
		return true
	})
}

func (c *checker) semantic(m *countersignv1.Mandate) {
	if from, until := m.GetValidFrom(), m.GetValidUntil(); from == nil || until == nil {
		// A missing end is reported as required; comparing it says nothing more.
		c.rules["mandate.validity"] = true
	} else if !until.AsTime().After(from.AsTime()) {
		c.add("valid_until", "mandate.validity", "must be after valid_from (%s)%s",
			from.AsTime().UTC().Format("2006-01-02T15:04:05.999999Z07:00"), c.line("valid_from"))
	}
	for _, f := range []struct {
		path string
		ts   *timestamppb.Timestamp
	}{{"valid_from", m.GetValidFrom()}, {"valid_until", m.GetValidUntil()}} {
		switch {
		case f.ts == nil:
		case f.ts.CheckValid() != nil:
			c.add(f.path, "mandate.timestamp", "is not a valid timestamp between the years 0001 and 9999")
		case f.ts.GetNanos()%1000 != 0:
			c.add(f.path, "mandate.timestamp", "is more precise than the microsecond the ledger stores")
		}
	}
	if id := m.GetAgentId(); id != "" && !agentID.MatchString(id) {
		c.add("agent_id", "mandate.agent_id", "%q is not an agent id: agent ids are agt_ followed by 8 to 64 lower-case letters and digits", id)
	}
	c.text(m)

	granted := map[string]bool{}  // currencies
	payeeGrant := ""              // path of the first payout/transfer grant
	firstGrant := map[int32]int{} // action kind → grant index
	for i, g := range m.GetGrants() {
		path := fmt.Sprintf("grants[%d]", i)
		kind := g.GetActionKind()
		if kind != countersignv1.ActionKind_ACTION_KIND_UNSPECIFIED {
			if j, dup := firstGrant[int32(kind)]; dup {
				c.add(path+".action_kind", "mandate.grants_unique_action",
					"a second grant for %s; grants[%d]%s already grants it (one grant per action)", actionName(kind), j, c.line(fmt.Sprintf("grants[%d]", j)))
			} else {
				firstGrant[int32(kind)] = i
			}
		}
		if g.GetMaxAmountMinor() < g.GetMinAmountMinor() {
			c.add(path+".max_amount_minor", "grant.amount_bounds", "%d is below min_amount_minor %d",
				g.GetMaxAmountMinor(), g.GetMinAmountMinor())
		}
		if kind == countersignv1.ActionKind_ACTION_KIND_REFUND && g.GetReversible() {
			c.add(path+".reversible", "grant.refund_reversible", "refunds cannot be reversed; leave reversible out of a refund grant")
		}
		if (kind == countersignv1.ActionKind_ACTION_KIND_PAYOUT || kind == countersignv1.ActionKind_ACTION_KIND_TRANSFER) && payeeGrant == "" {
			payeeGrant = path
		}
		for _, cur := range g.GetCurrencies() {
			granted[cur] = true
		}
	}
	if payeeGrant != "" && len(m.GetAllowedPayees()) == 0 {
		c.add(payeeGrant+".action_kind", "mandate.payees_required",
			"%s is granted but allowed_payees is empty; an empty allowlist permits no payee, so list the destinations the agent may pay",
			actionName(m.GetGrants()[indexOf(payeeGrant)].GetActionKind()))
	}

	inGranted := func(path, cur string) {
		if cur != "" && len(granted) > 0 && !granted[cur] {
			c.add(path, "mandate.currency_granted", "%s is not a currency any grant permits, so this limit limits nothing; grants permit %s",
				cur, strings.Join(sortedKeys(granted), ", "))
		}
	}
	budgetAt := map[string]int{}
	for i, b := range m.GetBudgets() {
		path := fmt.Sprintf("budgets[%d]", i)
		if j, dup := budgetAt[b.GetCurrency()]; dup && b.GetCurrency() != "" {
			c.add(path+".currency", "mandate.budgets_unique_currency", "a second budget in %s; budgets[%d]%s already sets it (one budget per currency)",
				b.GetCurrency(), j, c.line(fmt.Sprintf("budgets[%d]", j)))
		} else {
			budgetAt[b.GetCurrency()] = i
		}
		if b.GetAmountMinor() == 0 {
			c.add(path+".amount_minor", "mandate.positive_limit", "a budget of 0 blocks every action in %s; to forbid it, leave the currency out of the grants", b.GetCurrency())
		}
		inGranted(path+".currency", b.GetCurrency())
	}
	for i, w := range m.GetWindows() {
		path := fmt.Sprintf("windows[%d]", i)
		if w.GetMaxCalls() == 0 && w.GetMaxAmount() == nil {
			c.add(path, "window.has_limit", "a window needs max_calls or max_amount")
		}
		if a := w.GetMaxAmount(); a != nil {
			if a.GetAmountMinor() == 0 {
				c.add(path+".max_amount.amount_minor", "mandate.positive_limit", "a window amount of 0 blocks every action; leave max_amount out for no amount limit")
			}
			inGranted(path+".max_amount.currency", a.GetCurrency())
		}
	}
	if fb := m.GetFeeBudget(); fb != nil {
		inGranted("fee_budget.currency", fb.GetCurrency())
	}
	c.grantCurrencies(m)
	idemAt := map[int32]int{}
	for i, s := range m.GetIdempotency() {
		path := fmt.Sprintf("idempotency[%d]", i)
		kind := s.GetActionKind()
		if kind != countersignv1.ActionKind_ACTION_KIND_UNSPECIFIED {
			if j, dup := idemAt[int32(kind)]; dup {
				c.add(path+".action_kind", "mandate.idempotency_unique_action", "a second idempotency setting for %s; idempotency[%d]%s already sets it",
					actionName(kind), j, c.line(fmt.Sprintf("idempotency[%d]", j)))
			} else {
				idemAt[int32(kind)] = i
			}
		}
		if kind == countersignv1.ActionKind_ACTION_KIND_REFUND && s.GetWindow() != nil {
			c.add(path+".window", "idempotency.refund_no_window",
				"refunds have no idempotency window: two identical refunds of one payment are the same action however far apart; a distinct reason is the only way to make a second one")
		}
	}
	// Tool pins are valid on any rail: a Stripe or Razorpay account may be
	// reached through a payment MCP server, and G6 applies them to its
	// tools/calls (and to nothing else). The hash's shape is protovalidate's.
	for _, f := range []struct {
		field string
		pins  map[string]string
	}{
		{"mcp_tool_description_hashes", m.GetProvenance().GetMcpToolDescriptionHashes()},
		{"mcp_tool_entry_hashes", m.GetProvenance().GetMcpToolEntryHashes()},
	} {
		field := f.field
		for _, name := range slices.Sorted(maps.Keys(f.pins)) {
			if !mcpToolNameRE.MatchString(name) {
				c.addAt(fmt.Sprintf("provenance.%s[%q]", field, name), true, "provenance.mcp_tool_name",
					fmt.Sprintf("%q is not an MCP tool name: names are 1–128 of A-Z, a-z, 0-9, _, - and . (MCP 2025-11-25, server/tools), matched exactly and case-sensitively", name))
			}
		}
	}
}

// mcpToolNameRE is the tool-name form of the MCP specification (2025-11-25,
// server/tools, "Tool names"). A pin under any other name could only be a
// typo (a stray space, a capital), which would leave the real tool unpinned
// and every call of it refused.
var mcpToolNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

func (c *checker) protovalidate(m *countersignv1.Mandate) {
	err := protovalidate.Validate(m)
	if err == nil {
		return
	}
	var verr *protovalidate.ValidationError
	if !errors.As(err, &verr) {
		c.add("", "", "the mandate could not be validated: %v", err)
		return
	}
	for _, v := range verr.Violations {
		rule := v.Proto.GetRuleId()
		if covered[rule] && c.rules[rule] {
			continue
		}
		path := protovalidate.FieldPathString(v.Proto.GetField())
		if f, ok := ruleField[rule]; ok {
			path = join(path, f)
		}
		c.addAt(path, v.Proto.GetForKey(), rule, violationMessage(v))
	}
}

// violationMessage rewrites protovalidate's messages for a field that was
// left out, which otherwise read as "value must not be in list [0]".
func violationMessage(v *protovalidate.Violation) string {
	msg := v.Proto.GetMessage()
	if msg == "" {
		msg = "breaks rule " + v.Proto.GetRuleId()
	}
	fd := v.FieldDescriptor
	if fd == nil || v.Proto.GetForKey() {
		return msg
	}
	empty := !v.FieldValue.IsValid()
	if !empty {
		switch x := v.FieldValue.Interface().(type) {
		case string:
			empty = x == ""
		case protoreflect.EnumNumber:
			empty = x == 0
		case protoreflect.List:
			empty = x.Len() == 0
		case protoreflect.Message:
			empty = !x.IsValid()
		}
	}
	switch v.Proto.GetRuleId() {
	case "required", "enum.not_in", "string.min_len", "repeated.min_items":
		if empty {
			if fd.Kind() == protoreflect.EnumKind {
				return "is required: one of " + strings.Join(EnumNames(fd.Enum()), ", ")
			}
			return "is required"
		}
	}
	return msg
}

func indexOf(grantPath string) int {
	var i int
	_, _ = fmt.Sscanf(grantPath, "grants[%d]", &i)
	return i
}

func actionName(k countersignv1.ActionKind) string {
	return EnumName(k.Descriptor(), protoreflect.EnumNumber(k))
}

func railName(r countersignv1.Rail) string {
	if r == countersignv1.Rail_RAIL_UNSPECIFIED {
		return "an unspecified rail"
	}
	return EnumName(r.Descriptor(), protoreflect.EnumNumber(r))
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
