package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/engine"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/mandate"
	"github.com/countersign/countersign/internal/outbox"
	"github.com/countersign/countersign/internal/rail"
)

// OwnerOf names the authenticated owner of a call; the owner API refuses a
// call without one.
type OwnerOf func(ctx context.Context) (string, error)

// OwnerServer implements countersign.v1.OwnerService. RPCs not built yet
// (approvals, intents listing and watching, audit listing, webhooks) answer
// Unimplemented.
type OwnerServer struct {
	countersignv1.UnimplementedOwnerServiceServer
	store    *ledger.Store
	ownerOf  OwnerOf
	webhooks outbox.AddressPolicy
	// auditVerifier checks the audit log's checkpoint signatures.
	auditVerifier note.Verifier
	// refundables reads a held refund's refundable balance now (the
	// engine); nil reports that this server cannot read the rail.
	refundables Refundables
	// now is the clock usage is counted at and audit verifications are
	// spaced by; nil means time.Now.
	now func() time.Time
	// watches caps each owner's open watch streams (intents.go).
	watches watchSlots
	// watchPage is how many record positions a watch reads at once; 0
	// means the default watchPage (tests page in small steps).
	watchPage int
	// verifyTurns spaces each owner's audit verifications (audit.go).
	verifyTurns verifyTurns
	// approvalsPolled, when set, is called on each WatchApprovals poll,
	// saying whether it read the live set (tests count an idle stream's).
	approvalsPolled func(readSet bool)
}

// Refundables reads what is still refundable on a refund now, as G2 would
// (*engine.Engine).
type Refundables interface {
	Refundable(ctx context.Context, it ledger.Intent) (engine.RefundableNow, error)
}

// WithRefundables lets GetApproval show a held refund's refundable balance
// now.
func (s *OwnerServer) WithRefundables(r Refundables) *OwnerServer {
	s.refundables = r
	return s
}

// NewOwnerServer returns the owner service.
func NewOwnerServer(store *ledger.Store, ownerOf OwnerOf) *OwnerServer {
	return &OwnerServer{store: store, ownerOf: ownerOf}
}

// WithWebhookAddresses sets which addresses webhook URLs may name (by
// default every special-purpose range is refused).
func (s *OwnerServer) WithWebhookAddresses(p outbox.AddressPolicy) *OwnerServer {
	s.webhooks = p
	return s
}

// errNoOwner is returned when no owner identity reached the service: the
// owner API is closed until owner authentication is configured.
var errNoOwner = withDetails(status.New(codes.Unauthenticated, "the owner API needs an owner credential"), "OWNER_UNAUTHENTICATED")

func (s *OwnerServer) owner(ctx context.Context) (string, error) {
	if s.ownerOf == nil {
		return "", errNoOwner
	}
	id, err := s.ownerOf(ctx)
	if err != nil || id == "" {
		return "", errNoOwner
	}
	return id, nil
}

const defaultPage = 50

func pageArgs(size int32, token string) (int, string, error) {
	n := int(size)
	if n <= 0 {
		n = defaultPage
	}
	after := ""
	if token != "" {
		b, err := base64.RawURLEncoding.DecodeString(token)
		if err != nil {
			return 0, "", status.Error(codes.InvalidArgument, "page_token is not one this server issued")
		}
		after = string(b)
	}
	return n, after, nil
}

func nextToken(n int, last string, got int) string {
	if got < n {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(last))
}

func toAgent(a ledger.Agent) *countersignv1.Agent {
	out := &countersignv1.Agent{AgentId: a.ID, DisplayName: a.Name, CreateTime: timestamppb.New(a.CreatedAt),
		State: countersignv1.AgentState_AGENT_STATE_ACTIVE}
	if a.Revoked {
		out.State = countersignv1.AgentState_AGENT_STATE_REVOKED
	}
	if a.RevokedAt != nil {
		out.RevokeTime = timestamppb.New(*a.RevokedAt)
	}
	return out
}

// CreateAgent creates an agent for the calling owner. Agent ids are
// assigned by Countersign.
func (s *OwnerServer) CreateAgent(ctx context.Context, req *countersignv1.CreateAgentRequest) (*countersignv1.CreateAgentResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	if req.GetAgentId() != "" {
		return nil, status.Error(codes.InvalidArgument, "agent_id is assigned by Countersign; leave it empty")
	}
	a, err := s.store.CreateAgent(ctx, owner, req.GetAgent().GetDisplayName())
	if err != nil {
		return nil, ToStatus(err)
	}
	return &countersignv1.CreateAgentResponse{Agent: toAgent(a)}, nil
}

// ListAgents pages through the owner's agents.
func (s *OwnerServer) ListAgents(ctx context.Context, req *countersignv1.ListAgentsRequest) (*countersignv1.ListAgentsResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	n, after, err := pageArgs(req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	agents, err := s.store.OwnerAgents(ctx, owner, after, n, req.GetShowRevoked())
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &countersignv1.ListAgentsResponse{}
	for _, a := range agents {
		out.Agents = append(out.Agents, toAgent(a))
	}
	if len(agents) > 0 {
		out.NextPageToken = nextToken(n, agents[len(agents)-1].ID, len(agents))
	}
	return out, nil
}

// GetAgent returns one of the owner's agents.
func (s *OwnerServer) GetAgent(ctx context.Context, req *countersignv1.GetAgentRequest) (*countersignv1.GetAgentResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	a, err := s.store.OwnerAgent(ctx, owner, req.GetAgentId())
	if err != nil {
		return nil, ToStatus(err)
	}
	return &countersignv1.GetAgentResponse{Agent: toAgent(a)}, nil
}

// RevokeAgent revokes an agent, one way; its credentials stop working at
// once (every decision reads the agent's state).
func (s *OwnerServer) RevokeAgent(ctx context.Context, req *countersignv1.RevokeAgentRequest) (*countersignv1.RevokeAgentResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := s.store.OwnerAgent(ctx, owner, req.GetAgentId()); err != nil {
		return nil, ToStatus(err)
	}
	if err := s.store.RevokeAgent(ctx, req.GetAgentId()); err != nil {
		return nil, ToStatus(err)
	}
	// Its approvals were voided with it (ledger.RevokeAgent): none can bring
	// a held request into motion. Another agent of the owner sending the
	// identical request needs an approval of its own, opened in its name
	// (only it can use it).
	a, err := s.store.OwnerAgent(ctx, owner, req.GetAgentId())
	if err != nil {
		return nil, ToStatus(err)
	}
	return &countersignv1.RevokeAgentResponse{Agent: toAgent(a)}, nil
}

var scopes = map[countersignv1.CredentialScope]credential.Scope{
	countersignv1.CredentialScope_CREDENTIAL_SCOPE_PROPOSE: credential.ScopePropose,
	countersignv1.CredentialScope_CREDENTIAL_SCOPE_EXECUTE: credential.ScopeExecute,
}

func toCredential(c ledger.Credential) *countersignv1.Credential {
	out := &countersignv1.Credential{CredentialId: c.ID, AgentId: c.AgentID, SecretPrefix: credential.Prefix,
		CreateTime: timestamppb.New(c.CreatedAt), ExpireTime: timestamppb.New(c.ExpiresAt),
		State: countersignv1.CredentialState_CREDENTIAL_STATE_ACTIVE}
	for k, v := range scopes {
		if v == c.Scope {
			out.Scope = k
		}
	}
	switch {
	case c.RevokedAt != nil:
		out.State = countersignv1.CredentialState_CREDENTIAL_STATE_REVOKED
		out.RevokeTime = timestamppb.New(*c.RevokedAt)
	case !timestamppb.Now().AsTime().Before(c.ExpiresAt):
		out.State = countersignv1.CredentialState_CREDENTIAL_STATE_EXPIRED
	}
	return out
}

// IssueCredential mints a credential for one of the owner's agents. The
// secret is in this answer only; Countersign keeps its hash.
func (s *OwnerServer) IssueCredential(ctx context.Context, req *countersignv1.IssueCredentialRequest) (*countersignv1.IssueCredentialResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := s.store.OwnerAgent(ctx, owner, req.GetAgentId()); err != nil {
		return nil, ToStatus(err)
	}
	secret, hash, err := credential.Generate()
	if err != nil {
		return nil, ToStatus(err)
	}
	c, err := s.store.IssueCredential(ctx, req.GetAgentId(), scopes[req.GetScope()], req.GetExpireTime().AsTime(), hash)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &countersignv1.IssueCredentialResponse{Credential: toCredential(c), Secret: secret}, nil
}

// ListCredentials lists the safe metadata of an agent's credentials.
func (s *OwnerServer) ListCredentials(ctx context.Context, req *countersignv1.ListCredentialsRequest) (*countersignv1.ListCredentialsResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := s.store.OwnerAgent(ctx, owner, req.GetAgentId()); err != nil {
		return nil, ToStatus(err)
	}
	n, after, err := pageArgs(req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	cs, err := s.store.AgentCredentials(ctx, owner, req.GetAgentId(), after, n)
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &countersignv1.ListCredentialsResponse{}
	for _, c := range cs {
		out.Credentials = append(out.Credentials, toCredential(c))
	}
	if len(cs) > 0 {
		out.NextPageToken = nextToken(n, cs[len(cs)-1].ID, len(cs))
	}
	return out, nil
}

// RevokeCredential revokes a credential, one way, effective for the next
// decision (each decision reads the credential's state).
func (s *OwnerServer) RevokeCredential(ctx context.Context, req *countersignv1.RevokeCredentialRequest) (*countersignv1.RevokeCredentialResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.store.OwnerCredential(ctx, owner, req.GetAgentId(), req.GetCredentialId()); err != nil {
		return nil, ToStatus(err)
	}
	if err := s.store.RevokeCredential(ctx, req.GetCredentialId()); err != nil {
		return nil, ToStatus(err)
	}
	// The revoked credential as it now reads, wherever it falls among the
	// agent's (pages of 1000, in id order).
	for after := ""; ; {
		cs, err := s.store.AgentCredentials(ctx, owner, req.GetAgentId(), after, 1000)
		if err != nil {
			return nil, ToStatus(err)
		}
		for _, c := range cs {
			if c.ID == req.GetCredentialId() {
				return &countersignv1.RevokeCredentialResponse{Credential: toCredential(c)}, nil
			}
		}
		if len(cs) < 1000 {
			return nil, ToStatus(ledger.ErrNotFound)
		}
		after = cs[len(cs)-1].ID
	}
}

func toMandateRecord(r ledger.MandateRecord) (*countersignv1.MandateRecord, error) {
	m, err := mandate.FromCanonical(r.Canonical)
	if err != nil {
		return nil, err
	}
	y, err := mandate.ToYAML(m)
	if err != nil {
		return nil, err
	}
	out := &countersignv1.MandateRecord{MandateHash: r.Hash, Mandate: m, CreateTime: timestamppb.New(r.CreatedAt),
		State: countersignv1.MandateState_MANDATE_STATE_ACTIVE, RevokeReason: r.RevokeReason, Yaml: string(y)}
	if r.RevokedAt != nil {
		out.State, out.RevokeTime = countersignv1.MandateState_MANDATE_STATE_REVOKED, timestamppb.New(*r.RevokedAt)
	}
	return out, nil
}

// CreateMandate validates and stores a mandate for one of the owner's
// agents on a rail account the owner holds; applying the same mandate again returns the same hash.
func (s *OwnerServer) CreateMandate(ctx context.Context, req *countersignv1.CreateMandateRequest) (*countersignv1.CreateMandateResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	m := req.GetMandate()
	if err := mandate.Validate(m); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if _, err := s.store.OwnerAgent(ctx, owner, m.GetAgentId()); err != nil {
		return nil, ToStatus(err)
	}
	// Only on a rail account the operator granted this owner (the ledger
	// refuses the insert too); PermissionDenied says nothing of whether
	// the account exists.
	if err := s.store.OwnerHoldsRailAccount(ctx, owner, m.GetRailAccount()); err != nil {
		return nil, ToStatus(err)
	}
	rec, err := mandate.Record(m)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if _, err := s.store.CreateMandate(ctx, rec); err != nil {
		return nil, ToStatus(err)
	}
	stored, err := s.store.GetMandate(ctx, rec.Hash)
	if err != nil {
		return nil, ToStatus(err)
	}
	out, err := toMandateRecord(stored)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &countersignv1.CreateMandateResponse{MandateHash: rec.Hash, Mandate: out}, nil
}

// ownedMandate returns the owner's mandate with hash. Another owner's
// mandate and one that exists nowhere are the one error, word for word:
// the answer must not tell an owner which hashes exist.
func (s *OwnerServer) ownedMandate(ctx context.Context, owner, hash string) (ledger.MandateRecord, error) {
	r, err := s.store.GetMandate(ctx, hash)
	if errors.Is(err, ledger.ErrNotFound) || (err == nil && r.OwnerID != owner) {
		return ledger.MandateRecord{}, fmt.Errorf("%w: mandate %s", ledger.ErrNotFound, hash)
	}
	return r, err
}

// GetMandate returns one of the owner's mandates.
func (s *OwnerServer) GetMandate(ctx context.Context, req *countersignv1.GetMandateRequest) (*countersignv1.GetMandateResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	r, err := s.ownedMandate(ctx, owner, req.GetMandateHash())
	if err != nil {
		return nil, ToStatus(err)
	}
	out, err := toMandateRecord(r)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &countersignv1.GetMandateResponse{Mandate: out}, nil
}

// RevokeMandate revokes one of the owner's mandates, one way.
func (s *OwnerServer) RevokeMandate(ctx context.Context, req *countersignv1.RevokeMandateRequest) (*countersignv1.RevokeMandateResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := s.ownedMandate(ctx, owner, req.GetMandateHash()); err != nil {
		return nil, ToStatus(err)
	}
	reason := strings.TrimSpace(req.GetReason())
	if reason == "" {
		reason = "revoked by the owner"
	}
	if _, err := s.store.RevokeMandate(ctx, req.GetMandateHash(), reason); err != nil {
		return nil, ToStatus(err)
	}
	r, err := s.store.GetMandate(ctx, req.GetMandateHash())
	if err != nil {
		return nil, ToStatus(err)
	}
	out, err := toMandateRecord(r)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &countersignv1.RevokeMandateResponse{Mandate: out}, nil
}

var approvalStates = map[string]countersignv1.ApprovalState{
	"pending": countersignv1.ApprovalState_APPROVAL_STATE_PENDING, "approved": countersignv1.ApprovalState_APPROVAL_STATE_APPROVED,
	"rejected": countersignv1.ApprovalState_APPROVAL_STATE_REJECTED, "expired": countersignv1.ApprovalState_APPROVAL_STATE_EXPIRED,
	"used": countersignv1.ApprovalState_APPROVAL_STATE_USED, "void": countersignv1.ApprovalState_APPROVAL_STATE_VOID,
}

// toApproval is an approval as the owner reviews it: what the held request
// does (action, subject, amount in minor units, payee), the gate that held
// it, and the exact canonical request the approval is bound to.
func toApproval(a ledger.Approval) *countersignv1.Approval {
	out := &countersignv1.Approval{ApprovalId: a.ID, State: approvalStates[a.State], RailAccount: a.RailAccount, Sik: a.SIK,
		AgentId: a.AgentID, MandateHash: a.MandateHash, RequestFingerprint: a.Fingerprint, Note: a.Note,
		CreateTime: timestamppb.New(a.CreatedAt), ExpireTime: timestamppb.New(a.ExpiresAt),
		Rail: rails[a.Rail], ActionKind: kinds[a.Action], Subject: a.Subject,
		Amount: &countersignv1.Money{AmountMinor: a.AmountMinor, Currency: a.Currency}, Payee: a.Payee,
		CanonicalRequest: a.Canonical, Labels: approvalLabels(a.Labels), LabelsDigest: rail.LabelsDigest(labelsOrNone(a.Labels))}
	if a.DecidedAt != nil {
		out.DecideTime = timestamppb.New(*a.DecidedAt)
	}
	for _, g := range a.Gates {
		gr := &countersignv1.GateResult{Gate: g.Gate, ReasonCode: g.ReasonCode, Reason: g.Reason}
		switch g.Verdict {
		case "ALLOW":
			gr.Verdict = countersignv1.Verdict_VERDICT_ALLOW
		case "HOLD":
			gr.Verdict = countersignv1.Verdict_VERDICT_HOLD
		default:
			gr.Verdict = countersignv1.Verdict_VERDICT_BLOCK
		}
		out.Gates = append(out.Gates, gr)
		// The gates are stored in ladder order: the first HOLD is the one
		// the agent was told about (an approval exists only for a HOLD).
		if out.HeldBy == nil && gr.Verdict == countersignv1.Verdict_VERDICT_HOLD {
			out.HeldBy = gr
		}
	}
	return out
}

// ListApprovals pages through the owner's approvals.
func (s *OwnerServer) ListApprovals(ctx context.Context, req *countersignv1.ListApprovalsRequest) (*countersignv1.ListApprovalsResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	n, after, err := pageArgs(req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	state := ""
	for k, v := range approvalStates {
		if v == req.GetState() {
			state = k
		}
	}
	as, err := s.store.ListApprovals(ctx, owner, state, req.GetAgentId(), after, n)
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &countersignv1.ListApprovalsResponse{}
	for _, a := range as {
		out.Approvals = append(out.Approvals, toApproval(a))
	}
	if len(as) > 0 {
		out.NextPageToken = nextToken(n, as[len(as)-1].ID, len(as))
	}
	return out, nil
}

// approvalsPoll paces WatchApprovals; watchedApprovals bounds the live set
// one stream follows (a flood of HOLDs cannot make one poll read more).
const (
	approvalsPoll    = 250 * time.Millisecond
	watchedApprovals = 1000
)

// WatchApprovals sends the owner's live approvals, then each change to one.
// It polls a mark of the live set (its ids and states, one indexed read of
// approvals_owner) and, when the mark changed, reads the set and compares
// it with the last: a new id is a new HOLD; an id whose effective state
// changed, or that left the set, is read again and sent as it stands. An
// approval that ran out is sent once as EXPIRED, though its row is marked
// only when its intent is next decided. It shares the owner's cap on open
// watch streams with WatchIntents.
//
// The mark spares an idle stream the set itself: up to watchedApprovals
// rows joined with their intents' requests, every poll, on each of an
// owner's open streams, slowed other owners' transactions.
func (s *OwnerServer) WatchApprovals(req *countersignv1.WatchApprovalsRequest, stream grpc.ServerStreamingServer[countersignv1.WatchApprovalsResponse]) error {
	ctx := stream.Context()
	owner, err := s.owner(ctx)
	if err != nil {
		return err
	}
	release, err := s.watches.acquire(owner)
	if err != nil {
		return err
	}
	defer release()
	last := map[string]string{} // approval id → effective state last sent
	lastMark := ""              // LiveApprovalsMark when last was read
	t := time.NewTicker(approvalsPoll)
	defer t.Stop()
	for initial := true; ; initial = false {
		if !initial {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
		// The mark is read before the set: a change between the two is in
		// the set and changes the next mark, so it costs one more read of
		// the set, never a missed change.
		mark, err := s.store.LiveApprovalsMark(ctx, owner, req.GetAgentId(), watchedApprovals)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return ToStatus(err)
		}
		readSet := initial || mark != lastMark
		if s.approvalsPolled != nil {
			s.approvalsPolled(readSet)
		}
		if !readSet {
			continue
		}
		live, err := s.store.LiveApprovals(ctx, owner, req.GetAgentId(), watchedApprovals)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return ToStatus(err)
		}
		now := make(map[string]string, len(live))
		for _, a := range live {
			now[a.ID] = a.State
			if last[a.ID] == a.State {
				continue
			}
			if err := stream.Send(&countersignv1.WatchApprovalsResponse{Approval: toApproval(a), Initial: initial}); err != nil {
				return err
			}
		}
		for id, was := range last {
			if _, ok := now[id]; ok || was == "expired" {
				continue // still live, or its end was already sent
			}
			a, err := s.store.GetApproval(ctx, owner, id)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return ToStatus(err)
			}
			if err := stream.Send(&countersignv1.WatchApprovalsResponse{Approval: toApproval(a)}); err != nil {
				return err
			}
		}
		if initial {
			if err := stream.Send(&countersignv1.WatchApprovalsResponse{Synced: true}); err != nil {
				return err
			}
		}
		last, lastMark = now, mark
	}
}

// GetApproval returns one of the owner's approvals.
func (s *OwnerServer) GetApproval(ctx context.Context, req *countersignv1.GetApprovalRequest) (*countersignv1.GetApprovalResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	a, err := s.store.GetApproval(ctx, owner, req.GetApprovalId())
	if err != nil {
		return nil, ToStatus(err)
	}
	live, err := s.approvalLive(ctx, owner, a)
	if err != nil {
		return nil, ToStatus(err)
	}
	return &countersignv1.GetApprovalResponse{Approval: toApproval(a), Live: live}, nil
}

// ApproveApproval approves a pending request; it is used once, when the
// identical request passes the gates again.
func (s *OwnerServer) ApproveApproval(ctx context.Context, req *countersignv1.ApproveApprovalRequest) (*countersignv1.ApproveApprovalResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	a, err := s.store.Approve(ctx, owner, req.GetApprovalId(), req.GetRequestFingerprint(), req.GetNote())
	if err != nil {
		return nil, ToStatus(err)
	}
	return &countersignv1.ApproveApprovalResponse{Approval: toApproval(a)}, nil
}

// RejectApproval rejects a pending request; its intent is BLOCKED.
func (s *OwnerServer) RejectApproval(ctx context.Context, req *countersignv1.RejectApprovalRequest) (*countersignv1.RejectApprovalResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	a, err := s.store.Reject(ctx, owner, req.GetApprovalId(), req.GetNote())
	if err != nil {
		return nil, ToStatus(err)
	}
	return &countersignv1.RejectApprovalResponse{Approval: toApproval(a)}, nil
}

// maxMandatePage bounds a ListMandates page below the proto's 1000: each
// mandate is answered as proto and YAML, and a mandate may be large, so a
// page of 1000 could be a message of ~100 MiB. A larger page_size is
// clamped to it (next_page_token says there is more).
const maxMandatePage = 100

// ListMandates lists the owner's mandates, newest first. Filters and the
// page bound are applied by the ledger's query, so a page reads at most
// page_size+1 rows. The page token is the hash of the page's last mandate.
func (s *OwnerServer) ListMandates(ctx context.Context, req *countersignv1.ListMandatesRequest) (*countersignv1.ListMandatesResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	n, after, err := pageArgs(req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	n = min(n, maxMandatePage)
	f := ledger.MandateFilter{AgentID: req.GetAgentId(), RailAccount: req.GetRailAccount()}
	switch req.GetState() {
	case countersignv1.MandateState_MANDATE_STATE_ACTIVE:
		f.Revoked = new(false)
	case countersignv1.MandateState_MANDATE_STATE_REVOKED:
		f.Revoked = new(true)
	}
	// One more than the page shows whether another page follows.
	rs, err := s.store.OwnerMandates(ctx, owner, f, after, n+1)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, status.Error(codes.InvalidArgument, "page_token is not one this server issued")
	}
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &countersignv1.ListMandatesResponse{}
	for i, r := range rs {
		if i == n {
			out.NextPageToken = nextToken(n, rs[n-1].Hash, n)
			break
		}
		rec, err := toMandateRecord(r)
		if err != nil {
			return nil, ToStatus(err)
		}
		out.Mandates = append(out.Mandates, rec)
	}
	return out, nil
}

// approvalLabels reads an approval's canonical labels back into the map
// the owner reviews; nil for none.
func approvalLabels(canonical string) map[string]string {
	var m map[string]string
	if json.Unmarshal([]byte(labelsOrNone(canonical)), &m) != nil || len(m) == 0 {
		return nil
	}
	return m
}

func labelsOrNone(canonical string) string {
	if canonical == "" {
		return "{}"
	}
	return canonical
}
