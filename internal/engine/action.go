package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/chaos"
	"github.com/countersign/countersign/internal/gate"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/secrets"
	"github.com/countersign/countersign/internal/sik"
)

// Reason codes of the action path.
const (
	ReasonActionUnknown      = "action_unknown"
	ReasonBodyUnparseable    = "body_unparseable"
	ReasonReferentUnresolved = "referent_unresolved"
	ReasonRailUnreachable    = "rail_unreachable"
	ReasonInvalidAction      = "invalid_action"
	ReasonAllowed            = "allowed"
	ReasonReadAllowed        = "read_allowed"
	ReasonDuplicateApplied   = "duplicate_applied"
	ReasonDuplicateInFlight  = "duplicate_in_flight"
	ReasonReconciling        = "intent_reconciling"
	ReasonQuarantined        = "intent_quarantined"
	ReasonIntentBlocked      = "intent_blocked"
	ReasonIntentHeld         = "intent_held"
	ReasonHeadersTooLarge    = "headers_too_large"
)

// DistinctHeader carries the caller's explicit reason to make a second
// identical action; it is logged verbatim in the audit.
const DistinctHeader = "x-countersign-distinct"

// target is what a request asks for, worked out before the ledger is read
// (it needs no I/O): the rail account and action, or the refusal to give
// once the caller is authenticated.
type target struct {
	acct   *rails.Account
	action rail.Action
	// alias is the key of the request as sent (aliasOf).
	alias string
	// tool is the MCP tool a tools/call names ("" otherwise).
	tool     string
	readOnly bool
	// readSource is the business account a read lists (rail.Parsed's).
	readSource string
	refusal    *Outcome
}

// read is what the decision reads with the credential.
func (t target) read(hash [32]byte, at time.Time) ledger.DecisionRead {
	r := ledger.DecisionRead{CredentialHash: hash, At: at, Alias: t.alias}
	if t.acct != nil {
		r.RailAccount = t.acct.ID
	}
	if t.action.Payee != "" && t.action.Kind != sik.KindRefund {
		r.Payee = t.action.Payee
	}
	// Refunds never take an idempotency window: no family to read.
	r.Family = t.action.Kind != sik.KindRefund
	return r
}

// route finds the rail account and action of a request through Envoy.
func (e *Engine) route(req Request) target {
	acct, ok := e.account(req)
	refusal := func(out Outcome) target { return target{acct: acct, refusal: &out} }
	if req.BodyTruncated {
		return refusal(refuseRail(acct, req, ReasonBodyTruncated, "The request body was truncated before Countersign could read it whole; send a smaller request.", http.StatusForbidden))
	}
	if n := HeaderBytes(req.Headers); n > MaxHeaderBytes {
		return refusal(refuseRail(acct, req, ReasonHeadersTooLarge, fmt.Sprintf("The request's headers come to %d bytes, more than the %d Countersign keeps with a request; send it with fewer or smaller headers.", n, MaxHeaderBytes), http.StatusRequestHeaderFieldsTooLarge))
	}
	if !ok {
		return refusal(refuse(req, ReasonRouteUnknown, fmt.Sprintf("Countersign does not guard %s %s%s: no rail account is configured for this host.", req.Method, req.Host, pathOnly(req.Path)), http.StatusForbidden))
	}
	parsed, err := acct.Adapter.Parse(rail.Request{Method: req.Method, Host: req.Host, Path: req.Path, Headers: req.Headers, Body: req.Body})
	var header *rail.RefusedHeader
	switch {
	case errors.As(err, &header):
		// The refusal names the header, or the agent cannot tell what to drop.
		return refusal(refuseRail(acct, req, ReasonActionUnknown, fmt.Sprintf("Countersign refuses %s %s on %s: its header %s %s.", req.Method, pathOnly(req.Path), acct.Rail, header.Name, header.Why), http.StatusForbidden))
	case errors.Is(err, rail.ErrUnrecognised):
		return refusal(refuseRail(acct, req, ReasonActionUnknown, fmt.Sprintf("%s %s is not an action Countersign knows on %s, so it is refused.", req.Method, pathOnly(req.Path), acct.Rail), http.StatusForbidden))
	case err != nil:
		return refusal(refuseRail(acct, req, ReasonBodyUnparseable, "Countersign could not read the request: "+err.Error(), http.StatusBadRequest))
	}
	if parsed.Kind == rail.KindRead {
		return target{acct: acct, readOnly: true, readSource: parsed.ReadSource}
	}
	t := e.actionTarget(req, acct, parsed.Action)
	t.tool = parsed.Tool
	return t
}

// actionTarget is the target of a money-moving action on acct.
func (e *Engine) actionTarget(req Request, acct *rails.Account, a rail.Action) target {
	if field := nulField(a); field != "" {
		// PostgreSQL's text holds no U+0000: such an action could be
		// neither keyed nor recorded, only refused as a ledger failure.
		out := refuseRail(acct, req, ReasonInvalidAction, fmt.Sprintf("%s holds a NUL character (U+0000), which no rail id or text may hold; send it without.", field), http.StatusBadRequest)
		return target{acct: acct, refusal: &out}
	}
	if why := unshownField(a); why != "" {
		// What an approval shows its owner (the console, the CLI, the
		// webhooks) must read as it is written. The parsers of requests
		// through Envoy hold subjects and payees to rail ids; a native
		// caller's structured action was held to nothing, so a held
		// transfer's subject could carry terminal escapes that redrew the
		// owner's `approvals list` (found by a review).
		out := refuseRail(acct, req, ReasonInvalidAction, why, http.StatusBadRequest)
		return target{acct: acct, refusal: &out}
	}
	if out := sourceAccountRefusal(req, acct, a); out != nil {
		return target{acct: acct, refusal: out}
	}
	alias, err := aliasOf(acct.ID, a)
	if err != nil {
		out := refuseRail(acct, req, ReasonInvalidAction, err.Error(), http.StatusBadRequest)
		return target{acct: acct, refusal: &out}
	}
	return target{acct: acct, action: a, alias: alias}
}

// nulField names a member of a that holds U+0000, or is "".
func nulField(a rail.Action) string {
	has := func(s string) bool { return strings.IndexByte(s, 0) >= 0 }
	switch {
	case has(a.Subject):
		return "the subject"
	case has(a.Currency):
		return "the currency"
	case has(a.Payee):
		return "the payee"
	case has(a.Distinct):
		return "the distinct reason"
	}
	// The first member in name order, named; sorted only when one holds a
	// NUL (this runs on every action).
	var bad []string
	for k, v := range a.Extra {
		if has(k) || has(v) {
			bad = append(bad, k)
		}
	}
	for k, l := range a.Labels {
		if has(k) || has(l.Value) {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return ""
	}
	return fmt.Sprintf("member %q", slices.Min(bad))
}

// unshownField says why a member of a cannot be shown to an owner as it is
// (a subject or payee that is not a rail id, an extra member's name or
// value holding a character not seen, sik.Hidden), or "". Labels are
// checked as they are parsed (rail.AddLabel).
func unshownField(a rail.Action) string {
	if !rail.IsID(a.Subject) {
		return fmt.Sprintf("the subject %s is not a rail id (1 to 255 letters, digits and underscores).", strconv.QuoteToASCII(clip(a.Subject, 64)))
	}
	if a.Payee != "" && !rail.IsID(a.Payee) {
		return fmt.Sprintf("the payee %s is not a rail id (1 to 255 letters, digits and underscores).", strconv.QuoteToASCII(clip(a.Payee, 64)))
	}
	// The first member in name order, named; sorted only when one is bad
	// (this runs on every action).
	var bad []string
	for k, v := range a.Extra {
		if sik.CheckShown(k) != nil || sik.CheckShown(v) != nil {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return ""
	}
	k := slices.Min(bad)
	err := sik.CheckShown(k)
	if err == nil {
		err = sik.CheckShown(a.Extra[k])
	}
	return fmt.Sprintf("member %s %v.", strconv.QuoteToASCII(clip(k, 64)), err)
}

// run answers an authenticated caller's target.
func (e *Engine) run(ctx context.Context, req Request, p *ledger.Principal, t target, facts ledger.DecisionFacts) Outcome {
	switch {
	case t.refusal != nil:
		return *t.refusal
	case t.readOnly:
		return e.read(req, p, t, facts)
	}
	// Scope, mandate, value, limits and provenance are the gate ladder's.
	return e.act(ctx, req, p, t, facts)
}

// read answers a read-only call. It leaves with the account's secret key,
// and its answer shows the account's entities (other agents' refunds and
// their stamps, customers, charges), so only an agent with a mandate in
// force on the account may read there (gate.CheckMayRead: another owner's
// agent, or one whose mandate was revoked, may not); and it spends the
// account's rail rate limit, which the owner's other systems share, so it
// takes a token from the agent's bucket of rail reads on the account, as
// the reads Countersign makes for the agent's requests do (railreads.go).
func (e *Engine) read(req Request, p *ledger.Principal, t target, facts ledger.DecisionFacts) Outcome {
	acct := t.acct
	in := principalInput(e.now(), p, acct)
	var m *countersignv1.Mandate
	if facts.MandateFound {
		var err error
		m, err = e.mandates.get(facts.Mandate)
		if err != nil {
			return refuseRail(acct, req, ReasonInternal, "Countersign could not read the agent's mandate; nothing was read.", http.StatusServiceUnavailable)
		}
		withMandate(&in, facts.Mandate, m)
	}
	if r, ok := gate.CheckMayRead(in); !ok {
		out := refuseRail(acct, req, r.ReasonCode, r.Reason, http.StatusForbidden)
		out.Gates = []ledger.GateRecord{{Gate: r.Gate, Verdict: string(Block), ReasonCode: r.ReasonCode, Reason: r.Reason}}
		return out
	}
	if out := readSourceRefusal(req, acct, t.readSource); out != nil {
		return *out
	}
	if out := streamUnderPins(req, acct, m); out != nil {
		return *out
	}
	if out := unchecked(req, e.opts, acct, m); out != nil {
		return *out
	}
	if out := secretsUnscrubbed(req, e.opts, acct); out != nil {
		return *out
	}
	if ok, wait := e.railReads.Allow(railReadKey(p.Agent.ID, acct.ID)); !ok {
		return e.railReadsRefused(acct, req, p.Agent.ID, wait)
	}
	out := Outcome{Verdict: Allow, ReasonCode: ReasonReadAllowed, Reason: "read-only call",
		SetHeaders: map[string]string{"authorization": acct.AuthHeader()}}
	// The agent's tools/list answer is checked against the mandate's MCP
	// pins before the agent receives it (ext_proc, toolslist.go); it must
	// be readable there, so the agent may not have it compressed.
	if out.ToolsList = toolsListCheck(req, acct, m); out.ToolsList != nil {
		out.SetHeaders["accept-encoding"] = "identity"
	}
	return out
}

func (e *Engine) account(req Request) (*rails.Account, bool) {
	if e.opts.Rails == nil {
		return nil, false
	}
	if req.RailAccount != "" {
		return e.opts.Rails.ByID(req.RailAccount)
	}
	if req.RailHost != "" {
		return e.opts.Rails.ByHost(req.RailHost)
	}
	return e.opts.Rails.ByHost(req.Host)
}

// act resolves, keys and writes a money-moving action, and answers by the
// state of its intent. It reads top to bottom as the money path does:
// an answer the ledger already holds; the gates that need no I/O; the
// referent at the rail; the key; the gates and the durable attempt in one
// round trip (fresh), or, for an intent that exists or a fact that moved
// since it was read, the deciding transaction that takes its locks first
// (propose). On facts remembered unread (remembered.go), a request sent
// before, and one whose fresh write found those facts moved, are decided
// again on a read.
func (e *Engine) act(ctx context.Context, req Request, p *ledger.Principal, t target, facts ledger.DecisionFacts) Outcome {
	acct, a := t.acct, t.action
	// A request seen before is answered from the ledger, without reading
	// the rail again, whenever its intent's state settles the answer.
	if it := facts.Aliased; it != nil && answersFromLedger(it.State) && e.windowCurrent(*it, facts.FamilyLatest) {
		// Only to a caller the scope gate admits on this account, and only
		// about an intent of its own owner (tenancy.go).
		if out, ok := e.admitToLedgerAnswer(ctx, req, p, acct, a.Kind, *it, facts); !ok {
			return out
		}
		res := decided{intent: *it}
		if it.State == intent.Applied {
			applied, err := e.ledger.AppliedAttempt(ctx, *it)
			if err != nil {
				return e.ledgerFailed(acct, req, "applied attempt", err)
			}
			res.applied = &applied
		}
		return e.answer(acct, req, res, rail.Stamped{})
	}
	if out, ok := e.early(req, p, acct, a, facts); !ok {
		return out
	}
	if facts.Remembered && e.aliases.has(p.Agent.ID, t.alias) {
		// Sent before: whether its intent answers it, without the rail
		// read, is for a read of the ledger to say.
		return readAgain
	}
	e.aliases.add(p.Agent.ID, t.alias)

	// The read is this agent's to pay for (railreads.go): past its bucket
	// it is not sent, and the request is refused for it.
	reads := e.meter(acct.Client, p.Agent.ID, acct)
	rctx, cancel := context.WithTimeout(ctx, e.opts.ResolveTimeout)
	readAt := time.Now()
	ref, err := e.resolve(rctx, acct, reads.client(), a)
	cancel()
	wait, limited := reads.limited()
	switch {
	case limited:
		return e.railReadsRefused(acct, req, p.Agent.ID, wait)
	case errors.Is(err, rail.ErrReferent):
		return refuseRail(acct, req, ReasonReferentUnresolved, err.Error(), http.StatusForbidden)
	case err != nil:
		e.log.Warn("referent not resolved", "request_id", req.RequestID, "rail_account", acct.ID, "err", err)
		return refuseRail(acct, req, ReasonRailUnreachable, fmt.Sprintf("Countersign could not read %s from the rail to check it; no money moved, retry later.", a.Subject), http.StatusServiceUnavailable)
	}

	// The referent's own id is the subject: a refund named by charge and
	// one named by its payment intent are one action.
	if ref.Subject != "" {
		a.Subject = ref.Subject
	}
	key := sik.Action{V: sik.Version, RailAccount: acct.ID, Action: string(a.Kind), Subject: a.Subject,
		Currency: a.Currency, Extra: maps.Clone(a.Extra), Distinct: a.Distinct}
	if key.Extra == nil {
		key.Extra = map[string]string{}
	}
	if key.Currency == "" {
		// A refund names no currency: it is the payment's. A request that
		// names another is keyed as asked and refused by the value gate.
		key.Currency = ref.Currency
	}
	// G1 before the ledger is asked: a proposal of an existing intent is
	// answered from it (or moves it) without the ladder. Free text a
	// mandate refuses is refused here, before any intent: it is this
	// request's, not the action's, so it never blocks a held intent that
	// the same action without it may still complete.
	m, out, ok := e.admitScope(req, p, acct, a.Kind, key.Currency, rail.FreeTextMembers(a.Labels), facts)
	if !ok {
		return out
	}
	// G6's facts that need I/O: the pinned tool's description and entry,
	// and the whole tools list, as the MCP server lists them now.
	toolHash, refused := e.describeTool(ctx, req, p.Agent.ID, acct, t.tool, m)
	if refused != nil {
		return *refused
	}
	if window := idempotencyWindowOf(m, a.Kind); window > 0 {
		if facts.Remembered {
			// Which generation of its family the request is depends on the
			// family's newest intent, which only a read tells.
			return readAgain
		}
		key.Window = e.familyWindow(window, familyLatest(facts))
	}
	value := int64(0)
	if a.AmountMinor != nil {
		key.AmountMinor, value = *a.AmountMinor, *a.AmountMinor
	} else {
		// A missing refund amount is a full refund. Its SIK says "full",
		// not the balance, so a retry after it applied is the same action;
		// it is valued at what is refundable now (the value gate refuses
		// a full refund of nothing).
		key.Extra["amount"] = "full"
		value = max(ref.RefundableMinor, 0)
	}
	canonical, s, err := key.Keyed()
	if err != nil {
		return refuseRail(acct, req, ReasonInvalidAction, err.Error(), http.StatusBadRequest)
	}
	if out, refused := foreignStamp(req, e.opts, acct, a, s); refused {
		return out
	}
	// A native caller sends the request itself and reports the answer:
	// the attempt is bound to a token only it receives. Envoy's attempts
	// have none; ext_proc reports them over the trusted listener.
	var token string
	var tokenHash []byte
	if req.Source == SourceDecide {
		// Its word about the answer counts only once the rail's listing
		// shows the body stamp (confirmReported): a call that cannot
		// carry one could never be confirmed, and would end quarantined
		// whatever the rail did.
		if st, err := acct.Adapter.Stamp(a, s, 0); err != nil || st.BodyField == "" {
			return refuseRail(acct, req, ReasonInvalidAction, "Countersign cannot confirm a native caller's answer to this call: it has no argument that carries the body stamp, "+
				"so the rail's listing could never show the entity is this call's. Send it through Envoy, whose response path Countersign reads itself.", http.StatusBadRequest)
		}
		if token, tokenHash, err = newCommitToken(); err != nil {
			e.log.Error("commit token failed; denying", "request_id", req.RequestID, "err", err)
			return refuseRail(acct, req, ReasonInternal, "Countersign failed internally; no money moved.", http.StatusServiceUnavailable)
		}
	}
	pr := &proposal{req: req, principal: p, acct: acct, action: a, ref: ref, value: value, currency: key.Currency,
		key: ledger.Key{RailAccount: acct.ID, SIK: string(s)}, s: s, canonical: string(canonical), alias: t.alias, family: family(key.Window, t.alias),
		tokenHash: tokenHash, facts: facts, now: e.now(), readAt: readAt, tool: t.tool, toolHash: toolHash}
	chaos.Point(chaos.BeforeWAL)
	if facts.Aliased == nil {
		if out, done := e.fresh(ctx, pr); done {
			return e.withToken(out, token)
		}
		if facts.Remembered && !pr.factsHeld {
			// The ledger refused what was remembered (a revocation, a newer
			// mandate), or fresh wrote nothing for another reason before
			// checking them: decided again on facts read now. The locking
			// transaction runs on remembered facts only once a write has
			// found them current.
			return readAgain
		}
	}
	out = e.propose(ctx, pr)
	out.locked = true
	return e.withToken(out, token)
}

func (e *Engine) withToken(out Outcome, token string) Outcome {
	if out.Verdict == Allow && out.Intent != nil {
		out.Intent.CommitToken = token
	}
	return out
}

// ledgerFailed is the deny for a ledger error on the action path.
func (e *Engine) ledgerFailed(acct *rails.Account, req Request, what string, err error) Outcome {
	if errors.Is(err, ledger.ErrUnavailable) {
		return refuseRail(acct, req, ReasonLedgerUnavailable, "Countersign's ledger is unreachable, so no money can move; retry later.", http.StatusServiceUnavailable)
	}
	e.log.Error(what+" failed; denying", "request_id", req.RequestID, "err", err)
	return refuseRail(acct, req, ReasonInternal, "Countersign failed internally; no money moved.", http.StatusServiceUnavailable)
}

// answer turns what the decision did into the response.
func (e *Engine) answer(acct *rails.Account, req Request, res decided, stamped rail.Stamped) Outcome {
	it := res.intent
	ref := &IntentRef{RailAccount: it.RailAccount, SIK: it.SIK}
	var out Outcome
	if g := res.gates; g != nil && g.Verdict != Allow {
		out = refuseRail(acct, req, g.ReasonCode, g.Reason, http.StatusForbidden)
		out.Gates = g.Gates
		if g.Verdict == Block {
			return out // nothing was written: no intent to name
		}
		out.Verdict, out.Intent, out.DecisionID = Hold, ref, res.decisionID
		return out
	}
	switch {
	case res.attempt != nil:
		// Header names in lower case, as Envoy (and HTTP/2) carry them.
		headers := make(map[string]string, len(stamped.Headers)+1)
		for k, v := range stamped.Headers {
			headers[strings.ToLower(k)] = v
		}
		headers["authorization"] = acct.AuthHeader()
		// The rail's answer is read to commit the attempt (its entity, its
		// fee): the agent may not choose to have it compressed, which
		// would leave the answer unread (ambiguous, its fee uncounted).
		headers["accept-encoding"] = "identity"
		if mt := rail.BodyMediaType(stamped.BodyField); mt != "" {
			// Set here too for deployments without ext_proc (Istio CUSTOM).
			headers["content-type"] = mt
		}
		ref.AttemptSeq, ref.Stamp = res.attempt.Seq, res.attempt.Stamp
		ref.BodyField, ref.BodyValue = stamped.BodyField, stamped.BodyValue
		if stamped.AmountField != "" {
			// What the intent holds, as every attempt of it leaves: the
			// rail moves no more than the hold, and one stamp keeps one
			// body.
			ref.AmountField, ref.Amount = stamped.AmountField, it.AmountMinor
		}
		if stamped.CallID != "" {
			// One id per attempt: an answer to an earlier attempt under
			// the same stamp, still running at the server, is not this
			// one's either.
			ref.CallID = fmt.Sprintf("%s#%d", stamped.CallID, res.attempt.Seq)
		}
		out = Outcome{Verdict: Allow, ReasonCode: ReasonAllowed,
			Reason:     fmt.Sprintf("attempt %d of intent %s", res.attempt.Seq, it.SIK),
			SetHeaders: headers, DecisionID: res.decisionID}
		if res.gates != nil {
			out.Gates = res.gates.Gates
		}
	case res.applied != nil:
		out = replayApplied(acct, req, it, res.applied)
	case it.State == intent.InFlight:
		out = refuseRail(acct, req, ReasonDuplicateInFlight, fmt.Sprintf("An identical request (intent %s) is in progress at the rail; retry the same request shortly for its result.", it.SIK), http.StatusConflict)
	case it.State == intent.Unknown || it.State == intent.Reconciling:
		out = refuseRail(acct, req, ReasonReconciling, fmt.Sprintf("An identical request (intent %s) has an unconfirmed outcome that Countersign is reconciling with the rail (%s); retry the same request later.", it.SIK, it.Reason), http.StatusConflict)
	case it.State == intent.Quarantined:
		out = refuseRail(acct, req, ReasonQuarantined, fmt.Sprintf("Intent %s is quarantined for a person to resolve: %s", it.SIK, it.Reason), http.StatusConflict)
	case it.State == intent.Held:
		out = refuseRail(acct, req, ReasonIntentHeld, fmt.Sprintf("Intent %s is held for the owner's approval; send the identical request again after approval.", it.SIK), http.StatusForbidden)
	default:
		out = refuseRail(acct, req, ReasonIntentBlocked, fmt.Sprintf("Intent %s was refused (%s): %s", it.SIK, it.State, it.Reason), http.StatusForbidden)
	}
	out.Intent = ref
	return out
}

// refuseRail refuses with a body shaped like the rail's own error (for an
// MCP server, a JSON-RPC error for the call's id).
func refuseRail(acct *rails.Account, req Request, code, reason string, status int) Outcome {
	out := refuse(req, code, reason, status)
	if acct == nil {
		return out
	}
	if rr, ok := acct.Adapter.(rail.RequestRefuser); ok {
		out.HTTPStatus, out.Body = rr.RefuseRequest(railRequest(req), status, code, reason)
		return out
	}
	out.Body = acct.Adapter.Refusal(status, code, reason)
	return out
}

func railRequest(req Request) rail.Request {
	return rail.Request{Method: req.Method, Host: req.Host, Path: req.Path, Headers: req.Headers, Body: req.Body}
}

func pathOnly(p string) string {
	for i := range len(p) {
		if p[i] == '?' {
			return p[:i]
		}
	}
	return p
}

// aliasOf keys the request as the agent sent it: the subject as named, the
// amount or "full", the currency or "XXX" (ISO 4217: no currency). The same
// request always resolves to the same intent, so the alias may answer a
// duplicate before any read at the rail.
func aliasOf(account string, a rail.Action) (string, error) {
	k := sik.Action{V: sik.Version, RailAccount: account, Action: string(a.Kind), Subject: a.Subject,
		Currency: a.Currency, Extra: maps.Clone(a.Extra), Distinct: a.Distinct}
	if k.Extra == nil {
		k.Extra = map[string]string{}
	}
	if k.Currency == "" {
		k.Currency = "XXX"
	}
	if a.AmountMinor != nil {
		k.AmountMinor = *a.AmountMinor
	} else {
		k.Extra["amount"] = "full"
	}
	k.Extra["countersign.alias"] = "request"
	s, err := sik.Key(k)
	return string(s), err
}

// windowCurrent reports whether an aliased intent is the one a request
// with its alias is now: always for an action without an idempotency
// window; for one with, only the family's newest intent (latest), while it
// is unresolved or moved less than its window ago (familyWindow's rule). A key
// whose window cannot be read is not current: the request then takes the
// whole path, which keys it afresh.
func (e *Engine) windowCurrent(it ledger.Intent, latest *ledger.Intent) bool {
	window, err := windowMember(it)
	if err != nil {
		return false
	}
	if window == "" {
		return true
	}
	w, _, ok := parseWindow(window)
	return ok && latest != nil && latest.Key == it.Key && e.sameAction(it, w)
}

// answersFromLedger reports whether an intent in state s answers a new
// identical request without the rail: everything but the states a new
// proposal may move on (reopen, retry, release an approved hold, start an
// attempt, expire a lease).
func answersFromLedger(s intent.State) bool {
	switch s {
	case intent.Applied, intent.Unknown, intent.Reconciling, intent.Quarantined, intent.Blocked:
		return true
	}
	return false
}

// idempotencyWindowOf is the mandate's idempotency window for the action
// kind, 0 for none: identical payouts (transfers, captures) within it are
// one action. Refunds never take a window (DESIGN.md §3): two identical
// refunds of one payment are one action whenever sent. m is the active
// mandate the scope gate admitted under (mandates never change, so reading
// it outside the deciding transaction is safe; the gates re-read it
// inside).
func idempotencyWindowOf(m *countersignv1.Mandate, kind sik.Kind) time.Duration {
	if kind == sik.KindRefund || m == nil {
		return 0
	}
	for _, s := range m.GetIdempotency() {
		if kindName(s.GetActionKind()) == string(kind) && s.GetWindow().AsDuration() > 0 {
			return s.GetWindow().AsDuration()
		}
	}
	return 0
}

// familyWindow is the window member of the key of a request under an
// idempotency window w, given its family's newest intent (latest, nil for
// none): the request is that intent while it is unresolved (it may still
// move money, or has) or moved less than w ago, and the family's next generation
// otherwise ("<w>#<n>"). The window is a span after the family's last
// action, not a slot of the clock: there is no boundary for an agent to
// time a retry across. Deciders that read the same newest intent key the
// same generation, so concurrent identical requests meet on one intent's
// primary key.
func (e *Engine) familyWindow(w time.Duration, latest *ledger.Intent) string {
	next := 0
	if latest != nil {
		window, _ := windowMember(*latest)
		if e.sameAction(*latest, w) {
			return window
		}
		if _, gen, ok := parseWindow(window); ok {
			next = gen + 1
		}
	}
	return fmt.Sprintf("%s#%d", w, next)
}

// family is the family a new intent is born into: its alias, under an
// idempotency window; none otherwise.
func family(window, alias string) string {
	if window == "" {
		return ""
	}
	return alias
}

// familyLatest is the newest intent of a request's family, as read: the
// newest intent born with the family, else the aliased one if it was keyed
// under a window (born before families, it is its family's first).
func familyLatest(facts ledger.DecisionFacts) *ledger.Intent {
	if facts.FamilyLatest != nil {
		return facts.FamilyLatest
	}
	if it := facts.Aliased; it != nil {
		if window, err := windowMember(*it); err == nil && window != "" {
			return it
		}
	}
	return nil
}

// windowMember is the window member of an intent's key ("" for none).
func windowMember(it ledger.Intent) (string, error) {
	var k struct {
		Window string `json:"window"`
	}
	err := json.Unmarshal([]byte(it.Canonical), &k)
	return k.Window, err
}

// sameAction reports whether a request of intent it's family, under
// window w, is it: while it is unresolved, or until w has passed since it
// last moved (UpdatedAt: its last transition, after every attempt it
// started and the rail's answer). Not since its birth: an intent whose one
// effect came late (a retry after a proof of absence, a held payout the
// owner released late) would have its identical request, seconds after
// that effect, keyed as the family's next generation, a new idempotency
// key at the rail (found by a review: two identical payouts 3 s apart
// under a 10-minute window).
func (e *Engine) sameAction(it ledger.Intent, w time.Duration) bool {
	switch it.LastEvent {
	case string(intent.ResolvedNotApplied):
		// The owner's word ended it, which is no proof of absence: it
		// answers its identical requests for good, as it did while
		// quarantined (a new one needs a distinct reason), never a next
		// generation under a new idempotency key (found by a review).
		return true
	case string(intent.HoldRejected):
		// The owner said no to this request: it stays refused for good (a
		// new one needs a distinct reason), not asked again as the next
		// generation once the window has passed, which let an agent wear
		// its owner down one window at a time (found by a review). A gate's
		// BLOCK is not this: it is the mandate's answer at that time (a
		// spent budget, a full window, a paused mandate), which may change,
		// so after the window the identical request is decided afresh.
		return true
	}
	switch it.State {
	case intent.Applied, intent.Blocked, intent.ConfirmedNotApplied, intent.FailedTerminal:
		return e.now().Sub(it.UpdatedAt) < w
	}
	return true
}

// parseWindow reads a key's window member "<length>#<generation>". A key
// of a slot of the clock ("<length>@<slot>", before generations) has no
// generation: its family's next one is 0.
func parseWindow(s string) (w time.Duration, gen int, ok bool) {
	if length, slot, isSlot := strings.Cut(s, "@"); isSlot {
		w, err := time.ParseDuration(length)
		_, serr := strconv.ParseInt(slot, 10, 64)
		return w, -1, err == nil && serr == nil && w > 0
	}
	length, g, found := strings.Cut(s, "#")
	w, err := time.ParseDuration(length)
	n, nerr := strconv.Atoi(g)
	if !found || err != nil || nerr != nil || w <= 0 || n < 0 {
		return 0, 0, false
	}
	return w, n, true
}

// replayApplied answers a duplicate of an APPLIED intent from the ledger,
// without touching the rail. Only an answer the commit path classified as
// the intent's own is replayed (one settled by reconciliation may have
// stored another entity's body, or a 5xx); when the answer was lost and
// reconciliation found the entity, the entity as the rail listed it is the
// answer — except for adapters that reshape stored answers (an MCP
// server's), which get a 409 naming the entity. Either goes without the
// client secrets the rail put in it (secrets.ScrubAnswer): the ledger
// keeps the rail's answer as it came, and a replay reaches a native
// caller with no ext_proc in its path (found by a review).
func replayApplied(acct *rails.Account, req Request, it ledger.Intent, a *ledger.Attempt) Outcome {
	headers := map[string]string{"content-type": "application/json", "x-countersign-replay": "true"}
	replayer, reshapes := acct.Adapter.(rail.Replayer)
	switch r := a.Response; {
	case r != nil && r.Status >= 200 && r.Status < 300 && it.LastEvent == string(intent.RailApplied):
		body := r.Body
		if reshapes {
			var err error
			if body, err = replayer.Replay(railRequest(req), rail.Response{Status: r.Status, Headers: r.Headers, Body: r.Body}); err != nil {
				return refuseRail(acct, req, ReasonInternal, "Countersign could not re-address the stored answer: "+err.Error(), http.StatusServiceUnavailable)
			}
		}
		body, _ = secrets.ScrubAnswer(headers["content-type"], body)
		return Outcome{Verdict: Block, Replayed: true, ReasonCode: ReasonDuplicateApplied, HTTPStatus: r.Status, Body: body, ResponseHeaders: headers,
			Reason: fmt.Sprintf("already applied as %s; this is the rail's stored answer", it.RailEntityID)}
	case a.FoundEntity != nil && !reshapes:
		headers["x-countersign-settled-by"] = "reconciliation"
		body, _ := secrets.ScrubAnswer(headers["content-type"], a.FoundEntity)
		return Outcome{Verdict: Block, Replayed: true, ReasonCode: ReasonDuplicateApplied, HTTPStatus: http.StatusOK, Body: body, ResponseHeaders: headers,
			Reason: fmt.Sprintf("already applied as %s (settled by reconciliation); this is the entity as the rail lists it", it.RailEntityID)}
	default:
		by := "settled by reconciliation"
		if it.LastEvent == string(intent.ResolvedApplied) {
			by = "resolved by the owner"
		}
		out := refuseRail(acct, req, ReasonDuplicateApplied, fmt.Sprintf("Already applied as %s (%s); the rail's own answer was not kept.", it.RailEntityID, by), http.StatusConflict)
		out.ResponseHeaders, out.Replayed = headers, true
		return out
	}
}
