package api

import (
	"context"
	"encoding/json"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/ledger"
)

// auditCursor is a ListAuditRecords page token: the last record returned.
type auditCursor struct {
	Chain string `json:"c"`
	Seq   int64  `json:"s"`
}

// ListAuditRecords pages through the audit records of the owner's
// intents on the rail accounts it holds, chain by chain in sequence order.
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
	var after auditCursor
	if tok != "" && (json.Unmarshal([]byte(tok), &after) != nil || after.Chain == "") {
		return nil, status.Error(codes.InvalidArgument, "page_token is not one this server issued")
	}
	recs, err := s.store.OwnerAuditRecords(ctx, owner,
		ledger.AuditFilter{RailAccount: req.GetRailAccount(), SIK: req.GetSik(), Chain: req.GetChain()}, after.Chain, after.Seq, n)
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &countersignv1.ListAuditRecordsResponse{}
	for _, r := range recs {
		out.AuditRecords = append(out.AuditRecords, toAuditRecord(r))
	}
	if len(recs) > 0 {
		last := recs[len(recs)-1]
		b, err := json.Marshal(auditCursor{Chain: last.Chain, Seq: last.Seq})
		if err != nil {
			return nil, ToStatus(err)
		}
		out.NextPageToken = nextToken(n, string(b), len(recs))
	}
	return out, nil
}

// VerifyAudit verifies every chain of a rail account the owner holds (the
// operator granted it; PermissionDenied otherwise, whether or not the
// account exists). The chains hold other owners' records too (their hashes
// link them); only counts and break positions are returned.
func (s *OwnerServer) VerifyAudit(ctx context.Context, req *countersignv1.VerifyAuditRequest) (*countersignv1.VerifyAuditResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.store.OwnerHoldsRailAccount(ctx, owner, req.GetRailAccount()); err != nil {
		return nil, ToStatus(err)
	}
	rep, err := s.store.VerifyAuditOf(ctx, req.GetRailAccount())
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &countersignv1.VerifyAuditResponse{Ok: len(rep.Breaks) == 0, RecordsChecked: rep.Records, ChainsChecked: int32(rep.Chains)} //nolint:gosec // at most 16 chains per account
	for _, b := range rep.Breaks {
		out.Breaks = append(out.Breaks, &countersignv1.AuditBreak{Chain: b.Chain, Seq: b.Seq, Problem: b.Problem})
	}
	return out, nil
}
