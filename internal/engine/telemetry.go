package engine

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/countersign/countersign/internal/gate"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/telemetry"
)

// Span and attribute names of the engine's traces. A span records what was
// decided and where the time went; it never changes a decision, and no
// secret (credential, rail key, stamp, commit token) is ever an attribute.
const (
	spanDecide  = "countersign.decide"
	spanGates   = "countersign.gates"
	spanResolve = "rail.Resolve"
	spanCommit  = "countersign.commit"

	attrSource      = attribute.Key("countersign.source")
	attrRequestID   = attribute.Key("countersign.request_id")
	attrVerdict     = attribute.Key("countersign.verdict")
	attrReasonCode  = attribute.Key("countersign.reason_code")
	attrAgentID     = attribute.Key("countersign.agent.id")
	attrRailAccount = attribute.Key("countersign.rail_account")
	attrRail        = attribute.Key("countersign.rail")
	attrSIK         = attribute.Key("countersign.sik")
	attrAttemptSeq  = attribute.Key("countersign.attempt_seq")
	attrDecisionID  = attribute.Key("countersign.decision_id")
	attrAction      = attribute.Key("countersign.action")
	attrReplayed    = attribute.Key("countersign.replayed")
	attrOutcome     = attribute.Key("countersign.commit.outcome")
	attrReporter    = attribute.Key("countersign.commit.reporter")
)

// GateVerdictKey is the span attribute of one gate's verdict
// (countersign.gate.G2_value.verdict).
func GateVerdictKey(g string) attribute.Key {
	return attribute.Key("countersign.gate." + g + ".verdict")
}

func gateAttributes(gates []ledger.GateRecord) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, len(gates))
	for _, g := range gates {
		out = append(out, GateVerdictKey(g.Gate).String(g.Verdict))
	}
	return out
}

// startDecision opens the decision's span.
func (e *Engine) startDecision(ctx context.Context, req Request) (context.Context, trace.Span) {
	return e.tracer.Start(ctx, spanDecide, trace.WithAttributes(attrSource.String(string(req.Source)), attrRequestID.String(req.RequestID)))
}

// observe records a decision's answer on its span, ends it, and writes the
// decision log line.
func (e *Engine) observe(ctx context.Context, span trace.Span, req Request, t target, out Outcome, took time.Duration) {
	attrs := []attribute.KeyValue{attrVerdict.String(string(out.Verdict)), attrReasonCode.String(out.ReasonCode)}
	if out.AgentID != "" {
		attrs = append(attrs, attrAgentID.String(out.AgentID))
	}
	account := ""
	if t.acct != nil {
		account = t.acct.ID
		attrs = append(attrs, attrRailAccount.String(account), attrRail.String(string(t.acct.Rail)))
	}
	if out.Intent != nil {
		account = out.Intent.RailAccount
		attrs = append(attrs, attrSIK.String(out.Intent.SIK))
		if out.Intent.AttemptSeq > 0 {
			attrs = append(attrs, attrAttemptSeq.Int(out.Intent.AttemptSeq))
		}
	}
	if out.DecisionID != 0 {
		attrs = append(attrs, attrDecisionID.Int64(out.DecisionID))
	}
	if t.action.Kind != "" {
		attrs = append(attrs, attrAction.String(string(t.action.Kind)))
	}
	if out.Replayed {
		attrs = append(attrs, attrReplayed.Bool(true))
	}
	span.SetAttributes(append(attrs, gateAttributes(out.Gates)...)...)
	span.End()
	if e.opts.DecisionLog {
		e.logDecision(ctx, span.SpanContext(), req, t, account, out, took)
	}
}

// logDecision writes one JSON line per decision: what was decided, about
// what, for whom, and how to find its trace (Countersign's own, and the
// one the agent's request named). It names the credential only by its
// agent, never by its secret; it carries no header values.
func (e *Engine) logDecision(ctx context.Context, sc trace.SpanContext, req Request, t target, account string, out Outcome, took time.Duration) {
	attrs := []slog.Attr{
		slog.String("verdict", string(out.Verdict)), slog.String("reason_code", out.ReasonCode),
		slog.String("source", string(req.Source)), slog.String("request_id", req.RequestID),
	}
	if len(out.Gates) > 0 {
		gates := make([]string, len(out.Gates))
		for i, g := range out.Gates {
			gates[i] = g.Gate + "=" + g.Verdict
			if g.ReasonCode != "" && g.Verdict != string(Allow) {
				gates[i] += ":" + g.ReasonCode
			}
		}
		attrs = append(attrs, slog.String("gates", strings.Join(gates, ",")))
	}
	if out.AgentID != "" {
		attrs = append(attrs, slog.String("agent_id", out.AgentID))
	}
	if account != "" {
		attrs = append(attrs, slog.String("rail_account", account))
	}
	if out.Intent != nil {
		attrs = append(attrs, slog.String("intent", out.Intent.RailAccount+"/"+out.Intent.SIK))
		if out.Intent.AttemptSeq > 0 {
			attrs = append(attrs, slog.Int("attempt_seq", out.Intent.AttemptSeq))
		}
	}
	if t.action.Kind != "" {
		attrs = append(attrs, slog.String("action", string(t.action.Kind)))
	}
	if t.action.AmountMinor != nil {
		attrs = append(attrs, slog.Int64("amount_minor", *t.action.AmountMinor))
	}
	if t.action.Currency != "" {
		attrs = append(attrs, slog.String("currency", clip(strings.ToUpper(t.action.Currency), 16)))
	}
	if out.DecisionID != 0 {
		attrs = append(attrs, slog.Int64("decision_id", out.DecisionID))
	}
	if out.Replayed {
		attrs = append(attrs, slog.Bool("replayed", true))
	}
	if sc.HasTraceID() {
		attrs = append(attrs, slog.String("trace_id", sc.TraceID().String()))
	}
	if sc.HasSpanID() {
		attrs = append(attrs, slog.String("span_id", sc.SpanID().String()))
	}
	// The trace id the agent's request carried is its own claim: named
	// apart, never as the decision's trace.
	if a := telemetry.AgentTrace(ctx); a.HasTraceID() {
		attrs = append(attrs, slog.String("agent_trace_id", a.TraceID().String()))
	}
	attrs = append(attrs, slog.Float64("duration_ms", float64(took.Microseconds())/1000))
	e.log.LogAttrs(ctx, slog.LevelInfo, "decision", attrs...)
}

// startCommit opens the span of recording the rail's answer to an attempt.
func (e *Engine) startCommit(ctx context.Context, ref IntentRef, rep *ledger.Reporter) (context.Context, trace.Span) {
	reporter := "envoy"
	if rep != nil {
		reporter = "caller"
	}
	return e.tracer.Start(ctx, spanCommit, trace.WithAttributes(attrRailAccount.String(ref.RailAccount), attrSIK.String(ref.SIK),
		attrAttemptSeq.Int(ref.AttemptSeq), attrReporter.String(reporter)))
}

// endCommit records how the answer was classified and where the intent is.
func endCommit(span trace.Span, it ledger.Intent, c rail.Classification, err error) {
	if err == nil {
		span.SetAttributes(attrOutcome.String(c.Outcome.String()), attribute.String("countersign.intent.state", string(it.State)))
	}
	end(span, err)
}

// evaluate runs the gate ladder's pure gates on in, in a span that carries
// each gate's verdict.
func (g gateRun) evaluate(ctx context.Context, in gate.Input) verdict {
	_, span := g.tracer.Start(ctx, spanGates)
	v := verdictOf(gate.Evaluate(in, g.advisors...))
	span.SetAttributes(append(gateAttributes(v.Gates), attrVerdict.String(string(v.Verdict)), attrReasonCode.String(v.ReasonCode))...)
	span.End()
	return v
}

// resolve reads the action's referent at the rail (read-only) through c,
// in a span.
func (e *Engine) resolve(ctx context.Context, acct *rails.Account, c rail.Client, a rail.Action) (rail.Referent, error) {
	ctx, span := e.tracer.Start(ctx, spanResolve, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrRailAccount.String(acct.ID), attrRail.String(string(acct.Rail)), attrAction.String(string(a.Kind))))
	ref, err := acct.Adapter.Resolve(ctx, c, a)
	telemetry.End(span, err)
	return ref, err
}

// tracedLedger is the engine's ledger with a span around each call (the
// statements inside are the pgx tracer's children).
type tracedLedger struct {
	Ledger
	tracer trace.Tracer
}

func (l tracedLedger) span(ctx context.Context, name string) (context.Context, trace.Span) {
	return l.tracer.Start(ctx, "ledger."+name)
}

// end ends span; a missing row is an answer, not a failure.
func end(span trace.Span, err error) {
	if errors.Is(err, ledger.ErrNotFound) {
		err = nil
	}
	telemetry.End(span, err)
}

func (l tracedLedger) LookupCredential(ctx context.Context, hash [32]byte) (ledger.Principal, error) {
	ctx, span := l.span(ctx, "LookupCredential")
	p, err := l.Ledger.LookupCredential(ctx, hash)
	end(span, err)
	return p, err
}

func (l tracedLedger) ReadForDecision(ctx context.Context, r ledger.DecisionRead) (ledger.DecisionFacts, error) {
	ctx, span := l.span(ctx, "ReadForDecision")
	f, err := l.Ledger.ReadForDecision(ctx, r)
	end(span, err)
	return f, err
}

func (l tracedLedger) Apply(ctx context.Context, w *ledger.Write) error {
	ctx, span := l.span(ctx, "Apply")
	err := l.Ledger.Apply(ctx, w)
	end(span, err)
	return err
}

func (l tracedLedger) AppliedAttempt(ctx context.Context, it ledger.Intent) (ledger.Attempt, error) {
	ctx, span := l.span(ctx, "AppliedAttempt")
	a, err := l.Ledger.AppliedAttempt(ctx, it)
	end(span, err)
	return a, err
}

func (l tracedLedger) RecordDecision(ctx context.Context, d ledger.Decision) (int64, error) {
	ctx, span := l.span(ctx, "RecordDecision")
	id, err := l.Ledger.RecordDecision(ctx, d)
	end(span, err)
	return id, err
}

func (l tracedLedger) InTx(ctx context.Context, fn func(*ledger.Tx) error) error {
	ctx, span := l.span(ctx, "InTx")
	err := l.Ledger.InTx(ctx, fn)
	if errors.Is(err, errGateBlocked) {
		err = nil // the gates' refusal rolls back; it is an answer
	}
	end(span, err)
	return err
}

func (l tracedLedger) Intent(ctx context.Context, k ledger.Key) (ledger.Intent, error) {
	ctx, span := l.span(ctx, "Intent")
	it, err := l.Ledger.Intent(ctx, k)
	end(span, err)
	return it, err
}

func (l tracedLedger) GetIntent(ctx context.Context, k ledger.Key) (ledger.Intent, []ledger.Attempt, error) {
	ctx, span := l.span(ctx, "GetIntent")
	it, as, err := l.Ledger.GetIntent(ctx, k)
	end(span, err)
	return it, as, err
}

func (l tracedLedger) Commit(ctx context.Context, r ledger.AttemptResult) (ledger.Intent, error) {
	ctx, span := l.span(ctx, "Commit")
	it, err := l.Ledger.Commit(ctx, r)
	end(span, err)
	return it, err
}

func (l tracedLedger) MarkSent(ctx context.Context, k ledger.Key, seq int, stamped bool, mayApplyFor time.Duration) (ledger.Intent, error) {
	ctx, span := l.span(ctx, "MarkSent")
	it, err := l.Ledger.MarkSent(ctx, k, seq, stamped, mayApplyFor)
	end(span, err)
	return it, err
}

func (l tracedLedger) AgentOwner(ctx context.Context, agentID string) (string, error) {
	ctx, span := l.span(ctx, "AgentOwner")
	o, err := l.Ledger.AgentOwner(ctx, agentID)
	end(span, err)
	return o, err
}
