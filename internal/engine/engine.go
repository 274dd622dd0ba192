// Package engine decides what happens to one outbound payment call: it
// authenticates the agent, runs the gates, writes the ledger and produces an
// Outcome. It never returns an error: every failure is a deny (F1).
package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/gate"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/metrics"
	"github.com/countersign/countersign/internal/quota"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
	"github.com/countersign/countersign/internal/telemetry"
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
	// RailAccount, when the proxy names it (Envoy per-route context
	// extension "rail_account"), selects the rail account directly;
	// otherwise RailHost (context extension "rail_host") or Host does.
	RailAccount string
	RailHost    string
	// Peer is where the request came from (the agent's address as Envoy
	// saw it), for the failed-credential quota.
	Peer string
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
	// SetHeaders are set on the outbound request on ALLOW: the stamp and
	// the rail's Authorization. They carry the rail key: never log them.
	SetHeaders map[string]string
	// Intent is the intent an ALLOW started an attempt of (nil for reads).
	Intent *IntentRef
	// ToolsList, on an allowed MCP tools/list read under a mandate with
	// MCP pins, is what its answer must match before the agent receives
	// it (ext_proc checks it); nil otherwise.
	ToolsList *ToolsListCheck
	// ResponseHeaders go with a refusal or a replayed response.
	ResponseHeaders map[string]string
	// Gates are the gate ladder's results, when it ran.
	Gates []ledger.GateRecord
	// Replayed says the answer is the stored outcome of an applied
	// duplicate, from the ledger: not forwarded (the decision is BLOCK),
	// but not a refusal either, and labelled as what it is.
	Replayed bool

	// reread: the decision, made on remembered facts, needs facts read now
	// (a request sent before, or its write found them moved); nothing was
	// written, and decide makes it again. Never an answer.
	reread bool
	// locked: the locking transaction decided it, on facts it took its
	// own locks on (LivePrincipal, the ladder's reads): recorded as a
	// decision on facts read, though remembered ones led to it.
	locked bool
}

// readAgain is the outcome of a decision that needs facts read now.
var readAgain = Outcome{Verdict: Block, ReasonCode: ReasonInternal, reread: true}

// IntentRef tells the response path (ext_proc, Commit) which attempt an
// allowed request is.
type IntentRef struct {
	RailAccount string
	SIK         string
	AttemptSeq  int
	Stamp       string
	// BodyField and BodyValue are the body stamp ext_proc writes.
	BodyField string
	BodyValue string
	// AmountField, when set, is where ext_proc writes Amount, the
	// intent's valued amount, into an action that named none (a full
	// refund: rail.Stamped.AmountField).
	AmountField string
	Amount      int64
	// CallID is the JSON-RPC id the call leaves with in place of the
	// agent's (an MCP tool call: rail.Stamped.CallID and "#<attempt>"),
	// written by ext_proc; an answer naming another id is not this
	// attempt's (rail.Classification.CheckCall). "" off MCP.
	CallID string
	// BodyStamped is set by the response path when the body stamp was
	// written into the request that went out.
	BodyStamped bool
	// BodySHA256 is the hex SHA-256 of the request body the gates decided
	// on (ext_authz sets it); ext_proc lets no other body leave (A2).
	BodySHA256 string
	// CommitToken is the secret a native caller presents to Commit this
	// attempt (set on a native Decide's ALLOW only; the ledger keeps its
	// hash).
	CommitToken string

	// seen is the intent as MarkSent found it (IN_FLIGHT on this
	// attempt): the response path's commit starts from it instead of
	// reading the intent again; the commit's first statement asserts it
	// still holds. Only MarkSent sets it, so no caller of the native
	// API can hand the commit an intent of its own making.
	seen *ledger.Intent
}

// Ledger is what the engine needs from the ledger.
type Ledger interface {
	LookupCredential(ctx context.Context, hash [32]byte) (ledger.Principal, error)
	ReadForDecision(ctx context.Context, r ledger.DecisionRead) (ledger.DecisionFacts, error)
	NewWrite() *ledger.Write
	Apply(ctx context.Context, w *ledger.Write) error
	AppliedAttempt(ctx context.Context, it ledger.Intent) (ledger.Attempt, error)
	RecordDecision(ctx context.Context, d ledger.Decision) (int64, error)
	InTx(ctx context.Context, fn func(*ledger.Tx) error) error
	Intent(ctx context.Context, k ledger.Key) (ledger.Intent, error)
	GetIntent(ctx context.Context, k ledger.Key) (ledger.Intent, []ledger.Attempt, error)
	Commit(ctx context.Context, r ledger.AttemptResult) (ledger.Intent, error)
	CheckReporter(ctx context.Context, r ledger.AttemptResult) (ledger.Intent, string, error)
	MarkSent(ctx context.Context, k ledger.Key, seq int, stamped bool, mayApplyFor time.Duration) (ledger.Intent, error)
	AgentOwner(ctx context.Context, agentID string) (string, error)
}

// Rails finds the configured rail account for a request.
type Rails interface {
	ByID(id string) (*rails.Account, bool)
	ByHost(host string) (*rails.Account, bool)
}

// Options tune the engine.
type Options struct {
	// Rails are the configured rail accounts; nil guards nothing (every
	// payment call is refused).
	Rails Rails
	// LeaseOwner names this process in attempt leases.
	LeaseOwner string
	// LeaseTTL is how long an attempt may stay IN_FLIGHT without an answer
	// before it is presumed lost and reconciled.
	LeaseTTL time.Duration
	// ReconcileDelay is the minimum wait before the first reconciliation
	// query (the rails have no read-your-writes).
	ReconcileDelay time.Duration
	// RailSettle is how long after a request leaves the rail may still
	// apply it: the rail route's timeout in Envoy and what the rail takes
	// after its client gave up. No listing before then proves the attempt
	// absent (ledger.AttemptStart.MayApplyFor, MarkSent).
	RailSettle time.Duration
	// ResolveTimeout bounds the read-only call that resolves a referent.
	ResolveTimeout time.Duration
	// Advisors are the advisory gates this server offers; a mandate turns
	// them on by name (off by default).
	Advisors []gate.Advisor
	// Failures limits failed credential attempts per source and per
	// presented credential (nil: no limit).
	Failures *quota.Failures
	// MaxPendingApprovals bounds the requests of one agent waiting for its
	// owner's approval at once: past it, a request the gates would hold is
	// refused (0: no bound).
	MaxPendingApprovals int
	// ExtProcInPath says Envoy runs Countersign's ext_proc filter (failing
	// closed) after ext_authz, so an allowed request leaves only after its
	// body stamp was recorded. False for ext_authz-only deployments
	// (Istio CUSTOM).
	ExtProcInPath bool
	// RailReadRate and RailReadBurst bound the rail reads one agent's
	// requests cause on one rail account (railreads.go): a token bucket of
	// RailReadBurst reads (at least 1), refilled at RailReadRate a second.
	// A request whose read finds it empty is refused (rail_reads_limited,
	// 429). A zero rate turns the limit off.
	RailReadRate  float64
	RailReadBurst int
	// DecisionRate and DecisionBurst bound the decisions one agent may ask
	// for (limits.go): a token bucket of DecisionBurst decisions (at least
	// 1), refilled at DecisionRate a second. A zero rate turns it off.
	DecisionRate  float64
	DecisionBurst int
	// Tracer traces decisions and commits (nil: no spans).
	Tracer trace.TracerProvider
	// DecisionLog writes one structured log line per decision.
	DecisionLog bool
	// Now is the engine's clock (credential expiry, mandate validity,
	// sliding windows); nil means time.Now. The deterministic simulation
	// drives it.
	Now func() time.Time
}

// Engine is safe for concurrent use.
type Engine struct {
	ledger   Ledger
	opts     Options
	log      *slog.Logger
	metrics  *metrics.Metrics
	now      func() time.Time
	mandates mandateCache
	facts    remembered
	aliases  *seenAliases
	// lateConfirms spaces the rail reads that confirm a reported "applied"
	// of an intent settled as not applied, per attempt.
	lateConfirms *quota.Limiter
	// railReads limits the rail reads each agent's requests cause, per
	// rail account (Options.RailReadRate).
	railReads *quota.Limiter
	// decisions limits the decisions each agent asks for; throttled
	// bounds the records of the refusals past a limit (limits.go).
	decisions, throttled *quota.Limiter
	tracer               trace.Tracer
}

// New returns an engine over l.
func New(l Ledger, opts Options, log *slog.Logger, m *metrics.Metrics) *Engine {
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = 30 * time.Second
	}
	if opts.ResolveTimeout <= 0 {
		opts.ResolveTimeout = 10 * time.Second
	}
	if opts.LeaseOwner == "" {
		opts.LeaseOwner = "countersign"
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	tracer := telemetry.Tracer(opts.Tracer)
	if opts.Tracer != nil {
		l = tracedLedger{Ledger: l, tracer: tracer}
	}
	return &Engine{ledger: l, opts: opts, log: log, metrics: m, now: now, aliases: newSeenAliases(), tracer: tracer,
		lateConfirms: quota.NewLimiter(quota.Options{Rate: 1.0 / 60, Burst: 2, Now: now}),
		railReads:    quota.NewLimiter(quota.Options{Rate: opts.RailReadRate, Burst: opts.RailReadBurst, Now: now}),
		decisions:    quota.NewLimiter(quota.Options{Rate: opts.DecisionRate, Burst: opts.DecisionBurst, Now: now}),
		throttled:    quota.NewLimiter(quota.Options{Rate: throttledRecordRate, Burst: 1, Now: now})}
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
	ReasonTooManyFailures   = "too_many_failed_credentials"
)

// recordTimeout bounds the decision write when the caller's context is gone:
// an answer that was decided is still recorded.
const recordTimeout = 5 * time.Second

// Decide answers req. Whatever happens inside, the result is an Outcome,
// and anything but a clean path is a deny.
func (e *Engine) Decide(ctx context.Context, req Request) Outcome {
	if out, refused := e.refusedUnread(req); refused {
		// Who sends it is refused before its body is parsed: a request's
		// parse is work the agent chooses (found by a review: a JSON body
		// of 64 KiB cost 360 MB to check, and a source refused for its
		// failed credentials paid it every time). authenticate gives the
		// answer; the target's refusal stands only if a block lifted in
		// between, and then says truly why it was refused.
		acct, _ := e.account(req)
		return e.decide(ctx, req, target{acct: acct, refusal: &out})
	}
	return e.decide(ctx, req, e.route(req))
}

// refusedUnread reports whether authenticate refuses req whatever its body
// says, without I/O: it presents no credential, one not of a credential's
// form, or comes from a source (or with a credential) that failed too
// often. out is the refusal of a blocked sender.
func (e *Engine) refusedUnread(req Request) (out Outcome, refused bool) {
	if _, out, ok := credentialHash(req); !ok {
		return out, true
	}
	if err := e.opts.Failures.Check(req.Peer, credentialIdentity(req.Credential)); err != nil {
		return tooManyFailures(req, err), true
	}
	return Outcome{}, false
}

// tooManyFailures refuses a sender blocked for failed credentials (err is
// quota.Failures.Check's), saying when to retry.
func tooManyFailures(req Request, err error) Outcome {
	var ex *quota.ExhaustedError
	wait := time.Second
	if errors.As(err, &ex) {
		wait = ex.RetryAfter
	}
	out := refuse(req, ReasonTooManyFailures, fmt.Sprintf("Too many failed credential attempts; retry after %s.", wait.Round(time.Second)), http.StatusTooManyRequests)
	out.ResponseHeaders = map[string]string{"retry-after": fmt.Sprint(int(wait.Seconds()) + 1)}
	return out
}

// DecideAction answers an action proposed in structured form (the native
// Decide RPC) on the rail account railAccount, with the same gates and
// ledger as a request through Envoy.
func (e *Engine) DecideAction(ctx context.Context, req Request, railAccount string, a rail.Action) Outcome {
	var acct *rails.Account
	ok := false
	if e.opts.Rails != nil {
		acct, ok = e.opts.Rails.ByID(railAccount)
	}
	if !ok {
		out := refuse(req, ReasonRouteUnknown, fmt.Sprintf("Rail account %q is not configured.", railAccount), http.StatusForbidden)
		return e.decide(ctx, req, target{refusal: &out})
	}
	// The payee is whom the action pays, which the gates (the payee
	// allowlist, new_payee) and the owner's approval card judge: a payout's
	// or transfer's destination, its subject; nobody for a refund. The
	// parsers of requests through Envoy set it so; a native caller could
	// name another (a payee the owner trusts, for a payout to its own
	// account), and the request through Envoy, keyed the same, would then
	// leave on that approval.
	want := a.Subject
	if a.Kind == sik.KindRefund {
		want = ""
	}
	if a.Payee == "" {
		a.Payee = want
	}
	if a.Payee != want {
		out := refuseRail(acct, req, ReasonInvalidAction, fmt.Sprintf("payee %q is not whom this %s pays: a payout's or transfer's payee is its destination, its subject (%q), and a refund has none.", a.Payee, a.Kind, a.Subject), http.StatusBadRequest)
		return e.decide(ctx, req, target{acct: acct, refusal: &out})
	}
	if n := HeaderBytes(a.Extra); n > maxExtraBytes {
		out := refuseRail(acct, req, ReasonInvalidAction, fmt.Sprintf("extra comes to %d bytes, more than the %d Countersign keeps with an action; a rail's members that make an action what it is are a few short values.", n, maxExtraBytes), http.StatusBadRequest)
		return e.decide(ctx, req, target{acct: acct, refusal: &out})
	}
	for k := range a.Extra {
		// Countersign's own markers in a key ("amount": "full" for a
		// refund without an amount, "countersign.…"): a native caller
		// that sent one could make an action with an amount be read back
		// (ActionOf) as a full refund, whose answer is not checked for it.
		if k == "amount" || strings.HasPrefix(k, "countersign.") {
			out := refuseRail(acct, req, ReasonInvalidAction, fmt.Sprintf("extra field %q is Countersign's own; send the amount as amount_minor and leave it out of extra.", k), http.StatusBadRequest)
			return e.decide(ctx, req, target{acct: acct, refusal: &out})
		}
	}
	return e.decide(ctx, req, e.actionTarget(req, acct, a))
}

func (e *Engine) decide(ctx context.Context, req Request, t target) (out Outcome) {
	start := time.Now() // latency is measured on the real clock
	req.RequestID = requestIDOf(req.RequestID)
	ctx, span := e.startDecision(ctx, req)
	defer func() {
		if r := recover(); r != nil {
			e.log.Error("decide panicked; denying", "request_id", req.RequestID, "panic", fmt.Sprint(r))
			out = refuse(req, ReasonInternal, "Countersign failed internally; no money moved.", http.StatusServiceUnavailable)
		}
		took := time.Since(start)
		e.metrics.Decisions.WithLabelValues(string(req.Source), string(out.Verdict), out.ReasonCode).Inc()
		e.metrics.CheckSeconds.WithLabelValues(string(req.Source), string(out.Verdict)).Observe(took.Seconds())
		e.observe(ctx, span, req, t, out, took)
	}()

	out = e.decideOnce(ctx, req, t, true)
	if out.reread {
		// Remembered facts could not settle it (the decision goes past the
		// early limits, or a revocation, a new mandate or a request seen
		// before moved them): decide again on what the ledger says now.
		out = e.decideOnce(ctx, req, t, false)
	}
	if out.reread {
		return refuse(req, ReasonInternal, "Countersign failed internally; no money moved.", http.StatusServiceUnavailable)
	}
	return out
}

// decideOnce authenticates, decides and records. One round trip reads the
// credential with everything the decision needs from the ledger before it
// decides (target.read says what). With remember, and facts remembered from
// this agent's last decision on the account, it reads nothing: a refusal by
// the early limits is then one batch that checks those facts and records
// it (remembered); anything else is decided again with a read.
func (e *Engine) decideOnce(ctx context.Context, req Request, t target, remember bool) Outcome {
	var facts ledger.DecisionFacts
	var key rememberedKey
	rememberable := t.refusal == nil && !t.readOnly && t.acct != nil
	out, principal, ok := e.authenticate(ctx, req, func(hash [32]byte) (ledger.Principal, error) {
		read := t.read(hash, e.now())
		key = rememberedKey{credential: hash, account: read.RailAccount}
		rememberable = rememberable && read.Payee == ""
		if f, hit := e.facts.get(key, e.now()); remember && rememberable && hit {
			facts = f
			return f.Principal, nil
		}
		f, err := e.ledger.ReadForDecision(ctx, read)
		if err != nil {
			return ledger.Principal{}, err
		}
		facts = f
		if rememberable && f.PrincipalErr == nil && f.MandateFound && f.Mandate.ActiveAt(e.now()) {
			// Only what a decision can stand on: a live principal and a
			// mandate in force (a refusal for their lack reads each time).
			if _, _, refused := principalRefusal(f.Principal, e.now()); !refused {
				e.facts.put(key, f, e.now())
			}
		}
		return f.Principal, f.PrincipalErr
	})
	if remember { // the first pass only: one request, one token
		if refused, key, limited := e.limited(req, t, principal, ok, out); limited {
			return e.recordThrottled(ctx, req, principal, refused, key)
		}
	}
	if ok {
		out = e.run(ctx, req, principal, t, facts)
		out.AgentID = principal.Agent.ID // who asked, for the decision's span and log
	}
	if out.reread {
		// Decided again with a read. Remembered facts that sent it there
		// are forgotten, so a revoked agent's next requests are refused on
		// a read before any rail read (the read remembers them again while
		// they stand).
		if facts.Remembered {
			e.facts.forget(key)
		}
		return out
	}
	if out.ReasonCode == ReasonLedgerUnavailable || out.ReasonCode == ReasonCancelled {
		// Nothing durable can be promised about this answer; log it.
		e.log.Warn("deny without a ledger record", "request_id", req.RequestID, "reason_code", out.ReasonCode)
		return out
	}
	if facts.Remembered && !out.locked {
		out = e.recordChecked(ctx, req, principal, out, t, facts)
		if out.reread {
			e.facts.forget(key) // they moved
		}
		return out
	}
	return e.record(ctx, req, principal, out)
}

// authenticate resolves the presented credential. ok is false when the
// answer is already decided (a deny).
func (e *Engine) authenticate(ctx context.Context, req Request, find func([32]byte) (ledger.Principal, error)) (Outcome, *ledger.Principal, bool) {
	if err := ctx.Err(); err != nil {
		return refuse(req, ReasonCancelled, "The request was cancelled before Countersign decided; no money moved.", http.StatusServiceUnavailable), nil, false
	}
	// A source (or a credential) that keeps failing is refused before any
	// lookup: guessing credentials costs the guesser, not the ledger.
	// req.Peer is what Envoy (or the gRPC connection) saw, never a header,
	// so a guesser cannot spread its failures over invented sources. Every
	// agent of a pod shares 127.0.0.1, though, so a credential that has
	// authenticated is exempt from its source's block: a guesser cannot
	// lock a working agent out (quota.Failures says why that is safe).
	identity := credentialIdentity(req.Credential)
	if err := e.opts.Failures.Check(req.Peer, identity); err != nil {
		return tooManyFailures(req, err), nil, false
	}
	out, p, ok := e.lookup(ctx, req, find)
	switch {
	case ok:
		e.opts.Failures.Admit(identity)
	case out.ReasonCode == ReasonCredentialMissing || out.ReasonCode == ReasonCredentialUnknown:
		e.opts.Failures.Note(req.Peer, identity)
	case out.ReasonCode == ReasonCredentialRevoked || out.ReasonCode == ReasonCredentialExpired || out.ReasonCode == ReasonAgentRevoked:
		e.opts.Failures.Forget(identity)
	}
	return out, p, ok
}

// credentialIdentity names a presented credential without its secret.
func credentialIdentity(cred string) string {
	if cred == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(cred))
	return hex.EncodeToString(sum[:8])
}

// lookup resolves the presented credential against the ledger.
func (e *Engine) lookup(ctx context.Context, req Request, find func([32]byte) (ledger.Principal, error)) (Outcome, *ledger.Principal, bool) {
	hash, out, ok := credentialHash(req)
	if !ok {
		return out, nil, false
	}
	p, err := find(hash)
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
	code, reason, refused := principalRefusal(p, e.now())
	if !refused {
		return Outcome{AgentID: p.Agent.ID}, &p, true
	}
	out = refuse(req, code, reason, http.StatusForbidden)
	out.AgentID = p.Agent.ID
	return out, &p, false
}

// credentialHash is the hash of the credential req presents, or the
// refusal of a request that presents none or one not of a credential's
// form (no lookup can admit either).
func credentialHash(req Request) ([32]byte, Outcome, bool) {
	if req.Credential == "" {
		return [32]byte{}, refuse(req, ReasonCredentialMissing, "No Countersign agent credential was presented; send it where the rail SDK expects its API key.", http.StatusForbidden), false
	}
	hash, err := credential.Hash(req.Credential)
	if err != nil {
		return [32]byte{}, refuse(req, ReasonCredentialUnknown, "The presented credential is not a Countersign agent credential.", http.StatusForbidden), false
	}
	return hash, Outcome{}, true
}

// principalRefusal says why p may no longer act at now: its credential
// revoked or expired, or its agent revoked; refused is false when it may.
func principalRefusal(p ledger.Principal, now time.Time) (code, reason string, refused bool) {
	switch {
	case p.Credential.RevokedAt != nil:
		return ReasonCredentialRevoked, fmt.Sprintf("Agent credential %s was revoked.", p.Credential.ID), true
	case !now.Before(p.Credential.ExpiresAt):
		return ReasonCredentialExpired, fmt.Sprintf("Agent credential %s expired at %s.", p.Credential.ID, p.Credential.ExpiresAt.UTC().Format(time.RFC3339)), true
	case p.Agent.Revoked:
		return ReasonAgentRevoked, fmt.Sprintf("Agent %s was revoked.", p.Agent.ID), true
	}
	return "", "", false
}

// record writes the decision and returns the outcome with its id. If the
// write fails the answer becomes a deny: an answer that is not durable is
// not given.
func (e *Engine) record(ctx context.Context, req Request, p *ledger.Principal, out Outcome) Outcome {
	if out.DecisionID != 0 {
		return out // recorded with its attempt, in the same transaction
	}
	d := *e.decisionOf(req, p, out.ReasonCode, out.Reason)
	d.Verdict, d.Gates = string(out.Verdict), out.Gates
	if out.Intent != nil {
		d.RailAccount, d.SIK, d.AttemptSeq = out.Intent.RailAccount, out.Intent.SIK, out.Intent.AttemptSeq
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	id, err := e.ledger.RecordDecision(wctx, d)
	if err != nil {
		e.log.Error("decision not recorded; denying", "request_id", req.RequestID, "err", err)
		// An attempt may already be durable; without the ALLOW it never
		// leaves, and its lease expiry sends it to reconciliation.
		return refuse(req, ReasonLedgerUnavailable, "Countersign could not record its decision, so no money can move; retry later.", http.StatusServiceUnavailable)
	}
	out.DecisionID = id
	return out
}

// recordChecked is record for a decision made on remembered facts: one
// batch checks them (without locks: no money moves on a refusal) and writes
// the decision; if they moved, nothing is written and the decision is made
// again (reread).
func (e *Engine) recordChecked(ctx context.Context, req Request, p *ledger.Principal, out Outcome, t target, facts ledger.DecisionFacts) Outcome {
	if out.DecisionID != 0 {
		return out // written, checked, with its attempt or approval
	}
	d := *e.decisionOf(req, p, out.ReasonCode, out.Reason)
	d.Verdict, d.Gates = string(out.Verdict), out.Gates
	if out.Intent != nil {
		d.RailAccount, d.SIK, d.AttemptSeq = out.Intent.RailAccount, out.Intent.SIK, out.Intent.AttemptSeq
	}
	w := e.ledger.NewWrite()
	w.CheckPrincipal(facts.Principal.Credential.ID)
	w.CheckMandate(facts.Principal.Agent.ID, t.acct.ID, facts.Mandate.Hash, e.now())
	if t.alias != "" {
		w.AssertNoAlias(t.acct.ID, t.alias)
	}
	id, err := w.RecordDecision(d)
	if err != nil {
		return e.record(ctx, req, p, refuse(req, ReasonInternal, "Countersign failed internally; no money moved.", http.StatusServiceUnavailable))
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	var guard *ledger.GuardError
	switch err := e.ledger.Apply(wctx, w); {
	case errors.As(err, &guard):
		return readAgain
	case err != nil:
		e.log.Error("decision not recorded; denying", "request_id", req.RequestID, "err", err)
		return refuse(req, ReasonLedgerUnavailable, "Countersign could not record its decision, so no money can move; retry later.", http.StatusServiceUnavailable)
	}
	out.DecisionID = *id
	return out
}

// decisionOf is the decision record of req, without its verdict.
func (e *Engine) decisionOf(req Request, p *ledger.Principal, code, reason string) *ledger.Decision {
	d := &ledger.Decision{
		RequestID: req.RequestID, Source: string(req.Source), ReasonCode: code, Reason: clip(reason, maxReasonBytes),
		Method: clip(req.Method, maxHostBytes), Host: clip(req.Host, maxHostBytes), Path: clip(pathOnly(req.Path), maxPathBytes),
	}
	if p != nil {
		d.AgentID, d.CredentialID = p.Agent.ID, p.Credential.ID
	}
	return d
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
