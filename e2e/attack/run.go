package attack

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/money"
	"github.com/countersign/countersign/internal/testing/mockrail"
	"github.com/countersign/countersign/internal/testing/wait"
)

// Policy is a scripted agent: how it follows its script and reacts to
// refusals. No model is involved; every table says so.
type Policy string

// The scripted policies.
const (
	// Credulous performs every step, injected ones included, once.
	Credulous Policy = "credulous"
	// Retrying performs every step and resends any refused or failed
	// request with a fresh Idempotency-Key, up to RetryLimit times, as an
	// agent loop does.
	Retrying Policy = "retrying"
	// Careful performs every step once (it cannot tell an injected
	// instruction from its task), reads a refusal of an honest step and
	// resends it with the amount the refusal names as possible, retries an
	// honest step after a 5xx or transport error with the same key, and
	// never retries or adjusts an injected step.
	Careful Policy = "careful"
)

// Policies are the scripted policies, in table order.
var Policies = []Policy{Credulous, Retrying, Careful}

// RetryLimit is how many times the retrying policy resends a request.
const RetryLimit = 3

// Exchange is one request the agent sent and the answer it saw.
type Exchange struct {
	Step     int
	Send     int // which repetition or concurrent copy
	Attempt  int // 0 first, then retries
	Role     string
	Expect   string
	Status   int // 0: transport error
	Verdict  string
	Body     string
	Duration time.Duration
}

// Run is one scenario run under one mode and policy.
type Run struct {
	Scenario  *Scenario
	Mode      string
	Policy    Policy
	Tag       string
	Exchanges []Exchange
	Judgement Judgement
	// Final is, per honest request (step, send), its last answer.
	Final []Exchange
	// Notes are what owner steps did ("owner reject: 264 pending approvals").
	Notes []string
	Err   error
}

// succeeded is whether the agent reads the answer as success: a 2xx, and
// for MCP neither a JSON-RPC error nor a tool result marked isError.
func (x Exchange) succeeded(rail string) bool {
	if x.Status/100 != 2 {
		return false
	}
	if rail != "mcp" {
		return true
	}
	var rpc struct {
		Error  *json.RawMessage `json:"error"`
		Result struct {
			IsError bool `json:"isError"`
		} `json:"result"`
	}
	return json.Unmarshal([]byte(x.Body), &rpc) == nil && rpc.Error == nil && !rpc.Result.IsError
}

var runSeq atomic.Int64

// newTag names one run's payments and ids: [a-z0-9], unique in the process.
func newTag(mode string) string {
	return "x" + mode[:1] + strconv.FormatInt(runSeq.Add(1), 36) + strings.ToLower(rand.Text()[:3])
}

// agentKeys is what one agent holds.
type agentKeys struct{ id, secret string }

// RunScenario runs s under policy on st and judges it from the journal.
func (st *Stack) RunScenario(ctx context.Context, s *Scenario, policy Policy) *Run {
	st.mu.Lock() // runs on one stack are serial: the journal window is theirs
	defer st.mu.Unlock()
	r := &Run{Scenario: s, Mode: st.Mode, Policy: policy, Tag: newTag(st.Mode)}
	r.Err = st.run(ctx, r)
	return r
}

func (st *Stack) run(ctx context.Context, r *Run) error {
	s := r.Scenario
	vars := map[string]string{"tag": r.Tag, "mode": st.Mode}
	for _, p := range s.Setup.Payments {
		vars[p.ID] = p.ID + r.Tag
	}
	all, _ := json.Marshal(s) // the ${id.X} a scenario uses
	for _, m := range varPattern.FindAllStringSubmatch(string(all)+string(s.Setup.Mandate), -1) {
		if name, ok := strings.CutPrefix(m[1], "id."); ok {
			vars[m[1]] = name + r.Tag
		}
	}
	for _, p := range s.Setup.Payments {
		if err := st.control(ctx, http.MethodPost, "/_mock/payments", mockrail.Payment{
			Rail: mockrail.Rail(p.Rail), ID: vars[p.ID], Amount: p.Amount, Currency: p.Currency, Status: p.Status,
			ConnectedAccount: expand(p.ConnectedAccount, vars)}, nil); err != nil {
			return err
		}
	}
	agents, err := st.agents(ctx, s, vars)
	if err != nil {
		return err
	}
	before, err := st.Journal(ctx)
	if err != nil {
		return err
	}
	start := 0
	if n := len(before.Effects); n > 0 {
		start = before.Effects[n-1].Seq
	}
	if len(s.Setup.Faults) > 0 {
		if err := st.control(ctx, http.MethodPost, "/_mock/fault", map[string]any{"rules": s.Setup.Faults}, nil); err != nil {
			return err
		}
	}
	runErr := st.script(ctx, r, agents, vars)
	if len(s.Setup.Faults) > 0 {
		if err := st.control(ctx, http.MethodPost, "/_mock/fault", map[string]any{"rules": []mockrail.Fault{}}, nil); err != nil {
			return err
		}
	}
	if runErr != nil {
		return runErr
	}
	after, err := st.Journal(ctx)
	if err != nil {
		return err
	}
	var effects []mockrail.Effect
	for _, e := range after.Effects {
		if e.Seq > start {
			effects = append(effects, e)
		}
	}
	r.Judgement = Judge(s, vars, effects)
	return nil
}

// agents creates the scenario's agents gated (each an agent of the one
// owner with a credential and the setup's mandate); direct, every agent
// holds the rail keys.
func (st *Stack) agents(ctx context.Context, s *Scenario, vars map[string]string) ([]agentKeys, error) {
	out := make([]agentKeys, s.Setup.Agents)
	if st.Mode == "direct" {
		return out, nil
	}
	octx, cancel := context.WithTimeout(st.ownerCtx(ctx), 30*time.Second)
	defer cancel()
	scope := countersignv1.CredentialScope_CREDENTIAL_SCOPE_EXECUTE
	if s.Setup.Credential == "propose" {
		scope = countersignv1.CredentialScope_CREDENTIAL_SCOPE_PROPOSE
	}
	rail, account := countersignv1.Rail_RAIL_STRIPE, stripeAccount
	switch s.Rail {
	case "razorpay":
		rail, account = countersignv1.Rail_RAIL_RAZORPAY, razorpayAccount
	case "mcp": // a Stripe account reached through its MCP server
		account = mcpAccount
	}
	for i := range out {
		a, err := st.owner.CreateAgent(octx, &countersignv1.CreateAgentRequest{Agent: &countersignv1.Agent{
			DisplayName: fmt.Sprintf("%s %s #%d", s.Name, vars["tag"], i)}})
		if err != nil {
			return nil, fmt.Errorf("create agent: %w", err)
		}
		id := a.GetAgent().GetAgentId()
		c, err := st.owner.IssueCredential(octx, &countersignv1.IssueCredentialRequest{AgentId: id, Scope: scope,
			ExpireTime: timestamppb.New(time.Now().Add(24 * time.Hour))})
		if err != nil {
			return nil, fmt.Errorf("issue credential: %w", err)
		}
		setup := s.Setup
		setup.Mandate = expandJSON(s.Setup.Mandate, vars)
		m, err := setup.mandate(rail, account, id)
		if err != nil {
			return nil, err
		}
		now := time.Now().Truncate(time.Second)
		m.ValidFrom, m.ValidUntil = timestamppb.New(now.Add(-time.Hour)), timestamppb.New(now.Add(24*time.Hour))
		if _, err := st.owner.CreateMandate(octx, &countersignv1.CreateMandateRequest{Mandate: m}); err != nil {
			return nil, fmt.Errorf("create mandate: %w", err)
		}
		out[i] = agentKeys{id: id, secret: c.GetSecret()}
	}
	return out, nil
}

func (st *Stack) script(ctx context.Context, r *Run, agents []agentKeys, vars map[string]string) error {
	var mu sync.Mutex
	record := func(x Exchange) {
		mu.Lock()
		r.Exchanges = append(r.Exchanges, x)
		mu.Unlock()
	}
	start := time.Now()
	for i, step := range r.Scenario.Script {
		if len(step.Modes) > 0 && !slices.Contains(step.Modes, st.Mode) {
			continue
		}
		if step.Do != "" {
			if st.Mode == "gated" {
				note, err := st.ownerAction(ctx, step.Do, agents)
				if err != nil {
					return fmt.Errorf("script[%d] %s: %w", i, step.Do, err)
				}
				if note != "" {
					r.Notes = append(r.Notes, fmt.Sprintf("step %d: %s", i, note))
				}
			}
			continue
		}
		n, parallel := 1, false
		switch {
		case step.Repeat > 0:
			n = step.Repeat
		case step.Concurrent > 0:
			n, parallel = step.Concurrent, true
		}
		finals := make([]Exchange, n)
		one := func(send int) {
			if step.at > 0 || step.every > 0 {
				if !sleepUntil(ctx, start.Add(step.at+time.Duration(send)*step.every)) {
					return
				}
			}
			finals[send] = st.send(ctx, r.Policy, i, send, step, agents[step.Agent], vars, record)
		}
		if parallel {
			var wg sync.WaitGroup
			for k := range n {
				wg.Go(func() { one(k) })
			}
			wg.Wait()
		} else {
			for k := range n {
				one(k)
			}
		}
		if step.Role == "honest" {
			r.Final = append(r.Final, finals...)
		}
		if step.Save != "" {
			for _, x := range finals {
				var got struct {
					ID string `json:"id"`
				}
				if x.succeeded(step.Rail) && json.Unmarshal([]byte(x.Body), &got) == nil && got.ID != "" {
					vars["saved."+step.Save] = got.ID
					break
				}
			}
		}
	}
	return nil
}

// sleepUntil waits for the attacker's scheduled moment (timing the attack,
// not synchronising with anything); false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// send makes one request of step as policy would, retries included, and
// returns the last exchange.
func (st *Stack) send(ctx context.Context, policy Policy, i, k int, step Step, a agentKeys, vars map[string]string, record func(Exchange)) Exchange {
	v := map[string]string{}
	for key, val := range vars {
		v[key] = val
	}
	v["agent_id"], v["key"], v["send"] = a.id, st.heldKey(step.Rail, a), strconv.Itoa(k)
	req := buildRequest(step, v)
	key := idemKey(step.Key)
	var last Exchange
	for attempt := 0; ; attempt++ {
		x := st.do(ctx, step, req, key, a)
		x.Step, x.Send, x.Attempt, x.Role, x.Expect = i, k, attempt, step.Role, step.Expect
		record(x)
		last = x
		ok := x.succeeded(step.Rail)
		switch policy {
		case Credulous:
			return last
		case Retrying:
			if ok || attempt >= RetryLimit {
				return last
			}
			key = idemKey(step.Key)
		case Careful:
			if ok || step.Role != "honest" || attempt >= 2 {
				return last
			}
			if x.Status == 0 || x.Status >= 500 || x.Status == http.StatusConflict {
				continue // the same key: a safe retry
			}
			if x.Verdict == "HOLD" { // a hold waits for the owner; its amount is not wrong
				return last
			}
			amount, has := req.amount()
			next, found := allowedAmount(x.Body, amount)
			if !has || !found {
				return last
			}
			req = req.withAmount(next)
			key = idemKey(step.Key)
		}
	}
}

// heldKey is the secret the agent holds for rail: the rail key direct, its
// Countersign credential gated.
func (st *Stack) heldKey(rail string, a agentKeys) string {
	if st.Mode == "direct" {
		if rail == "razorpay" {
			return mockrail.DefaultRazorpayKeySecret
		}
		return mockrail.DefaultStripeKey
	}
	return a.secret
}

func idemKey(mode string) string {
	switch mode {
	case "fresh":
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		return hex.EncodeToString(b)
	case "none":
		return ""
	}
	return mode
}

// request is a step's request with its variables expanded.
type request struct {
	method, path, contentType string
	form                      url.Values
	json                      map[string]any
	raw                       string
	headers                   map[string]string
}

func buildRequest(step Step, v map[string]string) request {
	q := request{method: step.Method, path: expand(step.Path, v), headers: map[string]string{}}
	for k, val := range step.Headers {
		q.headers[k] = expand(val, v)
	}
	switch {
	case step.Form != nil:
		q.form = url.Values{}
		for k, val := range step.Form {
			q.form.Set(expand(k, v), expand(val, v))
		}
		q.contentType = "application/x-www-form-urlencoded"
	case step.JSON != nil:
		raw := string(expandJSON(step.JSON, v))
		var m map[string]any
		if json.Unmarshal([]byte(raw), &m) == nil {
			q.json = m
		}
		q.raw, q.contentType = raw, "application/json"
	case step.Body != "":
		q.raw, q.contentType = expand(step.Body, v), step.ContentType
	}
	if step.ContentType != "" {
		q.contentType = step.ContentType
	}
	return q
}

func (q request) body() string {
	if q.form != nil {
		return q.form.Encode()
	}
	return q.raw
}

func (q request) amount() (int64, bool) {
	if q.form != nil {
		n, err := strconv.ParseInt(q.form.Get("amount"), 10, 64)
		return n, err == nil
	}
	if f, ok := q.json["amount"].(float64); ok {
		return int64(f), true
	}
	return 0, false
}

func (q request) withAmount(n int64) request {
	if q.form != nil {
		f := url.Values{}
		for k, v := range q.form {
			f[k] = slices.Clone(v)
		}
		f.Set("amount", strconv.FormatInt(n, 10))
		q.form = f
		return q
	}
	m := map[string]any{}
	for k, v := range q.json {
		m[k] = v
	}
	m["amount"] = n
	b, _ := json.Marshal(m)
	q.json, q.raw = m, string(b)
	return q
}

var (
	number = regexp.MustCompile(`^\d+$`)
	// majorAmount is an amount as a person writes it, "1,899.00 USD":
	// Countersign's refusals say amounts so.
	majorAmount = regexp.MustCompile(`(\d[\d,]*(?:\.\d+)?) ([A-Z]{3})\b`)
)

// allowedAmount is what a careful agent reads in a refusal: the largest
// amount in its message below what it asked for ("250000 exceeds the 189900
// still refundable" → 189900; "100.00 USD exceeds the 64.00 USD still
// refundable" → 6400), in minor units. Refusals are JSON shaped like the
// rail's errors; the message is read, ids and codes are not.
func allowedAmount(body string, asked int64) (int64, bool) {
	var e struct {
		Error struct {
			Message     string `json:"message"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(body), &e) != nil {
		return 0, false
	}
	msg := e.Error.Message + " " + e.Error.Description
	best := int64(0)
	consider := func(n int64) {
		if n > 0 && n < asked && n > best {
			best = n
		}
	}
	for _, m := range majorAmount.FindAllStringSubmatch(msg, -1) {
		if n, ok := toMinor(m[1], m[2]); ok {
			consider(n)
		}
	}
	msg = majorAmount.ReplaceAllString(msg, " ")
	for _, w := range strings.Fields(msg) {
		// A whole word of digits ("(189900)."): digits inside an id such
		// as pi_1002 or a mandate hash name no amount.
		w = strings.Trim(w, "()[]{}.,;:'\"")
		if number.MatchString(w) {
			if n, err := strconv.ParseInt(w, 10, 64); err == nil {
				consider(n)
			}
		}
	}
	return best, best > 0
}

// toMinor converts "1,899.00" in currency to minor units.
func toMinor(major, currency string) (int64, bool) {
	exp, ok := money.Exponent(currency)
	if !ok {
		return 0, false
	}
	whole, frac, _ := strings.Cut(strings.ReplaceAll(major, ",", ""), ".")
	if len(frac) > exp {
		return 0, false
	}
	frac += strings.Repeat("0", exp-len(frac))
	n, err := strconv.ParseInt(whole+frac, 10, 64)
	return n, err == nil
}

// do sends one attempt and times it.
func (st *Stack) do(ctx context.Context, step Step, q request, key string, a agentKeys) Exchange {
	base := st.Egress[step.Rail]
	switch step.Target {
	case "rail":
		base = st.RailURL
	case "countersign":
		base = st.CountersignHTTP
	}
	var body io.Reader
	if b := q.body(); b != "" || q.method == http.MethodPost {
		body = strings.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, q.method, base+q.path, body)
	if err != nil {
		return Exchange{Body: err.Error()}
	}
	if q.contentType != "" {
		req.Header.Set("Content-Type", q.contentType)
	}
	if step.Auth == "agent" {
		secret := st.heldKey(step.Rail, a)
		if step.Rail == "razorpay" {
			id := a.id
			if st.Mode == "direct" {
				id = mockrail.DefaultRazorpayKeyID
			}
			req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(id+":"+secret)))
		} else {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
	}
	if key != "" && step.Rail != "mcp" { // an MCP client sends no Idempotency-Key
		switch {
		case step.Rail == "stripe":
			req.Header.Set("Idempotency-Key", key)
		case strings.Contains(q.path, "/refund"):
			req.Header.Set("X-Refund-Idempotency", key)
		case strings.Contains(q.path, "/payouts"):
			req.Header.Set("X-Payout-Idempotency", key)
		}
	}
	if step.Rail == "mcp" && q.headers["Accept"] == "" { // streamable HTTP's client
		req.Header.Set("Accept", "application/json, text/event-stream")
	}
	for k, v := range q.headers {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := st.client.Do(req)
	if err != nil {
		return Exchange{Duration: time.Since(start), Body: err.Error()}
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return Exchange{Status: resp.StatusCode, Verdict: resp.Header.Get("X-Countersign-Verdict"), Body: string(b), Duration: time.Since(start)}
}

// ownerAction approves or rejects every pending approval of the agents,
// every page of them (a flood of HOLDs is longer than a page), and says
// how many.
func (st *Stack) ownerAction(ctx context.Context, do string, agents []agentKeys) (string, error) {
	if st.owner == nil {
		return "", errNoOwner
	}
	octx, cancel := context.WithTimeout(st.ownerCtx(ctx), 30*time.Second)
	defer cancel()
	if do == "await-expiry" {
		return "", st.awaitExpiry(octx, agents)
	}
	n := 0
	for _, a := range agents {
		var ids []string
		for token := ""; ; {
			resp, err := st.owner.ListApprovals(octx, &countersignv1.ListApprovalsRequest{AgentId: a.id,
				State: countersignv1.ApprovalState_APPROVAL_STATE_PENDING, PageSize: 100, PageToken: token})
			if err != nil {
				return "", err
			}
			for _, ap := range resp.GetApprovals() {
				ids = append(ids, ap.GetApprovalId())
			}
			if token = resp.GetNextPageToken(); token == "" {
				break
			}
		}
		for _, id := range ids {
			var err error
			if do == "approve" {
				_, err = st.owner.ApproveApproval(octx, &countersignv1.ApproveApprovalRequest{ApprovalId: id})
			} else {
				_, err = st.owner.RejectApproval(octx, &countersignv1.RejectApprovalRequest{ApprovalId: id})
			}
			if err != nil {
				return "", err
			}
			n++
		}
	}
	return fmt.Sprintf("owner %s: %d pending approvals", do, n), nil
}

// awaitExpiry waits until the last approved approval of the agents has
// expired (expiry is a time, so the condition is the clock's).
func (st *Stack) awaitExpiry(ctx context.Context, agents []agentKeys) error {
	var last time.Time
	for _, a := range agents {
		resp, err := st.owner.ListApprovals(ctx, &countersignv1.ListApprovalsRequest{AgentId: a.id,
			State: countersignv1.ApprovalState_APPROVAL_STATE_APPROVED, PageSize: 100})
		if err != nil {
			return err
		}
		for _, ap := range resp.GetApprovals() {
			if t := ap.GetExpireTime().AsTime(); t.After(last) {
				last = t
			}
		}
	}
	if last.IsZero() {
		return errors.New("no approved approval to wait for")
	}
	if time.Until(last) > 10*time.Second {
		return fmt.Errorf("the approval expires at %s, over 10 s away: give the mandate a short approval_ttl", last)
	}
	if !wait.Until(10*time.Second, func() bool { return time.Now().After(last) }) {
		return errors.New("the approval did not expire")
	}
	return nil
}
