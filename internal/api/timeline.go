package api

import (
	"context"
	"errors"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/engine"
	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/sik"
)

// GetIntent returns an intent of one of the owner's agents with its
// attempts and its timeline: every audit record, every reconciliation
// finding, and the rail answer the ledger keeps for a duplicate.
func (s *OwnerServer) GetIntent(ctx context.Context, req *countersignv1.GetIntentRequest) (*countersignv1.GetIntentResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	k := ledger.Key{RailAccount: req.GetRailAccount(), SIK: req.GetSik()}
	it, atts, err := s.store.OwnerIntent(ctx, owner, k)
	if err != nil {
		return nil, ToStatus(err)
	}
	out := &countersignv1.GetIntentResponse{Intent: toIntent(it)}
	for _, a := range atts {
		out.Attempts = append(out.Attempts, toAttempt(a))
	}
	// The records ListAuditRecords pages through for this intent, all of
	// them: an intent has a handful (its attempts bound them).
	for after := int64(0); ; {
		recs, err := s.store.OwnerAuditRecords(ctx, owner, ledger.AuditFilter(k), after, 1000)
		if err != nil {
			return nil, ToStatus(err)
		}
		for _, r := range recs {
			out.Transitions = append(out.Transitions, toAuditRecord(r))
		}
		if len(recs) < 1000 {
			break
		}
		after = recs[len(recs)-1].ID
	}
	fs, err := s.store.FindingsFor(ctx, k)
	if err != nil {
		return nil, ToStatus(err)
	}
	for _, f := range fs {
		out.Findings = append(out.Findings, toFinding(f))
	}
	if it.State == intent.Applied {
		a, err := s.store.AppliedAttempt(ctx, it)
		switch {
		case errors.Is(err, ledger.ErrNotFound):
		case err != nil:
			return nil, ToStatus(err)
		default:
			out.StoredAnswer = storedAnswer(it, a)
		}
	}
	return out, nil
}

var findingOutcomes = map[ledger.FindingOutcome]countersignv1.ReconcileOutcome{
	ledger.FindingApplied:      countersignv1.ReconcileOutcome_RECONCILE_OUTCOME_FOUND_APPLIED,
	ledger.FindingAbsent:       countersignv1.ReconcileOutcome_RECONCILE_OUTCOME_CONFIRMED_ABSENT,
	ledger.FindingInconclusive: countersignv1.ReconcileOutcome_RECONCILE_OUTCOME_INCONCLUSIVE,
}

func toFinding(f ledger.Finding) *countersignv1.IntentFinding {
	return &countersignv1.IntentFinding{AttemptSeq: int32(f.AttemptSeq), Outcome: findingOutcomes[f.Outcome], PagesRead: int32(f.Pages), //nolint:gosec // small counts
		PaginationExhausted: f.PaginationExhausted, RailEntityId: f.EntityID, Reason: f.Detail, FindTime: timestamppb.New(f.FoundAt)}
}

// storedAnswer is the answer a duplicate of the applied intent replays,
// chosen as the engine's replay chooses it: the rail's own 2xx response
// when the rail's answer applied it, else the entity reconciliation found.
// Only the status and body are shown (the rail's headers are not).
func storedAnswer(it ledger.Intent, a ledger.Attempt) *countersignv1.StoredRailAnswer {
	out := &countersignv1.StoredRailAnswer{AttemptSeq: int32(a.Seq), RailEntityId: it.RailEntityID} //nolint:gosec // small counts
	switch r := a.Response; {
	case r != nil && r.Status >= 200 && r.Status < 300 && it.LastEvent == string(intent.RailApplied):
		out.Source, out.HttpStatus, out.Body = countersignv1.StoredRailAnswerSource_STORED_RAIL_ANSWER_SOURCE_RAIL_RESPONSE, int32(r.Status), strings.ToValidUTF8(string(r.Body), "\uFFFD") //nolint:gosec // HTTP status
	case a.FoundEntity != nil:
		out.Source, out.HttpStatus, out.Body = countersignv1.StoredRailAnswerSource_STORED_RAIL_ANSWER_SOURCE_RECONCILIATION, 200, strings.ToValidUTF8(string(a.FoundEntity), "\uFFFD")
	default:
		return nil
	}
	return out
}

// approvalLive is an approval's context now: the mandate's usage, with the
// payee windows of the held action's payee key, and for a refund what is
// still refundable (a failed rail read is reported, never an error).
//
// It is read only while the approval can still be decided or used (pending
// or approved) and the owner still holds its rail account. A decided
// approval needs no context, and one on an account the operator has
// withdrawn must not let its former owner keep reading the account's
// payments at the rail. Otherwise the context is empty but for why, given
// for a refund in refundable_error.
func (s *OwnerServer) approvalLive(ctx context.Context, owner string, a ledger.Approval) (*countersignv1.ApprovalLive, error) {
	now := s.clock()
	live := &countersignv1.ApprovalLive{AsOf: timestamppb.New(now)}
	refund := sik.Kind(a.Action) == sik.KindRefund
	if a.State != "pending" && a.State != "approved" {
		if refund {
			live.RefundableError = "not read: the approval is " + a.State + ", and live context is read only for a pending or approved approval"
		}
		return live, nil
	}
	switch err := s.store.OwnerHoldsRailAccount(ctx, owner, a.RailAccount); {
	case errors.Is(err, ledger.ErrNotHeld):
		if refund {
			live.RefundableError = "not read: you no longer hold rail account " + a.RailAccount
		}
		return live, nil
	case err != nil:
		return nil, err
	}
	if a.MandateHash != "" {
		rec, err := s.ownedMandate(ctx, owner, a.MandateHash)
		if err != nil {
			return nil, err
		}
		payee := a.Payee
		if refund {
			payee = a.Subject // what a refund's payee windows count by
		}
		if live.MandateUsage, err = s.mandateUsage(ctx, rec, payee, now); err != nil {
			return nil, err
		}
	}
	if !refund {
		return live, nil
	}
	if s.refundables == nil {
		live.RefundableError = "this server does not read the rail"
		return live, nil
	}
	it, err := s.store.Intent(ctx, ledger.Key{RailAccount: a.RailAccount, SIK: a.SIK})
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, liveReadTimeout)
	defer cancel()
	r, err := s.refundables.Refundable(rctx, it)
	switch {
	case errors.Is(err, engine.ErrNotRefund):
	case err != nil:
		live.RefundableError = err.Error()
	default:
		live.Refundable = &countersignv1.Money{AmountMinor: r.Available, Currency: r.Currency}
		live.RailRefundable = &countersignv1.Money{AmountMinor: r.Rail, Currency: r.Currency}
		live.LedgerOutstanding = &countersignv1.Money{AmountMinor: r.Outstanding, Currency: r.Currency}
	}
	return live, nil
}

// liveReadTimeout bounds GetApproval's rail read (the engine's resolve
// timeout bounds it too): a slow rail delays the owner's page, not longer.
const liveReadTimeout = 5 * time.Second
