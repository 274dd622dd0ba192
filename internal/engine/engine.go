// Package engine decides what happens to one outbound payment call: it
// authenticates the agent, runs the gates, writes the ledger and produces an
// Outcome. It never returns an error: every failure is a deny (F1).
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/metrics"
)

// Source is the protocol a request came in on.
type Source string

// Sources.
const (
	SourceExtAuthz Source = "ext_authz"
	SourceDecide   Source = "decide"
)

// Verdict is the answer to a request; the meet over BLOCK < HOLD < ALLOW.
type Verdict string

// Verdicts.
const (
	Allow Verdict = "ALLOW"
	Hold  Verdict = "HOLD"
	Block Verdict = "BLOCK"
)

// Request is an outbound call as the engine sees it, already converted from
// the protocol it arrived on.
type Request struct {
	Source    Source
	RequestID string
	// Credential is the agent credential as presented ("" when none was).
	Credential string
	Method     string
	Host       string
	Path       string
	// Headers are lower-cased names; credential headers are already removed.
	Headers map[string]string
	Body    []byte
	// BodyTruncated is true when the proxy forwarded only part of the body.
	BodyTruncated bool
}

// Outcome is the engine's answer.
type Outcome struct {
	Verdict    Verdict
	ReasonCode string
	Reason     string
	// HTTPStatus is the status of the refusal the agent sees (0 on ALLOW).
	HTTPStatus int
	// Body is the refusal body (nil on ALLOW).
	Body []byte
	// DecisionID is the ledger row of this answer (0 if it could not be written).
	DecisionID int64
	AgentID    string
}

// Ledger is what the engine needs from the ledger.
type Ledger interface {
	LookupCredential(ctx context.Context, hash [32]byte) (ledger.Principal, error)
	RecordDecision(ctx context.Context, d ledger.Decision) (int64, error)
}

// Engine is safe for concurrent use.
type Engine struct {
	ledger  Ledger
	log     *slog.Logger
	metrics *metrics.Metrics
	now     func() time.Time
}

// New returns an engine over l.
func New(l Ledger, log *slog.Logger, m *metrics.Metrics) *Engine {
	return &Engine{ledger: l, log: log, metrics: m, now: time.Now}
}

// Reason codes of the answers the engine gives today.
const (
	ReasonCredentialMissing = "credential_missing"
	ReasonCredentialUnknown = "credential_unknown"
	ReasonCredentialRevoked = "credential_revoked"
	ReasonCredentialExpired = "credential_expired"
	ReasonAgentRevoked      = "agent_revoked"
	ReasonBodyTruncated     = "body_truncated"
	ReasonRouteUnknown      = "route_unknown"
	ReasonLedgerUnavailable = "ledger_unavailable"
	ReasonInternal          = "internal_error"
	ReasonCancelled         = "request_cancelled"
)

// recordTimeout bounds the decision write when the caller's context is gone:
// an answer that was decided is still recorded.
const recordTimeout = 5 * time.Second

// Decide answers req. Whatever happens inside, the result is an Outcome,
// and anything but a clean path is a deny.
func (e *Engine) Decide(ctx context.Context, req Request) (out Outcome) {
	start := e.now()
	defer func() {
		if r := recover(); r != nil {
			e.log.Error("decide panicked; denying", "request_id", req.RequestID, "panic", fmt.Sprint(r))
			out = refuse(req, ReasonInternal, "Countersign failed internally; no money moved.", http.StatusServiceUnavailable)
		}
		e.metrics.Decisions.WithLabelValues(string(req.Source), string(out.Verdict), out.ReasonCode).Inc()
		e.metrics.CheckSeconds.WithLabelValues(string(req.Source), string(out.Verdict)).Observe(time.Since(start).Seconds())
	}()

	out, principal, ok := e.authenticate(ctx, req)
	if ok {
		out = e.route(req)
	}
	if out.ReasonCode == ReasonLedgerUnavailable || out.ReasonCode == ReasonCancelled {
		// Nothing durable can be promised about this answer; log it.
		e.log.Warn("deny without a ledger record", "request_id", req.RequestID, "reason_code", out.ReasonCode)
		return out
	}
	return e.record(ctx, req, principal, out)
}

// authenticate resolves the presented credential. ok is false when the
// answer is already decided (a deny).
func (e *Engine) authenticate(ctx context.Context, req Request) (Outcome, *ledger.Principal, bool) {
	if err := ctx.Err(); err != nil {
		return refuse(req, ReasonCancelled, "The request was cancelled before Countersign decided; no money moved.", http.StatusServiceUnavailable), nil, false
	}
	if req.Credential == "" {
		return refuse(req, ReasonCredentialMissing, "No Countersign agent credential was presented; send it where the rail SDK expects its API key.", http.StatusForbidden), nil, false
	}
	hash, err := credential.Hash(req.Credential)
	if err != nil {
		return refuse(req, ReasonCredentialUnknown, "The presented credential is not a Countersign agent credential.", http.StatusForbidden), nil, false
	}
	p, err := e.ledger.LookupCredential(ctx, hash)
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		return refuse(req, ReasonCredentialUnknown, "The presented agent credential is not known to Countersign.", http.StatusForbidden), nil, false
	case errors.Is(err, ledger.ErrUnavailable):
		if ctx.Err() != nil {
			return refuse(req, ReasonCancelled, "The request was cancelled before Countersign decided; no money moved.", http.StatusServiceUnavailable), nil, false
		}
		e.log.Error("ledger unavailable; denying", "request_id", req.RequestID, "err", err)
		return refuse(req, ReasonLedgerUnavailable, "Countersign's ledger is unreachable, so no money can move; retry later.", http.StatusServiceUnavailable), nil, false
	case err != nil:
		e.log.Error("credential lookup failed; denying", "request_id", req.RequestID, "err", err)
		return refuse(req, ReasonInternal, "Countersign failed internally; no money moved.", http.StatusServiceUnavailable), nil, false
	}
	out := Outcome{AgentID: p.Agent.ID}
	switch {
	case p.Credential.RevokedAt != nil:
		out = refuse(req, ReasonCredentialRevoked, fmt.Sprintf("Agent credential %s was revoked.", p.Credential.ID), http.StatusForbidden)
	case !e.now().Before(p.Credential.ExpiresAt):
		out = refuse(req, ReasonCredentialExpired, fmt.Sprintf("Agent credential %s expired at %s.", p.Credential.ID, p.Credential.ExpiresAt.UTC().Format(time.RFC3339)), http.StatusForbidden)
	case p.Agent.Revoked:
		out = refuse(req, ReasonAgentRevoked, fmt.Sprintf("Agent %s was revoked.", p.Agent.ID), http.StatusForbidden)
	default:
		return out, &p, true
	}
	out.AgentID = p.Agent.ID
	return out, &p, false
}

// route finds the rail adapter for an authenticated request. No adapter is
// installed yet, so every request is refused: an unrecognised call on a
// payment route must never pass (F1).
func (e *Engine) route(req Request) Outcome {
	if req.BodyTruncated {
		return refuse(req, ReasonBodyTruncated, "The request body was truncated before Countersign could read it whole; send a smaller request.", http.StatusForbidden)
	}
	return refuse(req, ReasonRouteUnknown, fmt.Sprintf("Countersign does not recognise %s %s%s as a payment action it guards.", req.Method, req.Host, req.Path), http.StatusForbidden)
}

// record writes the decision and returns the outcome with its id. If the
// write fails the answer becomes a deny: an answer that is not durable is
// not given.
func (e *Engine) record(ctx context.Context, req Request, p *ledger.Principal, out Outcome) Outcome {
	d := ledger.Decision{
		RequestID: req.RequestID, Source: string(req.Source),
		Verdict: string(out.Verdict), ReasonCode: out.ReasonCode, Reason: out.Reason,
		Method: req.Method, Host: req.Host, Path: req.Path,
	}
	if p != nil {
		d.AgentID, d.CredentialID = p.Agent.ID, p.Credential.ID
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	id, err := e.ledger.RecordDecision(wctx, d)
	if err != nil {
		e.log.Error("decision not recorded; denying", "request_id", req.RequestID, "err", err)
		return refuse(req, ReasonLedgerUnavailable, "Countersign could not record its decision, so no money can move; retry later.", http.StatusServiceUnavailable)
	}
	out.DecisionID = id
	return out
}

// refusalBody is the JSON body of a deny. Later rail adapters shape it like
// the rail's own error; this generic form is what unrecognised calls get.
type refusalBody struct {
	Error refusalError `json:"error"`
}

type refusalError struct {
	Type      string `json:"type"`
	Code      string `json:"code"`
	Message   string `json:"message"`
	Verdict   string `json:"verdict"`
	RequestID string `json:"request_id,omitempty"`
}

func refuse(req Request, code, reason string, status int) Outcome {
	body, err := json.Marshal(refusalBody{Error: refusalError{
		Type: "countersign_refusal", Code: code, Message: reason, Verdict: string(Block), RequestID: req.RequestID,
	}})
	if err != nil {
		body = []byte(`{"error":{"type":"countersign_refusal","code":"internal_error"}}`)
	}
	return Outcome{Verdict: Block, ReasonCode: code, Reason: reason, HTTPStatus: status, Body: body}
}
