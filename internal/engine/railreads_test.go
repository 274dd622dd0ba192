package engine

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/gate"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/mandate"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/mcp"
	"github.com/countersign/countersign/internal/testing/mockrail"
	"github.com/countersign/countersign/internal/testing/testclock"
)

// limitRailReads is e rebuilt, over the same ledger and rails, with the
// rail read limit of rate reads a second and burst at once, on clock.
func limitRailReads(e *Engine, rate float64, burst int, clock func() time.Time) *Engine {
	return rebuilt(e, func(o *Options) { o.RailReadRate, o.RailReadBurst, o.Now = rate, burst, clock })
}

// rebuilt is e rebuilt over the same ledger and rails with its options
// edited.
func rebuilt(e *Engine, edit func(*Options)) *Engine {
	o := e.opts
	edit(&o)
	return New(e.ledger, o, e.log, e.metrics)
}

// railReads counts the GETs the mock rail received.
func railReads(m *mockrail.Server) int {
	n := 0
	for _, r := range m.Journal().Requests {
		if r.Method == http.MethodGet {
			n++
		}
	}
	return n
}

// anotherAgent is a second agent of the rig's owner, with its own execute
// credential and a mandate granting refunds on acct_1; it returns the
// credential.
func (r *rig) anotherAgent(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	owner, err := r.store.AgentOwner(ctx, r.principal(t).Agent.ID)
	if err != nil {
		t.Fatal(err)
	}
	agent, err := r.store.CreateAgent(ctx, owner, "agent 2")
	if err != nil {
		t.Fatal(err)
	}
	secret, hash, err := credential.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.IssueCredential(ctx, agent.ID, credential.ScopeExecute, time.Now().Add(time.Hour), hash); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Second)
	rec, err := mandate.Record(&countersignv1.Mandate{
		Rail: countersignv1.Rail_RAIL_STRIPE, RailAccount: "acct_1", AgentId: agent.ID, Purpose: "second agent",
		ValidFrom: timestamppb.New(now.Add(-time.Hour)), ValidUntil: timestamppb.New(now.Add(24 * time.Hour)),
		Mode:   countersignv1.MandateMode_MANDATE_MODE_BUDGETED,
		Grants: []*countersignv1.Grant{{ActionKind: countersignv1.ActionKind_ACTION_KIND_REFUND, MaxAmountMinor: 1 << 40, Currencies: []string{"USD"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.CreateMandate(ctx, rec); err != nil {
		t.Fatal(err)
	}
	return secret
}

// rowCounts counts the rows a decision may write, by table.
func rowCounts(t *testing.T, url string) map[string]int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	out := map[string]int{}
	for _, table := range []string{"decisions", "intents", "intent_aliases", "attempts", "budget_holds", "approvals"} {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		out[table] = n
	}
	return out
}

// TestAgentsRailReadsAreLimited: an agent whose new requests have used up
// its rail reads on an account is refused (rail_reads_limited, 429 with
// Retry-After) before any further read, with one decision record and
// nothing else written; another agent on the same account is not held
// back; once the clock has refilled the bucket the agent is served again.
func TestAgentsRailReadsAreLimited(t *testing.T) {
	r := newRig(t)
	clock := testclock.New(time.Now())
	r.e = limitRailReads(r.e, 0.5, 3, clock.Now)
	ctx := context.Background()
	refund := func(secret, id string, amount int) Outcome {
		req := r.refundOf(amount)
		req.Credential, req.RequestID = secret, id
		return r.e.Decide(ctx, req)
	}
	for i := range 3 {
		if out := refund(r.secret, "req-"+strconv.Itoa(i), 100+i); out.Verdict != Allow {
			t.Fatalf("refund %d within the burst = %s %s: %s", i, out.Verdict, out.ReasonCode, out.Reason)
		}
	}
	if n := railReads(r.mock); n != 3 {
		t.Fatalf("%d rail reads after three new refunds; want one each", n)
	}

	before := rowCounts(t, r.url)
	out := refund(r.secret, "req-over", 200)
	if out.Verdict != Block || out.ReasonCode != ReasonRailReadsLimited || out.HTTPStatus != http.StatusTooManyRequests {
		t.Fatalf("refund past the burst = %s %s %d: %s; want BLOCK %s 429", out.Verdict, out.ReasonCode, out.HTTPStatus, out.Reason, ReasonRailReadsLimited)
	}
	// 0.5 reads a second: the next token is 2 s away.
	if got := out.ResponseHeaders["retry-after"]; got != "2" {
		t.Errorf("retry-after = %q, want 2", got)
	}
	for _, s := range []string{"no money moved", "Retry after 2s", "0.5 a second, 3 at once"} {
		if !strings.Contains(out.Reason, s) {
			t.Errorf("reason %q lacks %q", out.Reason, s)
		}
	}
	var body struct {
		Error struct{ Type, Code, Message string } `json:"error"`
	}
	if err := json.Unmarshal(out.Body, &body); err != nil || body.Error.Code != ReasonRailReadsLimited || body.Error.Message != out.Reason {
		t.Errorf("refusal body %s: want the rail's error shape carrying %s (%v)", out.Body, ReasonRailReadsLimited, err)
	}
	if out.Intent != nil || out.DecisionID == 0 {
		t.Errorf("refusal names intent %+v, decision %d; want no intent and its decision", out.Intent, out.DecisionID)
	}
	if n := railReads(r.mock); n != 3 {
		t.Fatalf("%d rail reads: the refused request read the rail", n)
	}
	after := rowCounts(t, r.url)
	for table, n := range after {
		want := before[table]
		if table == "decisions" {
			want++
		}
		if n != want {
			t.Errorf("%s: %d rows after the refusal, %d before; want only the one decision", table, n, before[table])
		}
	}
	ds, err := r.store.DecisionsByRequest(ctx, "req-over")
	if err != nil || len(ds) != 1 || ds[0].Verdict != string(Block) || ds[0].ReasonCode != ReasonRailReadsLimited {
		t.Fatalf("decisions of the refused request = %+v, %v; want one BLOCK %s", ds, err, ReasonRailReadsLimited)
	}

	// Another agent on the same account has a bucket of its own.
	other := r.anotherAgent(t)
	if out := refund(other, "req-other", 300); out.Verdict != Allow {
		t.Fatalf("another agent's refund = %s %s: %s", out.Verdict, out.ReasonCode, out.Reason)
	}
	if n := railReads(r.mock); n != 4 {
		t.Fatalf("%d rail reads; want the other agent's one more", n)
	}

	// Not yet refilled, then refilled.
	clock.Advance(time.Second)
	if out := refund(r.secret, "req-early", 201); out.ReasonCode != ReasonRailReadsLimited || out.ResponseHeaders["retry-after"] != "1" {
		t.Fatalf("after 1 s = %s retry-after %q: %s; want still limited, 1 s to go", out.ReasonCode, out.ResponseHeaders["retry-after"], out.Reason)
	}
	clock.Advance(time.Second)
	if out := refund(r.secret, "req-later", 202); out.Verdict != Allow {
		t.Fatalf("after the bucket refilled = %s %s: %s", out.Verdict, out.ReasonCode, out.Reason)
	}
	if n := railReads(r.mock); n != 5 {
		t.Fatalf("%d rail reads; want one more for the refilled bucket's request", n)
	}
}

// TestLedgerAnswersAndEarlyRefusalsSpendNoRailReads: a duplicate of an
// applied refund is answered from the ledger, and a refund over the
// mandate's per-action maximum is refused by the early limits: neither
// reads the rail, so neither takes a token from the agent's bucket. The
// bucket is then still exactly as full as its one resolve left it.
func TestLedgerAnswersAndEarlyRefusalsSpendNoRailReads(t *testing.T) {
	r := newRig(t, func(m *countersignv1.Mandate) { m.Grants[0].MaxAmountMinor = 5000 })
	clock := testclock.New(time.Now())
	r.e = limitRailReads(r.e, 0.001, 2, clock.Now)
	ctx := context.Background()
	first := r.e.Decide(ctx, r.refund())
	if first.Verdict != Allow {
		t.Fatalf("first = %s %s: %s", first.Verdict, first.ReasonCode, first.Reason)
	}
	body := []byte(`{"id":"re_1","object":"refund","status":"succeeded","amount":1000,"currency":"usd","payment_intent":"pi_1"}`)
	if it, _, err := r.e.Commit(ctx, *first.Intent, rail.Response{Status: 200, Headers: map[string]string{"content-type": "application/json"}, Body: body}); err != nil || it.State != intent.Applied {
		t.Fatalf("commit = %s, %v", it.State, err)
	}
	reads := railReads(r.mock)
	for i := range 5 {
		if dup := r.e.Decide(ctx, r.refund()); dup.ReasonCode != ReasonDuplicateApplied || !dup.Replayed {
			t.Fatalf("duplicate %d = %s %s: %s; want the ledger's replay", i, dup.Verdict, dup.ReasonCode, dup.Reason)
		}
		if over := r.e.Decide(ctx, r.refundOf(6000)); over.ReasonCode != gate.ReasonAmountAboveMaximum {
			t.Fatalf("over the maximum %d = %s %s: %s; want the early refusal", i, over.Verdict, over.ReasonCode, over.Reason)
		}
	}
	if n := railReads(r.mock); n != reads {
		t.Fatalf("%d rail reads after duplicates and early refusals, %d before", n, reads)
	}
	// One token left: one new refund reads the rail, the next does not.
	if out := r.e.Decide(ctx, r.refundOf(2000)); out.Verdict != Allow {
		t.Fatalf("new refund on the last token = %s %s: %s", out.Verdict, out.ReasonCode, out.Reason)
	}
	if out := r.e.Decide(ctx, r.refundOf(3000)); out.ReasonCode != ReasonRailReadsLimited {
		t.Fatalf("new refund past the bucket = %s %s: %s", out.Verdict, out.ReasonCode, out.Reason)
	}
}

// TestRailReadLimitIsOffByDefault: engine Options' zero value sets no
// limit (the server's configuration turns it on).
func TestRailReadLimitIsOffByDefault(t *testing.T) {
	r := newRig(t)
	for i := range 60 {
		if out := r.e.Decide(context.Background(), r.refundOf(100+i)); out.Verdict != Allow {
			t.Fatalf("refund %d = %s %s: %s", i, out.Verdict, out.ReasonCode, out.Reason)
		}
	}
}

// toolLists is how many times the MCP server's tools/list was read.
func (r *mcpRig) toolLists() int {
	r.tools.mu.Lock()
	defer r.tools.mu.Unlock()
	return r.tools.lists
}

// TestToolDescriptionReadsAreTheAgents: the MCP server's tools/list, read
// for a pinned tool's description, is a read the agent's request causes,
// from the same bucket as the referent's: with the bucket emptied by the
// referent's read, the description is not read and the call is refused
// (as the MCP server's JSON-RPC error for the call, with Retry-After).
func TestToolDescriptionReadsAreTheAgents(t *testing.T) {
	r := newMCPRig(t, map[string]string{"create_refund": mcp.DescriptionHash(honestRefundDesc)})
	clock := testclock.New(time.Now())
	r.e = limitRailReads(r.e, 0.001, 3, clock.Now)
	ctx := context.Background()
	if out := r.e.Decide(ctx, r.call(1, "create_refund", 2500)); out.Verdict != Allow {
		t.Fatalf("first call = %s %s: %s", out.Verdict, out.ReasonCode, out.Reason)
	}
	if n := r.toolLists(); n != 1 {
		t.Fatalf("tools/list read %d times for the first call; want 1", n)
	}
	// The referent's read takes the third token; the description's finds none.
	out := r.e.Decide(ctx, r.call(2, "create_refund", 2600))
	if out.Verdict != Block || out.ReasonCode != ReasonRailReadsLimited || out.ResponseHeaders["retry-after"] == "" {
		t.Fatalf("second call = %s %s %v: %s; want BLOCK %s with Retry-After", out.Verdict, out.ReasonCode, out.ResponseHeaders, out.Reason, ReasonRailReadsLimited)
	}
	if !strings.Contains(string(out.Body), `"id":2`) || !strings.Contains(string(out.Body), ReasonRailReadsLimited) {
		t.Errorf("refusal body %s: want a JSON-RPC error for call 2", out.Body)
	}
	if n := r.toolLists(); n != 1 {
		t.Fatalf("tools/list read %d times; the refused call read it", n)
	}
	if n := railReads(r.mock); n != 2 {
		t.Fatalf("%d rail reads; want the two referents'", n)
	}
}

// TestReportedAppliedListingIsTheAgents: the listing that confirms a
// native caller's reported "applied" is the reporting agent's read: with
// its bucket empty the rail is not listed, and the answer goes to
// reconciliation (UNKNOWN), never to APPLIED on the caller's word.
func TestReportedAppliedListingIsTheAgents(t *testing.T) {
	r := newMCPRig(t, nil)
	clock := testclock.New(time.Now())
	r.e = limitRailReads(r.e, 0.001, 1, clock.Now)
	ctx := context.Background()
	out := r.e.Decide(ctx, r.nativeCall(1, 700))
	if out.Verdict != Allow || out.Intent == nil {
		t.Fatalf("native Decide = %s %s: %s", out.Verdict, out.ReasonCode, out.Reason)
	}
	entity := r.createAsServer(t, 700, out.Intent.BodyValue)
	reads := railReads(r.mock)
	p, err := r.e.Authenticate(ctx, Caller{Credential: r.secret})
	if err != nil {
		t.Fatal(err)
	}
	ref := IntentRef{RailAccount: out.Intent.RailAccount, SIK: out.Intent.SIK, AttemptSeq: out.Intent.AttemptSeq, BodyStamped: true}
	it, _, err := r.e.CommitReported(ctx, p, out.Intent.CommitToken, ref, rail.Response{Status: http.StatusOK,
		Headers: map[string]string{"content-type": "application/json"}, Body: toolAnswer(1, string(entity))})
	if err != nil || it.State != intent.Unknown || !strings.Contains(it.Reason, ReasonRailReadsLimited) {
		t.Fatalf("reported applied with no reads left = %s (%s), %v; want UNKNOWN for %s", it.State, it.Reason, err, ReasonRailReadsLimited)
	}
	if n := railReads(r.mock); n != reads {
		t.Fatalf("%d rail reads after the report, %d before: the rail was listed", n, reads)
	}
}

// TestNoMandateInForceReadsNoRail: an agent with no mandate on the account,
// or whose mandate the owner revoked, is refused by the scope gate before
// any read at the rail (early), so it cannot spend the owner's rail rate
// limit with requests that could never be allowed. The first request after
// a revocation may still read once, on the facts remembered from before it
// (the decision's write then finds the revocation and decides again).
func TestNoMandateInForceReadsNoRail(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	refund := func(secret, id string, amount int) Outcome {
		req := r.refundOf(amount)
		req.Credential, req.RequestID = secret, id
		return r.e.Decide(ctx, req)
	}

	owner, err := r.store.AgentOwner(ctx, r.principal(t).Agent.ID)
	if err != nil {
		t.Fatal(err)
	}
	bare, err := r.store.CreateAgent(ctx, owner, "no mandate")
	if err != nil {
		t.Fatal(err)
	}
	secret, hash, err := credential.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.IssueCredential(ctx, bare.ID, credential.ScopeExecute, time.Now().Add(time.Hour), hash); err != nil {
		t.Fatal(err)
	}
	reads := railReads(r.mock)
	for i := range 5 {
		if out := refund(secret, "req-bare-"+strconv.Itoa(i), 100+i); out.Verdict != Block || out.ReasonCode != gate.ReasonMandateMissing {
			t.Fatalf("refund %d of an agent without a mandate = %s %s: %s", i, out.Verdict, out.ReasonCode, out.Reason)
		}
	}
	if n := railReads(r.mock); n != reads {
		t.Fatalf("an agent without a mandate caused %d rail reads", n-reads)
	}

	if out := refund(r.secret, "req-live", 200); out.Verdict != Allow {
		t.Fatalf("refund under the mandate = %s %s: %s", out.Verdict, out.ReasonCode, out.Reason)
	}
	var m ledger.MandateRecord
	if err := r.store.InTx(ctx, func(tx *ledger.Tx) (err error) {
		m, err = tx.LatestMandate(ctx, r.principal(t).Agent.ID, "acct_1", time.Now())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if revoked, err := r.store.RevokeMandate(ctx, m.Hash, "test"); err != nil || !revoked {
		t.Fatalf("revoke = %v, %v", revoked, err)
	}
	if out := refund(r.secret, "req-after", 201); out.ReasonCode != gate.ReasonMandateRevoked {
		t.Fatalf("first refund after the revocation = %s %s: %s", out.Verdict, out.ReasonCode, out.Reason)
	}
	reads = railReads(r.mock)
	for i := range 5 {
		if out := refund(r.secret, "req-revoked-"+strconv.Itoa(i), 300+i); out.Verdict != Block || out.ReasonCode != gate.ReasonMandateRevoked {
			t.Fatalf("refund %d under the revoked mandate = %s %s: %s", i, out.Verdict, out.ReasonCode, out.Reason)
		}
	}
	if n := railReads(r.mock); n != reads {
		t.Fatalf("refunds under a revoked mandate caused %d rail reads", n-reads)
	}
}
