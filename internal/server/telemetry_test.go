package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/extauthz"
	"github.com/countersign/countersign/internal/logging"
	"github.com/countersign/countersign/internal/testing/mockrail"
	"github.com/countersign/countersign/internal/testing/pgtest"
)

// logBuffer is an io.Writer the server's logger may write from many
// goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// decisionLines are the decision log's lines in what was logged.
func decisionLines(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(logs))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("a log line that is not JSON: %q: %v", sc.Text(), err)
		}
		if line["msg"] == "decision" {
			out = append(out, line)
		}
	}
	return out
}

// tracedHarness is a rail harness whose server and ledger are traced into
// an in-memory exporter and whose log is kept.
func tracedHarness(t *testing.T, cfg func(*config.Config)) (*allowHarness, *tracetest.InMemoryExporter, *logBuffer) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	logs := &logBuffer{}
	h := railHarnessOn(t, pgtest.NewDatabase(t), harnessOption{tracer: tp, log: logging.New(logs, "json", "info"), cfg: cfg})
	return h, exp, logs
}

// checkRefund is Envoy's Check of a Stripe refund of amount on pi_bench,
// with the given traceparent header ("" for none).
func checkRefund(h *allowHarness, id string, amount int64, traceparent string) *authv3.CheckRequest {
	headers := map[string]string{"authorization": "Bearer " + h.secret, "content-type": "application/x-www-form-urlencoded"}
	if traceparent != "" {
		headers["traceparent"] = traceparent
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		ContextExtensions: map[string]string{"rail_account": "acct_bench"},
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Id: id, Method: "POST", Host: "stripe.local", Path: "/v1/refunds", Headers: headers,
			Body: fmt.Sprintf("payment_intent=pi_bench&amount=%d", amount),
		}},
	}}
}

// spanSet is what the exporter recorded.
type spanSet tracetest.SpanStubs

func (s spanSet) named(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, sp := range s {
		if sp.Name == name {
			out = append(out, sp)
		}
	}
	return out
}

func (s spanSet) children(parent tracetest.SpanStub) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, sp := range s {
		if sp.Parent.SpanID() == parent.SpanContext.SpanID() && sp.Parent.TraceID() == parent.SpanContext.TraceID() {
			out = append(out, sp)
		}
	}
	return out
}

func (s spanSet) child(t *testing.T, parent tracetest.SpanStub, name string) tracetest.SpanStub {
	t.Helper()
	for _, c := range s.children(parent) {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("%s has no child %s; its tree:\n%s", parent.Name, name, s.tree(parent, ""))
	return tracetest.SpanStub{}
}

// tree draws the spans under root, for failure messages.
func (s spanSet) tree(root tracetest.SpanStub, indent string) string {
	out := indent + root.Name + "\n"
	for _, c := range s.children(root) {
		out += s.tree(c, indent+"  ")
	}
	return out
}

// linkedTo is the one span named name that links to trace id: how a
// server span names the trace context the caller sent, never continued.
func (s spanSet) linkedTo(t *testing.T, id trace.TraceID, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, sp := range s.named(name) {
		if linksTo(sp, id) {
			found = append(found, sp)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %s link to trace %s, want 1", len(found), name, id)
	}
	return found[0]
}

func linksTo(sp tracetest.SpanStub, id trace.TraceID) bool {
	for _, l := range sp.Links {
		if l.SpanContext.TraceID() == id {
			return true
		}
	}
	return false
}

// rootLinkedTo checks that sp, a server span, is a root of a trace of
// Countersign's own, linked to the caller's span (its tracestate dropped)
// and naming the caller's trace in countersign.agent.trace_id.
func rootLinkedTo(t *testing.T, sp tracetest.SpanStub, caller trace.SpanID) {
	t.Helper()
	if sp.Parent.IsValid() || sp.SpanKind != trace.SpanKindServer {
		t.Errorf("%s: parent %s (remote %v), kind %s; want a server span, a root", sp.Name, sp.Parent.SpanID(), sp.Parent.IsRemote(), sp.SpanKind)
	}
	var link trace.SpanContext
	for _, l := range sp.Links {
		if l.SpanContext.SpanID() == caller {
			link = l.SpanContext
		}
	}
	if !link.IsValid() || link.TraceID() == sp.SpanContext.TraceID() {
		t.Errorf("%s (trace %s) links %v, want the caller's span %s in a trace of its own", sp.Name, sp.SpanContext.TraceID(), sp.Links, caller)
	}
	if got := attr(sp, "countersign.agent.trace_id"); got != link.TraceID().String() {
		t.Errorf("%s countersign.agent.trace_id = %q, want %s", sp.Name, got, link.TraceID())
	}
	if sp.SpanContext.TraceState().Len() != 0 || link.TraceState().Len() != 0 {
		t.Errorf("%s keeps a tracestate (%q, link %q)", sp.Name, sp.SpanContext.TraceState(), link.TraceState())
	}
}

func attr(sp tracetest.SpanStub, key string) string {
	for _, kv := range sp.Attributes {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

func names(spans []tracetest.SpanStub) []string {
	out := make([]string, len(spans))
	for i, sp := range spans {
		out[i] = sp.Name
	}
	slices.Sort(out)
	return out
}

// waitForLinked waits until a span named name that links to trace id
// ends.
func waitForLinked(t *testing.T, exp *tracetest.InMemoryExporter, id trace.TraceID, name string) {
	t.Helper()
	eventually(t, name+" linked to trace "+id.String(), func() bool {
		for _, sp := range exp.GetSpans() {
			if sp.Name == name && linksTo(sp, id) {
				return true
			}
		}
		return false
	})
}

// TestTracesAndDecisionLogFollowEachDecision drives an ALLOW (through
// ext_authz and ext_proc, linked to the traceparent of the request Envoy
// forwards), a BLOCK (ext_authz, no trace context), a native ALLOW with its
// Commit and a HOLD (native Decide, linked to the caller's gRPC trace
// context) through the real server, and checks each span tree, the
// decision log, and that no span or log line carries a secret. The
// caller's trace context is the agent's to write: each server span is a
// root of Countersign's own trace, linked to it.
func TestTracesAndDecisionLogFollowEachDecision(t *testing.T) {
	h, exp, logs := tracedHarness(t, nil)
	m := mandateFor(h)
	m.Grants[0].MaxAmountMinor = 5000 // refunds over 50.00 are refused by G3
	applyMandateTo(t, h, m)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// ALLOW through Envoy, linked to the trace of the agent's HTTP request.
	envoyTrace, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	httpSpan, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	allowed, err := h.client.Check(ctx, checkRefund(h, "req-allow", 1000, "00-"+envoyTrace.String()+"-"+httpSpan.String()+"-01"))
	if err != nil || allowed.GetStatus().GetCode() != 0 {
		t.Fatalf("Check = %v, %v: want ALLOW", allowed.GetStatus(), err)
	}
	ref, ok := extauthz.IntentFromMetadata(allowed.GetDynamicMetadata())
	if !ok {
		t.Fatal("an ALLOW without its attempt's metadata")
	}
	// The rail's answer comes back through ext_proc: a 503, ambiguous.
	exchange(t, ctx, h, allowed.GetDynamicMetadata(), "00-"+envoyTrace.String()+"-b7ad6b7169203331-01")

	// BLOCK through Envoy, with no trace context: a trace of its own.
	blocked, err := h.client.Check(ctx, checkRefund(h, "req-block", 9000, ""))
	if err != nil || blocked.GetDeniedResponse() == nil {
		t.Fatalf("Check over the limit = %v, %v: want a deny", blocked.GetStatus(), err)
	}

	// ALLOW and Commit through the native API.
	decideTrace, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	callerSpan, _ := trace.SpanIDFromHex("b9c7c989f97918e1")
	native := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+h.secret,
		"traceparent", "00-"+decideTrace.String()+"-"+callerSpan.String()+"-01")
	proposal := refund("pi_bench", 1200, "")
	proposal.Rail, proposal.RailAccount = countersignv1.Rail_RAIL_STRIPE, "acct_bench"
	nativeAllow, err := h.decisions().Decide(native, &countersignv1.DecideRequest{Form: &countersignv1.DecideRequest_Action{Action: proposal}})
	if err != nil || nativeAllow.GetVerdict() != countersignv1.Verdict_VERDICT_ALLOW || nativeAllow.GetCommitToken() == "" {
		t.Fatalf("native Decide = %v %s, %v: want ALLOW with a commit token", nativeAllow.GetVerdict(), nativeAllow.GetReasonCode(), err)
	}
	token := nativeAllow.GetCommitToken()
	if _, err := h.decisions().Commit(native, forgedRejection(nativeAllow, token)); err != nil {
		t.Fatalf("Commit: %v", err)
	}

	// HOLD: the owner now wants to approve every refund.
	m = mandateFor(h)
	m.ValidFrom.Seconds++ // a newer mandate than the first
	m.Mode = countersignv1.MandateMode_MANDATE_MODE_APPROVAL_REQUIRED
	applyMandateTo(t, h, m)
	holdTrace, _ := trace.TraceIDFromHex("5b8efff798038103d269b633813fc60c")
	heldCtx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+h.secret,
		"traceparent", "00-"+holdTrace.String()+"-eee19b7ec3c1b174-01")
	proposal = refund("pi_bench", 1300, "")
	proposal.Rail, proposal.RailAccount = countersignv1.Rail_RAIL_STRIPE, "acct_bench"
	held, err := h.decisions().Decide(heldCtx, &countersignv1.DecideRequest{Form: &countersignv1.DecideRequest_Action{Action: proposal}})
	if err != nil || held.GetVerdict() != countersignv1.Verdict_VERDICT_HOLD {
		t.Fatalf("Decide under approval_required = %v %s, %v: want HOLD", held.GetVerdict(), held.GetReasonCode(), err)
	}

	waitForLinked(t, exp, envoyTrace, "ext_proc.Process")
	waitForLinked(t, exp, holdTrace, "countersign.v1.DecisionService/Decide")
	spans := spanSet(exp.GetSpans())

	t.Run("ALLOW through ext_authz links the request's trace", func(t *testing.T) {
		check := spans.linkedTo(t, envoyTrace, "ext_authz.Check")
		rootLinkedTo(t, check, httpSpan)
		if attr(check, "countersign.verdict") != "ALLOW" {
			t.Errorf("ext_authz.Check verdict %q", attr(check, "countersign.verdict"))
		}
		decide := spans.child(t, check, "countersign.decide")
		for key, want := range map[string]string{
			"countersign.verdict": "ALLOW", "countersign.reason_code": "allowed", "countersign.source": "ext_authz",
			"countersign.request_id": "req-allow", "countersign.rail_account": "acct_bench", "countersign.agent.id": h.agentID,
			"countersign.sik": ref.SIK, "countersign.gate.G1_scope.verdict": "ALLOW", "countersign.gate.G2_value.verdict": "ALLOW",
			"countersign.gate.G3_limits.verdict": "ALLOW",
		} {
			if got := attr(decide, key); got != want {
				t.Errorf("countersign.decide %s = %q, want %q", key, got, want)
			}
		}
		read := spans.child(t, decide, "ledger.ReadForDecision")
		spans.child(t, decide, "rail.Resolve")
		gates := spans.child(t, decide, "countersign.gates")
		if attr(gates, "countersign.gate.G2_value.verdict") != "ALLOW" || attr(gates, "countersign.verdict") != "ALLOW" {
			t.Errorf("countersign.gates attributes %v", gates.Attributes)
		}
		write := spans.child(t, decide, "ledger.Apply") // one round trip: intent, attempt, decision
		for _, sp := range []tracetest.SpanStub{read, write} {
			db := spans.children(sp)
			if len(db) == 0 || attr(db[0], "db.system.name") != "postgresql" || attr(db[0], "db.system") != "postgresql" || attr(db[0], "db.operation.name") == "" {
				t.Errorf("%s has no postgresql statement spans (children %v)", sp.Name, names(db))
			}
		}
		if n := len(spans.named("envoy.service.auth.v3.Authorization/Check")); n != 0 {
			t.Errorf("%d gRPC server spans around Check: ext_authz.Check is the only one", n)
		}
	})

	t.Run("ext_proc commits the answer linked to the same trace", func(t *testing.T) {
		process := spans.linkedTo(t, envoyTrace, "ext_proc.Process")
		forwarded, _ := trace.SpanIDFromHex("b7ad6b7169203331")
		rootLinkedTo(t, process, forwarded)
		commit := spans.child(t, process, "countersign.commit")
		if attr(commit, "countersign.sik") != ref.SIK || attr(commit, "countersign.commit.reporter") != "envoy" || attr(commit, "countersign.commit.outcome") == "" {
			t.Errorf("countersign.commit attributes %v", commit.Attributes)
		}
		spans.child(t, commit, "ledger.Commit")
	})

	t.Run("BLOCK without trace context is a trace of its own", func(t *testing.T) {
		var check tracetest.SpanStub
		for _, sp := range spans.named("countersign.decide") {
			if attr(sp, "countersign.request_id") == "req-block" {
				check = sp
			}
		}
		if !check.SpanContext.IsValid() {
			t.Fatal("no countersign.decide span for the blocked request")
		}
		for key, want := range map[string]string{
			"countersign.verdict": "BLOCK", "countersign.reason_code": "amount_above_maximum", "countersign.gate.G3_limits.verdict": "BLOCK",
		} {
			if got := attr(check, key); got != want {
				t.Errorf("countersign.decide %s = %q, want %q", key, got, want)
			}
		}
		var root tracetest.SpanStub
		for _, sp := range spans.named("ext_authz.Check") {
			if sp.SpanContext.SpanID() == check.Parent.SpanID() {
				root = sp
			}
		}
		if !root.SpanContext.IsValid() || root.Parent.IsValid() || len(root.Links) != 0 || attr(root, "countersign.agent.trace_id") != "" {
			t.Errorf("the blocked Check's span has parent %v, links %v; want a root with countersign.decide under it", root.Parent, root.Links)
		}
		for _, c := range spans.children(check) {
			if c.Name == "rail.Resolve" {
				t.Error("an early refusal read the rail")
			}
		}
	})

	t.Run("native Decide and Commit are children of the gRPC server span", func(t *testing.T) {
		rpc := spans.linkedTo(t, decideTrace, "countersign.v1.DecisionService/Decide")
		rootLinkedTo(t, rpc, callerSpan)
		decide := spans.child(t, rpc, "countersign.decide")
		if attr(decide, "countersign.verdict") != "ALLOW" || attr(decide, "countersign.source") != "decide" {
			t.Errorf("countersign.decide attributes %v", decide.Attributes)
		}
		spans.child(t, decide, "rail.Resolve")
		spans.child(t, decide, "countersign.gates")
		commitRPC := spans.linkedTo(t, decideTrace, "countersign.v1.DecisionService/Commit")
		rootLinkedTo(t, commitRPC, callerSpan)
		commit := spans.child(t, commitRPC, "countersign.commit")
		if attr(commit, "countersign.commit.reporter") != "caller" {
			t.Errorf("countersign.commit attributes %v", commit.Attributes)
		}
		spans.child(t, commit, "ledger.Commit")
	})

	t.Run("HOLD names the gate that held", func(t *testing.T) {
		rpc := spans.linkedTo(t, holdTrace, "countersign.v1.DecisionService/Decide")
		decide := spans.child(t, rpc, "countersign.decide")
		if attr(decide, "countersign.verdict") != "HOLD" || attr(decide, "countersign.reason_code") != "approval_required" {
			t.Errorf("countersign.decide attributes %v", decide.Attributes)
		}
		// Decided first on the facts remembered from the agent's last
		// decision (the mandate before this one): the ledger refused that
		// write (a newer mandate), and the decision was made again on a
		// read. The gates that answered are the last to start.
		var gates tracetest.SpanStub
		for _, c := range spans.children(decide) {
			if c.Name == "countersign.gates" && c.StartTime.After(gates.StartTime) {
				gates = c
			}
		}
		spans.child(t, decide, "ledger.ReadForDecision")
		if attr(gates, "countersign.verdict") != "HOLD" || attr(gates, "countersign.gate.G3_limits.verdict") != "HOLD" ||
			attr(gates, "countersign.gate.G1_scope.verdict") != "ALLOW" {
			t.Errorf("countersign.gates attributes %v", gates.Attributes)
		}
		spans.child(t, decide, "ledger.Apply") // intent, approval and decision in one write
	})

	t.Run("one decision log line per decision", func(t *testing.T) {
		lines := decisionLines(t, logs.String())
		byRequest := map[string]map[string]any{}
		verdicts := []string{}
		for _, l := range lines {
			verdicts = append(verdicts, fmt.Sprint(l["verdict"]))
			if id, _ := l["request_id"].(string); id != "" {
				byRequest[id] = l
			}
		}
		if !slices.Equal(verdicts, []string{"ALLOW", "BLOCK", "ALLOW", "HOLD"}) {
			t.Fatalf("decision log verdicts %v, want ALLOW BLOCK ALLOW HOLD", verdicts)
		}
		allow := byRequest["req-allow"]
		check := spans.linkedTo(t, envoyTrace, "ext_authz.Check")
		for key, want := range map[string]any{
			"verdict": "ALLOW", "reason_code": "allowed", "agent_id": h.agentID, "rail_account": "acct_bench",
			"intent": "acct_bench/" + ref.SIK, "amount_minor": float64(1000), "action": "refund",
			"trace_id": check.SpanContext.TraceID().String(), "agent_trace_id": envoyTrace.String(),
		} {
			if allow[key] != want {
				t.Errorf("decision log %s = %v, want %v (line %v)", key, allow[key], want, allow)
			}
		}
		if g, _ := allow["gates"].(string); !strings.Contains(g, "G1_scope=ALLOW") || !strings.Contains(g, "G2_value=ALLOW") {
			t.Errorf("decision log gates %q", g)
		}
		block := byRequest["req-block"]
		if g, _ := block["gates"].(string); !strings.Contains(g, "G3_limits=BLOCK:amount_above_maximum") {
			t.Errorf("blocked decision's gates %q", g)
		}
		if block["trace_id"] == nil || block["agent_trace_id"] != nil {
			t.Errorf("blocked decision's line %v: want a trace id of Countersign's and no agent's", block)
		}
		holdRPC := spans.linkedTo(t, holdTrace, "countersign.v1.DecisionService/Decide")
		if hold := lines[3]; hold["trace_id"] != holdRPC.SpanContext.TraceID().String() || hold["agent_trace_id"] != holdTrace.String() ||
			hold["currency"] != nil && hold["currency"] != "USD" {
			t.Errorf("held decision line %v", hold)
		}
	})

	t.Run("no secret in any span or log line", func(t *testing.T) {
		secrets := map[string]string{"agent credential": h.secret, "rail key": mockrail.DefaultStripeKey, "commit token": token}
		everything := logs.String()
		for _, sp := range spans {
			var b strings.Builder
			fmt.Fprintln(&b, sp.Name, sp.Status.Description)
			for _, kv := range sp.Attributes {
				fmt.Fprintln(&b, kv.Key, kv.Value.String())
			}
			for _, ev := range sp.Events {
				fmt.Fprintln(&b, ev.Name)
				for _, kv := range ev.Attributes {
					fmt.Fprintln(&b, kv.Key, kv.Value.String())
				}
			}
			for _, l := range sp.Links {
				for _, kv := range l.Attributes {
					fmt.Fprintln(&b, kv.Key, kv.Value.String())
				}
			}
			for _, kv := range sp.Resource.Attributes() {
				fmt.Fprintln(&b, kv.Key, kv.Value.String())
			}
			everything += b.String()
		}
		if len(spans) < 20 || len(decisionLines(t, logs.String())) == 0 {
			t.Fatalf("only %d spans recorded: the scan would prove nothing", len(spans))
		}
		for what, s := range secrets {
			if s == "" {
				t.Fatalf("no %s to look for", what)
			}
			if strings.Contains(everything, s) {
				t.Errorf("the %s appears in a span or a log line", what)
			}
		}
	})
}

// TestAgentTraceparentNeitherUnsamplesNorNamesItsDecisions: an agent that
// sends traceparent flags 00 (under the default parent-based sampler) with
// a trace id it chose, through Envoy or the native API, still leaves the
// spans of its ALLOW, its commit and its native decision, and its decision
// log lines name Countersign's trace, the agent's apart.
func TestAgentTraceparentNeitherUnsamplesNorNamesItsDecisions(t *testing.T) {
	h, exp, logs := tracedHarness(t, nil)
	applyMandateTo(t, h, mandateFor(h))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A trace id seen elsewhere (another request's), sampled flag clear.
	chosen, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	unsampled := "00-" + chosen.String() + "-00f067aa0ba902b7-00"
	allowed, err := h.client.Check(ctx, checkRefund(h, "req-hidden", 1000, unsampled))
	if err != nil || allowed.GetStatus().GetCode() != 0 {
		t.Fatalf("Check = %v, %v: want ALLOW", allowed.GetStatus(), err)
	}
	exchange(t, ctx, h, allowed.GetDynamicMetadata(), unsampled)
	native := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+h.secret, "traceparent", unsampled)
	proposal := refund("pi_bench", 1200, "")
	proposal.Rail, proposal.RailAccount = countersignv1.Rail_RAIL_STRIPE, "acct_bench"
	decided, err := h.decisions().Decide(native, &countersignv1.DecideRequest{Form: &countersignv1.DecideRequest_Action{Action: proposal}})
	if err != nil || decided.GetVerdict() != countersignv1.Verdict_VERDICT_ALLOW {
		t.Fatalf("native Decide = %v, %v: want ALLOW", decided.GetVerdict(), err)
	}

	for _, name := range []string{"ext_authz.Check", "ext_proc.Process", "countersign.v1.DecisionService/Decide"} {
		waitForLinked(t, exp, chosen, name)
	}
	spans := spanSet(exp.GetSpans())
	ours := map[string]bool{}
	for _, name := range []string{"ext_authz.Check", "ext_proc.Process", "countersign.v1.DecisionService/Decide"} {
		sp := spans.linkedTo(t, chosen, name)
		if sp.SpanContext.TraceID() == chosen || !sp.SpanContext.IsSampled() || sp.Parent.IsValid() {
			t.Errorf("%s in trace %s (sampled %v, parent %s): the agent's traceparent decided it", name, sp.SpanContext.TraceID(), sp.SpanContext.IsSampled(), sp.Parent.SpanID())
		}
		if len(spans.children(sp)) == 0 {
			t.Errorf("%s has no children: the decision under it was not traced", name)
		}
		ours[sp.SpanContext.TraceID().String()] = true
	}
	for _, sp := range spans {
		if sp.SpanContext.TraceID() == chosen {
			t.Errorf("span %s is in the trace the agent chose", sp.Name)
		}
	}
	lines := decisionLines(t, logs.String())
	if len(lines) != 2 {
		t.Fatalf("%d decision lines, want 2", len(lines))
	}
	for _, l := range lines {
		if id, _ := l["trace_id"].(string); !ours[id] || l["agent_trace_id"] != chosen.String() {
			t.Errorf("decision line trace_id %v, agent_trace_id %v: want a trace of Countersign's and the agent's %s apart", l["trace_id"], l["agent_trace_id"], chosen)
		}
	}
}

// TestCheckSpanHoldsABoundedPartOfTheAgentsRequest: ext_authz.Check's span
// quotes url.path and server.address cut as the decision record cuts them,
// and no tracestate, whatever the agent's request carried (a 60 KiB path
// is within Envoy's default header limit; a tracestate of 32 members
// within the W3C parser's).
func TestCheckSpanHoldsABoundedPartOfTheAgentsRequest(t *testing.T) {
	h, exp, _ := tracedHarness(t, nil)
	applyMandateTo(t, h, mandateFor(h))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	id, _ := trace.TraceIDFromHex("5b8efff798038103d269b633813fc60c")
	req := checkRefund(h, "req-big", 1000, "00-"+id.String()+"-00f067aa0ba902b7-01")
	http := req.Attributes.Request.Http
	http.Path = "/v1/refunds/" + strings.Repeat("A", 60<<10)
	http.Host = strings.Repeat("h", 8<<10) + ".example"
	var ts []string
	for i := range 32 {
		ts = append(ts, fmt.Sprintf("k%02d%s=%s", i, strings.Repeat("k", 200), strings.Repeat("v", 255)))
	}
	http.Headers["tracestate"] = strings.Join(ts, ",")
	if _, err := h.client.Check(ctx, req); err != nil {
		t.Fatal(err)
	}
	waitForLinked(t, exp, id, "ext_authz.Check")
	check := spanSet(exp.GetSpans()).linkedTo(t, id, "ext_authz.Check")
	total := len(check.SpanContext.TraceState().String())
	for _, l := range check.Links {
		total += len(l.SpanContext.TraceState().String())
	}
	for _, a := range check.Attributes {
		n := len(a.Value.String())
		total += n
		if n > 2048 {
			t.Errorf("attribute %s is %d bytes of the agent's choosing", a.Key, n)
		}
	}
	if total > 3<<10 {
		t.Errorf("the span holds %d bytes of attributes and tracestate of the agent's request", total)
	}
	if !strings.HasPrefix(attr(check, "url.path"), "/v1/refunds/AAAA") || !strings.HasPrefix(attr(check, "server.address"), "hhhh") {
		t.Errorf("url.path %.30q, server.address %.30q: want the request's, cut", attr(check, "url.path"), attr(check, "server.address"))
	}
}

// exchange is ext_proc's stream for the allowed request: its headers (with
// traceparent), then the rail's 503 headers, which end it.
func exchange(t *testing.T, ctx context.Context, h *allowHarness, md *structpb.Struct, traceparent string) {
	t.Helper()
	mdc := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{extauthz.MetadataNamespace: md}}
	st, err := extprocv3.NewExternalProcessorClient(dialTest(t, h.envoyAddr)).Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []*extprocv3.ProcessingRequest{
		{MetadataContext: mdc, Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: "traceparent", Value: traceparent}}}}}},
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{EndOfStream: true,
			Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", Value: "503"}}}}}},
	} {
		if err := st.Send(req); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("ext_proc stream end: %v", err)
	}
}

// TestDecisionLogCanBeTurnedOff: --decision-log=false writes no decision
// lines.
func TestDecisionLogCanBeTurnedOff(t *testing.T) {
	h, _, logs := tracedHarness(t, func(c *config.Config) { c.DecisionLog = false })
	applyMandateTo(t, h, mandateFor(h))
	resp, err := h.client.Check(context.Background(), checkRefund(h, "req-quiet", 1000, ""))
	if err != nil || resp.GetStatus().GetCode() != 0 {
		t.Fatalf("Check = %v, %v: want ALLOW", resp.GetStatus(), err)
	}
	if lines := decisionLines(t, logs.String()); len(lines) != 0 {
		t.Fatalf("decision log off, yet %d decision lines: %v", len(lines), lines)
	}
}
