package api

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/ledger"
)

// WithAuditVerifier sets the key VerifyAudit checks checkpoint and
// heartbeat signatures with (serve's --audit-verifier-key, else the
// verifier of its own signing key); without one, VerifyAudit refuses
// (FailedPrecondition AUDIT_VERIFIER_KEY_MISSING): a log re-sealed with any
// key would pass. After a key rotation, checkpoints of the old key are
// reported untrusted-signer here; `countersign audit verify` takes every
// verifier key.
func (s *OwnerServer) WithAuditVerifier(v note.Verifier) *OwnerServer {
	s.auditVerifier = v
	return s
}

// verifyRetryDelay is the wait VerifyAudit suggests when another
// verification holds the server's one slot.
const verifyRetryDelay = 5 * time.Second

// verifyTurnAfter is how long a verification must have run before its
// owner waits its turn (verifyTurns): shorter ones hold the slot too
// briefly to keep anyone out.
const verifyTurnAfter = time.Second

// verifyTurns keeps one owner from holding the server's one verification
// slot back to back (each run refusing every other owner's): after an
// owner's verification that ran a second or more ends, that owner may
// start its next only once as long again has passed, so it holds the slot
// at most half the time and other owners find it free in between. Its
// zero value is ready.
type verifyTurns struct {
	mu   sync.Mutex
	next map[string]time.Time // owner → earliest start of its next verification
}

// wait is how long owner must still wait at now (0: it may start).
func (v *verifyTurns) wait(owner string, now time.Time) time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	if d := v.next[owner].Sub(now); d > 0 {
		return d
	}
	return 0
}

// ran records that owner's verification ran from start to end, and forgets
// the turns already over.
func (v *verifyTurns) ran(owner string, start, end time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for o, t := range v.next {
		if !t.After(end) {
			delete(v.next, o)
		}
	}
	if took := end.Sub(start); took >= verifyTurnAfter {
		if v.next == nil {
			v.next = map[string]time.Time{}
		}
		v.next[owner] = end.Add(took)
	}
}

// DefaultMaxUnsealedAge is how long VerifyAudit lets a record wait for
// sealing before it reports it, when the request does not say.
const DefaultMaxUnsealedAge = time.Minute

// ListAuditRecords pages through the audit records of the owner's
// intents on the rail accounts it holds, in record id order.
// Naming a rail account it does not hold is PermissionDenied.
func (s *OwnerServer) ListAuditRecords(ctx context.Context, req *countersignv1.ListAuditRecordsRequest) (*countersignv1.ListAuditRecordsResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	if req.GetSik() != "" && req.GetRailAccount() == "" {
		return nil, withDetails(status.New(codes.InvalidArgument, "sik names an intent only with its rail_account"), "INVALID_ARGUMENT")
	}
	if req.GetRailAccount() != "" {
		if err := s.store.OwnerHoldsRailAccount(ctx, owner, req.GetRailAccount()); err != nil {
			return nil, ToStatus(err)
		}
	}
	n, tok, err := pageArgs(req.GetPageSize(), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	var after int64
	if tok != "" {
		if after, err = strconv.ParseInt(tok, 10, 64); err != nil || after < 1 {
			return nil, status.Error(codes.InvalidArgument, "page_token is not one this server issued")
		}
	}
	recs, err := s.store.OwnerAuditRecords(ctx, owner,
		ledger.AuditFilter{RailAccount: req.GetRailAccount(), SIK: req.GetSik()}, after, n)
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &countersignv1.ListAuditRecordsResponse{}
	for _, r := range recs {
		out.AuditRecords = append(out.AuditRecords, toAuditRecord(r))
	}
	if len(recs) > 0 {
		out.NextPageToken = nextToken(n, strconv.FormatInt(recs[len(recs)-1].ID, 10), len(recs))
	}
	return out, nil
}

// VerifyAudit verifies the log of a rail account the owner holds (the
// operator granted it; PermissionDenied otherwise, whether or not the
// account exists), and that each intent on it is the action its SIK was
// derived from. The log holds other owners' records too (the tree links
// them); only counts and problems are returned, and a problem names
// another owner's intent by record id only, and never its action or
// agent. One verification runs at a time in the server: another meanwhile
// is ResourceExhausted (AUDIT_VERIFY_BUSY) at once, not queued; and an
// owner whose verification ran for a second or more starts its next only
// once as long again has passed (AUDIT_VERIFY_TOO_SOON), so that no owner
// keeps the slot from the others. A server with no audit verifier key
// verifies nothing: FailedPrecondition (AUDIT_VERIFIER_KEY_MISSING).
func (s *OwnerServer) VerifyAudit(ctx context.Context, req *countersignv1.VerifyAuditRequest) (*countersignv1.VerifyAuditResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.store.OwnerHoldsRailAccount(ctx, owner, req.GetRailAccount()); err != nil {
		return nil, ToStatus(err)
	}
	if s.auditVerifier == nil {
		// Without a trusted key a log and heartbeats signed by anyone would
		// pass: no verification at all rather than one that means nothing.
		return nil, withDetails(status.New(codes.FailedPrecondition,
			"this server has no audit verifier key (serve --audit-verifier-key or --audit-signing-key), so it cannot check the audit log's signatures; verify with `countersign audit verify --audit-verifier-key`"),
			"AUDIT_VERIFIER_KEY_MISSING")
	}
	age := DefaultMaxUnsealedAge
	if req.GetMaxUnsealedAge() != nil {
		age = req.GetMaxUnsealedAge().AsDuration()
	}
	opts := ledger.AuditVerifyOptions{RailAccount: req.GetRailAccount(), MaxUnsealedAge: age, CheckActions: true,
		Verifiers: []note.Verifier{s.auditVerifier}}
	start := s.clock()
	if d := s.verifyTurns.wait(owner, start); d > 0 {
		return nil, withDetails(status.New(codes.ResourceExhausted, fmt.Sprintf(
			"this owner's last audit verification ended less than as long ago as it ran; the next may start in %s, so that other owners find the server's one verification slot free", d.Round(time.Second))),
			"AUDIT_VERIFY_TOO_SOON", &errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
	}
	rep, err := s.store.VerifyAudit(ctx, opts)
	if !errors.Is(err, ledger.ErrAuditVerifyBusy) {
		s.verifyTurns.ran(owner, start, s.clock())
	}
	if errors.Is(err, ledger.ErrAuditVerifyBusy) {
		// One verification at a time per process: refused at once, not
		// queued, so no caller can stack them on the sidecar.
		return nil, withDetails(status.New(codes.ResourceExhausted,
			"an audit verification is already running in this server (one runs at a time); try again when it has finished"),
			"AUDIT_VERIFY_BUSY", &errdetails.RetryInfo{RetryDelay: durationpb.New(verifyRetryDelay)})
	}
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &countersignv1.VerifyAuditResponse{Ok: rep.Ok() && rep.SignaturesChecked, RecordsChecked: rep.Sealed, RecordsUnsealed: rep.Unsealed,
		TreeSize: rep.TreeSize, CheckpointsChecked: int32(rep.Checkpoints), SignaturesChecked: rep.SignaturesChecked} //nolint:gosec // one checkpoint per sealing
	if rep.OldestUnsealedMicros != 0 {
		out.OldestUnsealedTime = timestamppb.New(time.UnixMicro(rep.OldestUnsealedMicros))
	}
	mine, err := s.store.OwnerIntentSIKs(ctx, owner, req.GetRailAccount())
	if err != nil {
		return nil, ToStatus(err)
	}
	for _, p := range rep.Problems {
		ap := &countersignv1.AuditProblem{Kind: string(p.Kind), TreeSize: p.TreeSize, Problem: p.Problem}
		if p.RecordID > 0 {
			ap.RecordId = p.RecordID
		}
		if p.LeafIndex >= 0 {
			ap.LeafIndex = &p.LeafIndex
		}
		switch {
		case p.Kind == ledger.AuditAgentMismatch:
			// The agents named are maybe another owner's (the intent was
			// moved from or to one): say what, not whose.
			ap.Problem = "(another owner's intent) is not made by the agent its birth record names (it was moved to another agent)"
			if mine[p.SIK] {
				ap.Sik = p.SIK
				ap.Problem = "intent " + p.SIK + " is not made by the agent its birth record names (it was moved to another agent)"
			}
		case p.SIK != "" && mine[p.SIK]:
			ap.Sik = p.SIK
		case p.Kind == ledger.AuditActionMismatch:
			// Another owner's intent: its amount, subject and payee are
			// not this owner's to read.
			ap.Problem = "(another owner's intent) is not the action its SIK was derived from (the intent was edited after it was keyed)"
		case p.SIK != "":
			// Another owner's intent: say what is wrong, not whose.
			ap.Problem = strings.ReplaceAll(ap.Problem, p.SIK, "(another owner's intent)")
		}
		out.Problems = append(out.Problems, ap)
	}
	return out, nil
}

// GetAuditInclusionProof proves one of the owner's sealed records is in its
// log. A record of another owner's intent, or on an account the owner does
// not hold, is NotFound, as if it did not exist.
func (s *OwnerServer) GetAuditInclusionProof(ctx context.Context, req *countersignv1.GetAuditInclusionProofRequest) (*countersignv1.GetAuditInclusionProofResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	p, err := s.store.OwnerInclusionProof(ctx, owner, req.GetRecordId(), req.GetTreeSize())
	if err != nil {
		return nil, ToStatus(err)
	}
	return &countersignv1.GetAuditInclusionProofResponse{Record: toAuditRecord(p.Record), Checkpoint: toCheckpoint(p.Checkpoint),
		Proof: hashBytes(p.Proof)}, nil
}

// GetAuditConsistencyProof proves a rail account's log at one checkpoint
// extends it at an earlier one; the owner must hold the account.
func (s *OwnerServer) GetAuditConsistencyProof(ctx context.Context, req *countersignv1.GetAuditConsistencyProofRequest) (*countersignv1.GetAuditConsistencyProofResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.store.OwnerHoldsRailAccount(ctx, owner, req.GetRailAccount()); err != nil {
		return nil, ToStatus(err)
	}
	p, err := s.store.AuditConsistencyProof(ctx, req.GetRailAccount(), req.GetFromSize(), req.GetToSize())
	if err != nil {
		return nil, ToStatus(err)
	}
	return &countersignv1.GetAuditConsistencyProofResponse{From: toCheckpoint(p.From), To: toCheckpoint(p.To), Proof: hashBytes(p.Proof)}, nil
}

func toCheckpoint(c ledger.AuditCheckpoint) *countersignv1.AuditCheckpoint {
	return &countersignv1.AuditCheckpoint{RailAccount: c.RailAccount, TreeSize: c.TreeSize, Note: c.Note}
}

func hashBytes(hs []tlog.Hash) [][]byte {
	out := make([][]byte, len(hs))
	for i, h := range hs {
		out[i] = h[:]
	}
	return out
}

// ProofHashes reads a proof's hashes as sent.
func ProofHashes(bs [][]byte) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(bs))
	for i, b := range bs {
		if len(b) != tlog.HashSize {
			return nil, status.Errorf(codes.InvalidArgument, "proof hash %d is %d bytes, not %d", i, len(b), tlog.HashSize)
		}
		copy(out[i][:], b)
	}
	return out, nil
}

// RecordOf is the log record an API audit record stands for: what its leaf
// hash covers, so a client can recompute the leaf it was given a proof of.
func RecordOf(r *countersignv1.AuditRecord) audit.Record {
	state := func(s countersignv1.IntentState) string {
		if s == countersignv1.IntentState_INTENT_STATE_UNSPECIFIED {
			return ""
		}
		return strings.TrimPrefix(s.String(), "INTENT_STATE_")
	}
	return audit.Record{ID: r.GetRecordId(), RailAccount: r.GetRailAccount(), SIK: r.GetSik(), FromState: state(r.GetFromState()),
		ToState: state(r.GetToState()), Event: strings.TrimPrefix(r.GetEvent().String(), "INTENT_EVENT_"), AttemptSeq: int(r.GetAttemptSeq()),
		Detail: r.GetReason(), AtMicros: r.GetCommitTime().AsTime().UnixMicro()}
}
