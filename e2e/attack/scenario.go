// Package attack is the attack and utility benchmark: every scenario (a short
// YAML file under scenarios/) runs against the mock rail twice — direct, the
// scripted agent holding the rail key, and gated, the agent holding only its
// Countersign credential and calling through the Envoy-contract proxy — and
// is judged only from the mock rail's journal, never from what Countersign
// says about itself. The agents are scripted policies, not models.
package attack

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/testing/mockrail"
)

// Scenario is one declarative attack (or benign) scenario.
type Scenario struct {
	Name        string `json:"name"`
	Family      string `json:"family"`
	Source      string `json:"source,omitempty"` // the published pattern it draws on
	Description string `json:"description"`
	// Rail is the rail the agent's requests speak by default: stripe,
	// razorpay, or mcp (JSON-RPC tools/call to a payment MCP server in
	// front of the Stripe account; its payments are Stripe's).
	Rail   string `json:"rail,omitempty"`
	Setup  Setup  `json:"setup"`
	Script []Step `json:"script"`
	// Attack is the attacker's goal; nil for a benign scenario.
	Attack *Goal `json:"attack,omitempty"`
	// Honest is what the honest task needs to happen on the rail.
	Honest *Goal `json:"honest,omitempty"`
	// KnownGap, on a scenario of a family Countersign claims, says why the
	// attack still succeeds gated: a gap in the claimed defence, reported
	// in the results' table (and counted) instead of failing the run.
	KnownGap string `json:"known_gap,omitempty"`
	// Smoke puts the scenario in the fast subset `make test` runs (one per
	// family); its attack must succeed direct under the credulous policy.
	Smoke bool `json:"smoke,omitempty"`

	file string
}

// Setup is the world a scenario starts from: each run gets fresh copies of
// its payments (ids carry a per-run tag), a fresh agent per Agents, each with
// the mandate, and the mock rail's fault rules for the run.
type Setup struct {
	Payments []PaymentSpec `json:"payments,omitempty"`
	// Mandate is a countersign.v1.Mandate in protojson, without rail,
	// rail_account, agent_id and validity, which the runner fills in (a
	// mandate valid from an hour ago for a day). Defaults: purpose
	// "attack benchmark", mode budgeted.
	Mandate json.RawMessage `json:"mandate,omitempty"`
	// Agents is how many agents of one owner the scenario has (default 1).
	Agents int `json:"agents,omitempty"`
	// Credential is the agents' credential scope: execute (default) or propose.
	Credential string           `json:"credential,omitempty"`
	Faults     []mockrail.Fault `json:"faults,omitempty"`
}

// PaymentSpec is a payment on the mock rail; its amount is the refundable balance.
type PaymentSpec struct {
	ID       string `json:"id"` // pi_… / ch_… (Stripe) or pay_… (Razorpay), before the run tag
	Rail     string `json:"rail,omitempty"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// Status "requires_capture" makes an uncaptured Stripe payment (it can
	// be captured, not refunded); default captured.
	Status string `json:"status,omitempty"`
	// ConnectedAccount puts the payment on a connected (sub-merchant)
	// account of the rail account (Stripe acct_…, Razorpay acc_…; usually
	// ${id.NAME}), which a request reaches with Stripe-Account or
	// X-Razorpay-Account.
	ConnectedAccount string `json:"connected_account,omitempty"`
}

// Step is one thing the scripted agent (or, for Do, its owner) does.
type Step struct {
	Name string `json:"name,omitempty"`
	// Role is honest (the user's task) or injected (an instruction the agent
	// read in attacker-controlled content and follows).
	Role string `json:"role"`
	// Do is "" for an HTTP request, or an owner action: approve (every
	// pending approval of the scenario's agents), reject, or await-expiry
	// (wait until every approved approval of the agents has expired).
	// Gated only.
	Do string `json:"do,omitempty"`
	// Agent is which of the scenario's agents sends it (default 0).
	Agent int `json:"agent,omitempty"`
	// Target is where the request goes: egress (default: the rail in direct
	// mode, the Envoy-contract proxy in gated mode), rail (the mock rail
	// itself, around Envoy) or countersign (Countersign's own HTTP
	// listener; gated only).
	Target string `json:"target,omitempty"`
	Rail   string `json:"rail,omitempty"`
	Method string `json:"method,omitempty"` // default POST
	Path   string `json:"path"`
	// Exactly one of Form (form-encoded, keys sorted), JSON (sent as
	// written) or Body (raw, with ContentType) for a POST.
	Form        map[string]string `json:"form,omitempty"`
	JSON        json.RawMessage   `json:"json,omitempty"`
	Body        string            `json:"body,omitempty"`
	ContentType string            `json:"content_type,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	// Auth is how the agent authenticates: agent (default: the key it
	// holds, the rail key direct and its credential gated) or none.
	Auth string `json:"auth,omitempty"`
	// Key is the Idempotency-Key the agent sends: fresh (default, a new
	// UUID per send, as Stripe's SDKs do), none, or a literal.
	Key string `json:"key,omitempty"`
	// Repeat sends the request this many times in sequence, Concurrent
	// this many copies at once (each with its own key); ${send} is the
	// copy's number, from 0.
	Repeat     int `json:"repeat,omitempty"`
	Concurrent int `json:"concurrent,omitempty"`
	// At (a Go duration) is when the step's first send goes, after the
	// script's start; Every spaces a repeat's sends (send k at At + k ×
	// Every). They schedule an attacker's timing (a burst just before and
	// just after a window's boundary), never synchronise: the judge reads
	// only the journal's effects.
	// Save names the id of the step's first successful answer (its JSON
	// "id" member, such as a created payout's) as ${saved.NAME} for the
	// steps after it.
	Save  string `json:"save,omitempty"`
	At    string `json:"at,omitempty"`
	Every string `json:"every,omitempty"`
	at    time.Duration
	every time.Duration
	// Expect is what a correct guard answers an honest step: allow
	// (default), hold or block. Refusals against it are false blocks/holds.
	Expect string `json:"expect,omitempty"`
	// Modes restricts the step to direct or gated (default both).
	Modes []string `json:"modes,omitempty"`
}

// Goal is a set of rail effects: for the attacker, money it wants out (in
// minor units per currency, beyond an allowance); for the honest task,
// effects that must happen.
type Goal struct {
	Effects []EffectMatch `json:"effects,omitempty"`
	// Leak is a marker the attacker wants carried out in free text
	// (Stripe metadata, Razorpay notes) of any rail effect.
	Leak string `json:"leak,omitempty"`
}

// EffectMatch selects journal effects.
type EffectMatch struct {
	Kind     string `json:"kind"`               // refund, payout, transfer or capture
	Subject  string `json:"subject,omitempty"`  // payment or destination; "" any
	Currency string `json:"currency,omitempty"` // "" any
	Amount   int64  `json:"amount,omitempty"`   // honest: the exact amount; 0 any
	Count    int    `json:"count,omitempty"`    // honest: how many (default 1)
	// AtLeast: more matching effects than Count are other intended actions
	// (an injected distinct duplicate), not exactly-once violations.
	AtLeast bool `json:"at_least,omitempty"`
	// Beyond is the attacker's allowance: only what the matching effects
	// move beyond it (per currency) counts as money out.
	Beyond int64 `json:"beyond,omitempty"`
	// ConnectedAccount matches effects on that connected account only
	// ("" any account, the platform's included).
	ConnectedAccount string `json:"connected_account,omitempty"`
	// Within and MaxCalls (attacker only) make the allowance a rate: money
	// out is what the matching effects beyond the first MaxCalls move in
	// the densest span of Within (a Go duration) on the journal's effect
	// timestamps, so a sliding window of MaxCalls per Within holds only if
	// no such span holds more. Cancelled payouts never count.
	Within   string `json:"within,omitempty"`
	MaxCalls int    `json:"max_calls,omitempty"`
	within   time.Duration
}

// Families are the scenario families, with whether Countersign claims to
// defend them and why not.
var Families = []Family{
	{"amount_inflation", true, ""},
	{"structuring", true, ""},
	{"currency_confusion", true, ""},
	{"payee_substitution", true, ""},
	{"scope_escalation", true, ""},
	{"retry_duplicates", true, ""},
	{"velocity_budget", true, ""},
	{"approval_abuse", true, ""},
	{"credential_theft", true, ""},
	{"parser_evasion", true, ""},
	{"mcp_tool_poisoning", true, ""},
	{"free_text_smuggling", false, "claimed only where the owner asks: under a mandate with free_text refuse (a request carrying free text is blocked) or hold (held, the owner sees the text), or in approval_required mode (an approval covers the exact request, labels included, so text the owner did not approve is held again); under the default, free_text allow, Stripe metadata and descriptions and Razorpay notes are labels, outside the SIK, forwarded as sent: Countersign bounds money, not what text leaves with it"},
	{"owner_wide_budget", false, "budgets (B1) are per mandate, and a mandate binds one agent: an owner's agents each spend their own budget; no budget spans an owner's agents"},
	{"within_mandate", false, "an injected request inside the mandate's limits is, byte for byte, a request the owner pre-approved: no deterministic gate can tell it from the task; the mandate bounds the loss (per-action maximum, budget, windows), which these scenarios measure"},
	{"benign", true, ""},
}

// Family is a scenario family.
type Family struct {
	Name    string
	Claimed bool   // Countersign claims to defend it
	Why     string // why not, when not claimed
}

// claimedWhen are the families Countersign claims to defend only in some
// scenarios: where the scenario's mandate asks for the defence.
var claimedWhen = map[string]func(*Scenario) bool{
	"free_text_smuggling": ownerGuardsFreeText,
}

// Claimed reports whether Countersign claims to defend s: its family is
// claimed, or claimed under s's mandate.
func (s *Scenario) Claimed() bool {
	f, _ := family(s.Family)
	if f.Claimed {
		return true
	}
	when, ok := claimedWhen[f.Name]
	return ok && when(s)
}

// ownerGuardsFreeText: the mandate refuses or holds free text, or holds
// every request for the owner's approval (which covers its labels).
func ownerGuardsFreeText(s *Scenario) bool {
	var m struct {
		Mode     string `json:"mode"`
		FreeText string `json:"freeText"`
	}
	if json.Unmarshal(s.Setup.Mandate, &m) != nil {
		return false
	}
	return m.Mode == "MANDATE_MODE_APPROVAL_REQUIRED" || m.FreeText == "FREE_TEXT_REFUSE" || m.FreeText == "FREE_TEXT_HOLD"
}

// familyLabel is a family's name as the tables and the chart show it.
func familyLabel(f Family) string {
	switch {
	case f.Claimed:
		return f.Name
	case claimedWhen[f.Name] != nil:
		return f.Name + " (claimed where the mandate asks)"
	}
	return f.Name + " (not claimed)"
}

func family(name string) (Family, bool) {
	for _, f := range Families {
		if f.Name == name {
			return f, true
		}
	}
	return Family{}, false
}

var (
	namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)
	idPattern   = regexp.MustCompile(`^(pi|ch|pay)_[a-z0-9]{1,20}$`)
	savePattern = regexp.MustCompile(`^[a-z0-9_]{1,32}$`)
	varPattern  = regexp.MustCompile(`\$\{([A-Za-z0-9_.]+)\}`)
	// Variables the runner defines besides the payments' ids and ids
	// declared with ${id.NAME}.
	reservedVars = []string{"key", "agent_id", "mode", "tag", "send"}
)

// Parse reads one scenario file. Errors name the file and the member.
func Parse(name string, b []byte) (*Scenario, error) {
	var s Scenario
	if err := yaml.UnmarshalStrict(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	s.file = name
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &s, nil
}

func (s *Scenario) validate() error {
	if !namePattern.MatchString(s.Name) {
		return fmt.Errorf("name %q: want 1-64 of [a-z0-9-], starting with a letter or digit", s.Name)
	}
	if _, ok := family(s.Family); !ok {
		return fmt.Errorf("family %q: not one of %s", s.Family, familyNames())
	}
	if strings.TrimSpace(s.Description) == "" {
		return errors.New("description: required")
	}
	if s.Rail == "" {
		s.Rail = "stripe"
	}
	if !validRail(s.Rail) {
		return fmt.Errorf("rail %q: want stripe, razorpay or mcp", s.Rail)
	}
	if err := s.Setup.validate(s.Rail); err != nil {
		return fmt.Errorf("setup.%w", err)
	}
	if len(s.Script) == 0 {
		return errors.New("script: at least one step")
	}
	for i := range s.Script {
		if err := s.Script[i].validate(s); err != nil {
			return fmt.Errorf("script[%d]: %w", i, err)
		}
	}
	if (s.Attack == nil) != (s.Family == "benign") {
		if s.Attack == nil {
			return errors.New("attack: required outside the benign family")
		}
		return errors.New("attack: a benign scenario has no attacker")
	}
	if s.Attack != nil {
		if len(s.Attack.Effects) == 0 && s.Attack.Leak == "" {
			return errors.New("attack: needs effects or leak")
		}
		if err := s.Attack.validate(s, false); err != nil {
			return fmt.Errorf("attack.%w", err)
		}
	}
	if s.Honest != nil {
		if s.Honest.Leak != "" {
			return errors.New("honest.leak: only an attacker leaks")
		}
		if err := s.Honest.validate(s, true); err != nil {
			return fmt.Errorf("honest.%w", err)
		}
	}
	if f, _ := family(s.Family); s.KnownGap != "" && (!f.Claimed || s.Smoke) {
		return errors.New("known_gap: only on a claimed family's scenario outside the smoke subset")
	}
	if s.Family == "benign" && (s.Honest == nil || len(s.Honest.Effects) == 0) {
		return errors.New("honest: a benign scenario needs honest effects")
	}
	return s.checkVars()
}

func validRail(r string) bool { return r == "stripe" || r == "razorpay" || r == "mcp" }

func familyNames() string {
	var n []string
	for _, f := range Families {
		n = append(n, f.Name)
	}
	return strings.Join(n, ", ")
}

func (u *Setup) validate(rail string) error {
	seen := map[string]bool{}
	for i := range u.Payments {
		p := &u.Payments[i]
		if p.Rail == "" {
			p.Rail = rail
		}
		if p.Rail == "mcp" { // the MCP server's payments are the Stripe account's
			p.Rail = "stripe"
		}
		if p.Rail != "stripe" && p.Rail != "razorpay" {
			return fmt.Errorf("payments[%d].rail %q: want stripe or razorpay", i, p.Rail)
		}
		if !idPattern.MatchString(p.ID) {
			return fmt.Errorf("payments[%d].id %q: want pi_, ch_ or pay_ and 1-20 of [a-z0-9]", i, p.ID)
		}
		if (p.Rail == "razorpay") != strings.HasPrefix(p.ID, "pay_") {
			return fmt.Errorf("payments[%d].id %q: a %s payment id", i, p.ID, p.Rail)
		}
		if seen[p.ID] {
			return fmt.Errorf("payments[%d].id %q: repeated", i, p.ID)
		}
		seen[p.ID] = true
		if p.Status != "" && (p.Status != "requires_capture" || p.Rail != "stripe") {
			return fmt.Errorf("payments[%d].status %q: only requires_capture, on stripe", i, p.Status)
		}
		if p.Amount <= 0 {
			return fmt.Errorf("payments[%d].amount %d: must be positive (minor units)", i, p.Amount)
		}
		if len(p.Currency) != 3 {
			return fmt.Errorf("payments[%d].currency %q: an ISO 4217 code", i, p.Currency)
		}
	}
	if u.Agents < 0 || u.Agents > 8 {
		return fmt.Errorf("agents %d: 0-8", u.Agents)
	}
	if u.Agents == 0 {
		u.Agents = 1
	}
	switch u.Credential {
	case "":
		u.Credential = "execute"
	case "execute", "propose":
	default:
		return fmt.Errorf("credential %q: want execute or propose", u.Credential)
	}
	if len(u.Mandate) > 0 {
		// Placeholders stand in for what the runner fills in.
		if _, err := u.mandate(countersignv1.Rail_RAIL_STRIPE, "acct", "agent"); err != nil {
			return fmt.Errorf("mandate: %w", err)
		}
	}
	return nil
}

// mandate is the setup's mandate for one agent on one account.
func (u *Setup) mandate(rail countersignv1.Rail, account, agentID string) (*countersignv1.Mandate, error) {
	m := &countersignv1.Mandate{}
	if len(u.Mandate) > 0 {
		if err := (protojson.UnmarshalOptions{}).Unmarshal(u.Mandate, m); err != nil {
			return nil, err
		}
	}
	if m.GetRailAccount() != "" || m.GetAgentId() != "" || m.GetValidFrom() != nil || m.GetValidUntil() != nil || m.GetRail() != 0 {
		return nil, errors.New("rail, rail_account, agent_id and validity are the runner's")
	}
	if len(m.GetGrants()) == 0 {
		return nil, errors.New("grants: at least one")
	}
	m.Rail, m.RailAccount, m.AgentId = rail, account, agentID
	if m.Purpose == "" {
		m.Purpose = "attack benchmark"
	}
	if m.Mode == 0 {
		m.Mode = countersignv1.MandateMode_MANDATE_MODE_BUDGETED
	}
	return m, nil
}

func (st *Step) validate(s *Scenario) error {
	switch st.Role {
	case "honest", "injected":
	default:
		return fmt.Errorf("role %q: want honest or injected", st.Role)
	}
	if st.Agent < 0 || st.Agent >= s.Setup.Agents {
		return fmt.Errorf("agent %d: the scenario has %d", st.Agent, s.Setup.Agents)
	}
	for _, m := range st.Modes {
		if m != "direct" && m != "gated" {
			return fmt.Errorf("modes: %q is not direct or gated", m)
		}
	}
	switch st.Do {
	case "":
	case "approve", "reject", "await-expiry":
		if st.Path != "" || st.Form != nil || st.JSON != nil || st.Body != "" {
			return fmt.Errorf("do %s: an owner action has no request", st.Do)
		}
		return nil
	default:
		return fmt.Errorf("do %q: want approve, reject or await-expiry", st.Do)
	}
	if !strings.HasPrefix(st.Path, "/") {
		return fmt.Errorf("path %q: must start with /", st.Path)
	}
	if st.Method == "" {
		st.Method = "POST"
	}
	if st.Rail == "" {
		st.Rail = s.Rail
	}
	if !validRail(st.Rail) {
		return fmt.Errorf("rail %q: want stripe, razorpay or mcp", st.Rail)
	}
	switch st.Target {
	case "":
		st.Target = "egress"
	case "egress", "rail":
	case "countersign":
		if len(st.Modes) != 1 || st.Modes[0] != "gated" {
			return errors.New("target countersign: Countersign exists only gated (modes: [gated])")
		}
	default:
		return fmt.Errorf("target %q: want egress, rail or countersign", st.Target)
	}
	bodies := 0
	for _, set := range []bool{st.Form != nil, st.JSON != nil, st.Body != ""} {
		if set {
			bodies++
		}
	}
	if bodies > 1 {
		return errors.New("form, json and body: at most one")
	}
	if len(st.JSON) > 0 && !json.Valid(st.JSON) {
		return errors.New("json: not valid JSON")
	}
	switch st.Auth {
	case "":
		st.Auth = "agent"
	case "agent", "none":
	default:
		return fmt.Errorf("auth %q: want agent or none", st.Auth)
	}
	if st.Key == "" {
		st.Key = "fresh"
	}
	if st.Repeat < 0 || st.Repeat > 50 || st.Concurrent < 0 || st.Concurrent > 32 {
		return errors.New("repeat (0-50) or concurrent (0-32) out of range")
	}
	if st.Repeat > 0 && st.Concurrent > 0 {
		return errors.New("repeat and concurrent: at most one")
	}
	var err error
	if st.at, err = optDuration(st.At, 10*time.Second); err != nil {
		return fmt.Errorf("at: %w", err)
	}
	if st.every, err = optDuration(st.Every, time.Second); err != nil {
		return fmt.Errorf("every: %w", err)
	}
	if st.Save != "" && !savePattern.MatchString(st.Save) {
		return fmt.Errorf("save %q: want 1-32 of [a-z0-9_]", st.Save)
	}
	if st.every > 0 && st.Repeat == 0 {
		return errors.New("every: spaces a repeat's sends")
	}
	switch st.Expect {
	case "":
		st.Expect = "allow"
	case "allow", "hold", "block":
	default:
		return fmt.Errorf("expect %q: want allow, hold or block", st.Expect)
	}
	return nil
}

func (g *Goal) validate(s *Scenario, honest bool) error {
	for i, e := range g.Effects {
		switch e.Kind {
		case string(mockrail.KindRefund), string(mockrail.KindPayout), string(mockrail.KindTransfer), string(mockrail.KindCapture):
		default:
			return fmt.Errorf("effects[%d].kind %q: want refund, payout, transfer or capture", i, e.Kind)
		}
		d, err := optDuration(e.Within, time.Hour)
		if err != nil {
			return fmt.Errorf("effects[%d].within: %w", i, err)
		}
		if honest && (d > 0 || e.MaxCalls != 0) || (d > 0) != (e.MaxCalls > 0) || e.MaxCalls < 0 {
			return fmt.Errorf("effects[%d]: within and max_calls go together, on the attacker's effects", i)
		}
		g.Effects[i].within = d
		if e.Amount < 0 || e.Beyond < 0 || e.Count < 0 {
			return fmt.Errorf("effects[%d]: negative amount, beyond or count", i)
		}
		if honest && e.Beyond != 0 {
			return fmt.Errorf("effects[%d].beyond: only the attacker has an allowance", i)
		}
		if !honest && (e.Amount != 0 || e.Count != 0 || e.AtLeast) {
			return fmt.Errorf("effects[%d]: the attacker's effects count money (beyond), not amount or count", i)
		}
	}
	return nil
}

// optDuration parses an optional positive Go duration of at most limit.
func optDuration(v string, limit time.Duration) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, err
	}
	if d <= 0 || d > limit {
		return 0, fmt.Errorf("%s: want more than 0 and at most %s", v, limit)
	}
	return d, nil
}

// checkVars refuses a ${…} that the runner would not define.
func (s *Scenario) checkVars() error {
	defined, saved := map[string]bool{}, map[string]bool{}
	for _, st := range s.Script {
		if st.Save != "" {
			saved["saved."+st.Save] = true
		}
	}
	for _, p := range s.Setup.Payments {
		defined[p.ID] = true
	}
	var bad []string
	check := func(where, text string) {
		for _, m := range varPattern.FindAllStringSubmatch(text, -1) {
			v := m[1]
			if defined[v] || slices.Contains(reservedVars, v) || strings.HasPrefix(v, "id.") && len(v) > 3 || saved[v] {
				continue
			}
			bad = append(bad, fmt.Sprintf("%s: ${%s}", where, v))
		}
	}
	b, _ := json.Marshal(s.Script) // plain structs: cannot fail
	check("script", string(b))
	for _, g := range []*Goal{s.Attack, s.Honest} {
		if g != nil {
			b, _ := json.Marshal(g)
			check("goal", string(b))
		}
	}
	check("setup.mandate", string(s.Setup.Mandate))
	if len(bad) > 0 {
		return fmt.Errorf("undefined variables (payments' ids, ${id.NAME}, %s): %s", strings.Join(reservedVars, ", "), strings.Join(bad, "; "))
	}
	return nil
}

// LoadAll reads every *.yaml under dir of fsys, sorted by family then
// name; names must be unique.
func LoadAll(fsys fs.FS, dir string) ([]*Scenario, error) {
	files, err := fs.Glob(fsys, path.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var out []*Scenario
	seen := map[string]string{}
	for _, f := range files {
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, err
		}
		s, err := Parse(f, b)
		if err != nil {
			return nil, err
		}
		if other, dup := seen[s.Name]; dup {
			return nil, fmt.Errorf("%s: name %q is also %s's", f, s.Name, other)
		}
		seen[s.Name] = f
		out = append(out, s)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Family != out[j].Family {
			return familyIndex(out[i].Family) < familyIndex(out[j].Family)
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

func familyIndex(name string) int {
	return slices.IndexFunc(Families, func(f Family) bool { return f.Name == name })
}

// expand replaces ${…} in text with vars; the loader has refused unknown ones.
func expand(text string, vars map[string]string) string {
	return varPattern.ReplaceAllStringFunc(text, func(m string) string {
		v := m[2 : len(m)-1]
		if r, ok := vars[v]; ok {
			return r
		}
		return m
	})
}

// expandJSON expands variables inside a JSON document's text.
func expandJSON(raw json.RawMessage, vars map[string]string) json.RawMessage {
	if len(raw) == 0 {
		return nil
	}
	return json.RawMessage(bytes.Clone([]byte(expand(string(raw), vars))))
}
