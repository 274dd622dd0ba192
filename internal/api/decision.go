package api

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/engine"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/quota"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/reconcile"
	"github.com/countersign/countersign/internal/sik"
)

// Engine is the decision engine as the API uses it.
type Engine interface {
	Decide(ctx context.Context, req engine.Request) engine.Outcome
	DecideAction(ctx context.Context, req engine.Request, railAccount string, a rail.Action) engine.Outcome
	Authenticate(ctx context.Context, c engine.Caller) (ledger.Principal, error)
	CommitReported(ctx context.Context, p ledger.Principal, token string, ref engine.IntentRef, resp rail.Response) (ledger.Intent, rail.Classification, error)
	ChargeAgent(p ledger.Principal) error
}

// IntentReader reads intents, for their agent or their owner, and tells
// whether an owner holds a rail account.
type IntentReader interface {
	GetIntent(ctx context.Context, k ledger.Key) (ledger.Intent, []ledger.Attempt, error)
	OwnerIntent(ctx context.Context, ownerID string, k ledger.Key) (ledger.Intent, []ledger.Attempt, error)
	OwnerHoldsRailAccount(ctx context.Context, ownerID, railAccount string) error
}

// Reconciler runs a reconciliation pass over the intents in scope,
// claiming at most limit (0: its own batch size, which also bounds limit).
type Reconciler interface {
	PassIn(ctx context.Context, scope ledger.ReconcileScope, limit int) (reconcile.Report, error)
}

// DecisionServer implements countersign.v1.DecisionService: the engine
// without Envoy, for SDKs and MCP proxies.
//
// Who may call what (DESIGN.md §1, A1): Decide, Commit and GetIntent need
// an agent credential, and Commit and GetIntent answer only about the
// caller's own intents; Reconcile needs an owner, admitted by the owner
// guard (ownerauth.Guard.Methods) before the handler runs.
type DecisionServer struct {
	countersignv1.UnimplementedDecisionServiceServer
	engine     Engine
	intents    IntentReader
	reconciler Reconciler
	ownerOf    OwnerOf
	peers      quota.Peers
	// maxBody is the largest request body Decide reads whole (Envoy's
	// max_request_bytes); a longer one is decided as truncated.
	maxBody int
}

// DefaultMaxBody is the configuration's default --max-request-bytes.
const DefaultMaxBody = 64 << 10

// NewDecisionServer returns the decision service. Reconcile's owner is the
// one ownerauth's guard admitted.
func NewDecisionServer(e Engine, r IntentReader, rec Reconciler) *DecisionServer {
	return &DecisionServer{engine: e, intents: r, reconciler: rec, ownerOf: ownerauth.OwnerID, maxBody: DefaultMaxBody}
}

// WithMaxBody sets the largest request body Decide reads whole: Envoy's
// max_request_bytes (--max-request-bytes), so that a native caller's
// request is held to what one through Envoy is.
func (s *DecisionServer) WithMaxBody(n int) *DecisionServer {
	s.maxBody = n
	return s
}

// WithPeers sets how a caller's source is named for the failed-credential
// quota (which proxies' forwarding headers count); the default trusts none.
func (s *DecisionServer) WithPeers(p quota.Peers) *DecisionServer {
	s.peers = p
	return s
}

// credentialFromMetadata reads "authorization: Bearer <credential>". More
// than one Authorization value is no credential: which one would be
// believed is exactly what an attacker would play with.
func credentialFromMetadata(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) != 1 {
		return ""
	}
	if scheme, cred, ok := strings.Cut(strings.TrimSpace(vals[0]), " "); ok && strings.EqualFold(scheme, "bearer") {
		return strings.TrimSpace(cred)
	}
	return ""
}

// caller is who calls, for authentication: its source as the connection
// (or a trusted proxy) shows it, never as its own metadata claims.
func (s *DecisionServer) caller(ctx context.Context) engine.Caller {
	return engine.Caller{Credential: credentialFromMetadata(ctx), RequestID: requestID(ctx), Peer: s.peers.Source(ctx)}
}

// agent authenticates the calling agent.
func (s *DecisionServer) agent(ctx context.Context) (ledger.Principal, error) {
	p, err := s.engine.Authenticate(ctx, s.caller(ctx))
	if err != nil {
		var ex *quota.ExhaustedError
		if errors.As(err, &ex) {
			quota.SetRetryAfter(ctx, ex.RetryAfter)
		}
		return p, ToStatus(err)
	}
	return p, nil
}

func requestID(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-request-id"); len(v) > 0 {
		return v[0]
	}
	return ""
}

var actionKinds = map[countersignv1.ActionKind]sik.Kind{
	countersignv1.ActionKind_ACTION_KIND_REFUND:   sik.KindRefund,
	countersignv1.ActionKind_ACTION_KIND_PAYOUT:   sik.KindPayout,
	countersignv1.ActionKind_ACTION_KIND_TRANSFER: sik.KindTransfer,
}

// MaxReportedBody bounds the body of a rail answer a native caller
// reports: the rails answer a refund or payout in a few KiB, and the body
// is stored on the attempt, in a ledger every agent shares.
const MaxReportedBody = 64 << 10

// Decide runs the gates and the ledger for one proposed action. The rail's
// secret key is never in the answer (C1): stamps only.
func (s *DecisionServer) Decide(ctx context.Context, req *countersignv1.DecideRequest) (*countersignv1.DecideResponse, error) {
	c := s.caller(ctx)
	er := engine.Request{Source: engine.SourceDecide, RequestID: c.RequestID, Credential: c.Credential, Peer: c.Peer}
	var out engine.Outcome
	switch form := req.GetForm().(type) {
	case *countersignv1.DecideRequest_HttpRequest:
		h := form.HttpRequest
		er.Method, er.Host, er.Path, er.Body, er.BodyTruncated = h.GetMethod(), h.GetHost(), h.GetPath(), h.GetBody(), h.GetBodyTruncated()
		if len(er.Body) > s.maxBody {
			// Envoy sends no more than max_request_bytes of a body, and
			// one it cut is refused; a native caller's is held to the same
			// (found by a review: 400 KiB in an MCP call's metadata were
			// kept with its attempt).
			er.BodyTruncated = true
		}
		er.Headers = map[string]string{}
		for k, v := range h.GetHeaders() {
			if k = strings.ToLower(k); k != "authorization" && k != "proxy-authorization" {
				er.Headers[k] = v
			}
		}
		out = s.engine.Decide(ctx, er)
	case *countersignv1.DecideRequest_Action:
		a := form.Action
		act := rail.Action{Kind: actionKinds[a.GetActionKind()], Subject: a.GetSubject(), Currency: a.GetCurrency(),
			Payee: a.GetPayee(), Extra: maps.Clone(a.GetExtra()), Distinct: a.GetDistinct()}
		if a.AmountMinor != nil {
			v := a.GetAmountMinor()
			act.AmountMinor = &v
		}
		out = s.engine.DecideAction(ctx, er, a.GetRailAccount(), act)
	}
	if engine.IsAuthRefusal(out) {
		// Refusing the caller is not a verdict on an action.
		err := engine.AuthError(out)
		var ex *quota.ExhaustedError
		if errors.As(err, &ex) {
			quota.SetRetryAfter(ctx, ex.RetryAfter)
		}
		return nil, ToStatus(err)
	}
	return toDecideResponse(out), nil
}

func toDecideResponse(out engine.Outcome) *countersignv1.DecideResponse {
	resp := &countersignv1.DecideResponse{ReasonCode: out.ReasonCode, Reason: out.Reason}
	switch out.Verdict {
	case engine.Allow:
		resp.Verdict = countersignv1.Verdict_VERDICT_ALLOW
	case engine.Hold:
		resp.Verdict = countersignv1.Verdict_VERDICT_HOLD
	default:
		resp.Verdict = countersignv1.Verdict_VERDICT_BLOCK
	}
	if out.Intent != nil {
		resp.Intent = &countersignv1.Intent{RailAccount: out.Intent.RailAccount, Sik: out.Intent.SIK}
		resp.AttemptSeq = int32(out.Intent.AttemptSeq)
	}
	if out.Verdict == engine.Allow {
		resp.Stamps = map[string]string{}
		for k, v := range out.SetHeaders {
			if k != "authorization" { // the rail key never leaves Countersign
				resp.Stamps[k] = v
			}
		}
		if out.Intent != nil {
			if out.Intent.BodyField != "" {
				resp.Stamps[out.Intent.BodyField] = out.Intent.BodyValue
			}
			if out.Intent.AmountField != "" {
				// A full refund is sent for the amount its intent holds.
				resp.Stamps[out.Intent.AmountField] = strconv.FormatInt(out.Intent.Amount, 10)
			}
			resp.CommitToken = out.Intent.CommitToken
		}
		return resp
	}
	hr := &countersignv1.HttpResponse{HttpStatus: int32(out.HTTPStatus), Body: out.Body, Headers: maps.Clone(out.ResponseHeaders)}
	if out.ReasonCode == engine.ReasonDuplicateApplied {
		resp.StoredResponse = hr
	} else {
		resp.Refusal = hr
	}
	return resp
}

var transportErrors = map[countersignv1.TransportError]string{
	countersignv1.TransportError_TRANSPORT_ERROR_TIMEOUT: "timeout",
	countersignv1.TransportError_TRANSPORT_ERROR_RESET:   "connection reset",
	countersignv1.TransportError_TRANSPORT_ERROR_LOST:    "response lost",
}

// Commit records the rail's answer to an allowed attempt, reported by the
// agent that Decide allowed it to, with the attempt's commit token.
func (s *DecisionServer) Commit(ctx context.Context, req *countersignv1.CommitRequest) (*countersignv1.CommitResponse, error) {
	p, err := s.agent(ctx)
	if err != nil {
		return nil, err
	}
	ref := engine.IntentRef{RailAccount: req.GetRailAccount(), SIK: req.GetSik(), AttemptSeq: int(req.GetAttemptSeq()),
		BodyStamped: req.GetBodyStamped()}
	var resp rail.Response
	switch o := req.GetOutcome().(type) {
	case *countersignv1.CommitRequest_Response:
		resp = rail.Response{Status: int(o.Response.GetHttpStatus()), Headers: o.Response.GetHeaders(), Body: o.Response.GetBody()}
		if req.GetBodyTruncated() {
			// A response read in part cannot prove anything.
			resp.Body = nil
		}
	case *countersignv1.CommitRequest_TransportError:
		resp = rail.Response{TransportErr: errors.New(transportErrors[o.TransportError])}
	}
	if len(resp.Body) > MaxReportedBody {
		return nil, status.Errorf(codes.InvalidArgument, "a reported rail answer's body is %d bytes; at most %d are taken (the rails' answers are a few KiB)", len(resp.Body), MaxReportedBody)
	}
	if n := engine.HeaderBytes(resp.Headers); n > engine.MaxHeaderBytes {
		// Kept with the attempt, as the body is (found by a review: 55
		// headers of 8 KiB stored 451 KB).
		return nil, status.Errorf(codes.InvalidArgument, "a reported rail answer's headers come to %d bytes; at most %d are taken", n, engine.MaxHeaderBytes)
	}
	it, _, err := s.engine.CommitReported(ctx, p, req.GetCommitToken(), ref, resp)
	if err != nil {
		var ex *quota.ExhaustedError
		if errors.As(err, &ex) {
			quota.SetRetryAfter(ctx, ex.RetryAfter)
		}
		return nil, ToStatus(err)
	}
	_, atts, err := s.intents.GetIntent(ctx, it.Key)
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &countersignv1.CommitResponse{Intent: toIntent(it)}
	for _, a := range atts {
		if a.Seq == ref.AttemptSeq {
			out.Attempt = toAttempt(a)
		}
	}
	return out, nil
}

// GetIntent returns an intent and its attempts to the intent's own agent;
// another agent's intent is NotFound, as one that does not exist.
func (s *DecisionServer) GetIntent(ctx context.Context, req *countersignv1.DecisionServiceGetIntentRequest) (*countersignv1.DecisionServiceGetIntentResponse, error) {
	p, err := s.agent(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.engine.ChargeAgent(p); err != nil {
		var ex *quota.ExhaustedError
		if errors.As(err, &ex) {
			quota.SetRetryAfter(ctx, ex.RetryAfter)
		}
		return nil, ToStatus(err)
	}
	k := ledger.Key{RailAccount: req.GetRailAccount(), SIK: req.GetSik()}
	it, atts, err := s.intents.GetIntent(ctx, k)
	if err == nil && (it.AgentID == "" || it.AgentID != p.Agent.ID) {
		err = ledger.NotFoundIntent(k)
	}
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &countersignv1.DecisionServiceGetIntentResponse{Intent: toIntent(it)}
	for _, a := range atts {
		out.Attempts = append(out.Attempts, toAttempt(a))
	}
	return out, nil
}

// Reconcile runs one reconciliation pass, for one intent or a batch. The
// minimum delay before the first query still applies: an intent that is
// not due yet is reported NOT_DUE. Only an owner calls it (the guard has
// refused anyone else, agents included), and the pass acts only on what
// the owner owns (A1): intents of its own agents on rail accounts it
// holds. Another owner's intent is NotFound, as one that does not exist; a
// batch naming a rail account the owner does not hold is refused, with one
// answer whether the account exists or not; a batch claims at most limit
// intents (0: the reconciler's batch size, which also bounds it), of
// rail_account when set, and expires, claims and reads the rail for no
// one else's.
func (s *DecisionServer) Reconcile(ctx context.Context, req *countersignv1.ReconcileRequest) (*countersignv1.ReconcileResponse, error) {
	owner, err := s.ownerOf(ctx)
	if err != nil {
		return nil, ToStatus(err)
	}
	if owner == "" {
		return nil, ToStatus(ownerauth.ErrUnauthenticated)
	}
	scope := ledger.ReconcileScope{OwnerID: owner}
	limit := 0
	if k := req.GetIntent(); k != nil {
		scope.Only = &ledger.Key{RailAccount: k.GetRailAccount(), SIK: k.GetSik()}
		if _, _, err := s.intents.OwnerIntent(ctx, owner, *scope.Only); err != nil {
			return nil, ToStatus(err)
		}
		// Its own agent's intent: the refusal tells it nothing it did not
		// know (the account was withdrawn from it).
		if err := s.intents.OwnerHoldsRailAccount(ctx, owner, scope.Only.RailAccount); err != nil {
			return nil, ToStatus(err)
		}
	} else {
		b := req.GetBatch()
		if b.GetLimit() < 0 {
			return nil, status.Errorf(codes.InvalidArgument, "batch.limit is %d; it may not be negative", b.GetLimit())
		}
		limit = int(b.GetLimit())
		if scope.RailAccount = b.GetRailAccount(); scope.RailAccount != "" {
			if err := s.intents.OwnerHoldsRailAccount(ctx, owner, scope.RailAccount); err != nil {
				return nil, ToStatus(err)
			}
		}
	}
	rep, err := s.reconciler.PassIn(ctx, scope, limit)
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &countersignv1.ReconcileResponse{}
	for _, r := range rep.Results {
		f := &countersignv1.ReconcileFinding{
			Intent:              &countersignv1.IntentKey{RailAccount: r.Key.RailAccount, Sik: r.Key.SIK},
			ToState:             intentStates[r.State],
			RailEntityId:        r.Entity,
			PaginationExhausted: r.Outcome == ledger.FindingAbsent,
			PagesRead:           int32(r.Pages),
			Reason:              r.Detail,
		}
		switch {
		case r.State == "QUARANTINED":
			f.Outcome = countersignv1.ReconcileOutcome_RECONCILE_OUTCOME_QUARANTINED
		case r.Outcome == ledger.FindingApplied:
			f.Outcome = countersignv1.ReconcileOutcome_RECONCILE_OUTCOME_FOUND_APPLIED
		case r.Outcome == ledger.FindingAbsent:
			f.Outcome = countersignv1.ReconcileOutcome_RECONCILE_OUTCOME_CONFIRMED_ABSENT
		default:
			f.Outcome = countersignv1.ReconcileOutcome_RECONCILE_OUTCOME_INCONCLUSIVE
		}
		out.Findings = append(out.Findings, f)
	}
	if scope.Only != nil && len(out.Findings) == 0 {
		it, _, err := s.intents.GetIntent(ctx, *scope.Only)
		if err != nil {
			return nil, ToStatus(err)
		}
		f := &countersignv1.ReconcileFinding{Intent: req.GetIntent(), FromState: intentStates[string(it.State)], ToState: intentStates[string(it.State)]}
		if it.State == "UNKNOWN" || it.State == "RECONCILING" {
			f.Outcome, f.Reason = countersignv1.ReconcileOutcome_RECONCILE_OUTCOME_NOT_DUE, "not due yet, or another reconciler holds it"
		} else {
			f.Outcome, f.Reason = countersignv1.ReconcileOutcome_RECONCILE_OUTCOME_NOT_NEEDED, "the intent's outcome is not ambiguous"
		}
		out.Findings = append(out.Findings, f)
	}
	return out, nil
}

var intentStates = map[string]countersignv1.IntentState{}

func init() {
	for v, name := range countersignv1.IntentState_name {
		intentStates[strings.TrimPrefix(name, "INTENT_STATE_")] = countersignv1.IntentState(v)
	}
}

var rails = map[string]countersignv1.Rail{
	"stripe": countersignv1.Rail_RAIL_STRIPE, "razorpay": countersignv1.Rail_RAIL_RAZORPAY, "mcp": countersignv1.Rail_RAIL_MCP,
}

var kinds = map[string]countersignv1.ActionKind{
	"refund": countersignv1.ActionKind_ACTION_KIND_REFUND, "payout": countersignv1.ActionKind_ACTION_KIND_PAYOUT,
	"transfer": countersignv1.ActionKind_ACTION_KIND_TRANSFER,
}

func toIntent(it ledger.Intent) *countersignv1.Intent {
	return &countersignv1.Intent{
		Rail: rails[it.Rail], RailAccount: it.RailAccount, Sik: it.SIK, State: intentStates[string(it.State)],
		ActionKind: kinds[it.Action], Subject: it.Subject,
		Amount: &countersignv1.Money{AmountMinor: it.AmountMinor, Currency: it.Currency},
		Payee:  it.Payee, Distinct: it.DistinctReason, StampGeneration: int32(it.StampGeneration),
		AttemptCount: int32(it.AttemptCount), CreateTime: timestamppb.New(it.CreatedAt), UpdateTime: timestamppb.New(it.UpdatedAt),
		LastReason: it.Reason, AgentId: it.AgentID, RailEntityId: it.RailEntityID,
	}
}

var attemptOutcomes = map[string]countersignv1.AttemptOutcome{
	"pending": countersignv1.AttemptOutcome_ATTEMPT_OUTCOME_PENDING, "in_progress": countersignv1.AttemptOutcome_ATTEMPT_OUTCOME_PENDING,
	"applied": countersignv1.AttemptOutcome_ATTEMPT_OUTCOME_APPLIED, "rejected": countersignv1.AttemptOutcome_ATTEMPT_OUTCOME_REJECTED,
	"ambiguous": countersignv1.AttemptOutcome_ATTEMPT_OUTCOME_AMBIGUOUS, "lease_expired": countersignv1.AttemptOutcome_ATTEMPT_OUTCOME_AMBIGUOUS,
	"fingerprint_mismatch": countersignv1.AttemptOutcome_ATTEMPT_OUTCOME_FINGERPRINT_MISMATCH,
}

func toAttempt(a ledger.Attempt) *countersignv1.Attempt {
	out := &countersignv1.Attempt{
		RailAccount: a.RailAccount, Sik: a.SIK, AttemptSeq: int32(a.Seq), StampGeneration: int32(a.StampGeneration),
		IdempotencyKey: a.Stamp, Outcome: attemptOutcomes[a.Outcome], StartTime: timestamppb.New(a.StartedAt),
		LeaseExpireTime: timestamppb.New(a.LeaseExpiresAt), RailEntityId: a.EntityID,
	}
	if a.FinishedAt != nil {
		out.EndTime = timestamppb.New(*a.FinishedAt)
	}
	if a.Response != nil {
		out.HttpStatus = int32(a.Response.Status)
	}
	return out
}
