package api

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/gate"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/mandate"
	"github.com/countersign/countersign/internal/sik"
)

// maxPayeeKeys bounds the payee keys one usage answer lists per payee
// window (MandateUsage.windows_truncated says when there were more).
const maxPayeeKeys = 200

// GetMandateUsage returns what counts against one of the owner's mandates
// now.
func (s *OwnerServer) GetMandateUsage(ctx context.Context, req *countersignv1.GetMandateUsageRequest) (*countersignv1.GetMandateUsageResponse, error) {
	owner, err := s.owner(ctx)
	if err != nil {
		return nil, err
	}
	rec, err := s.ownedMandate(ctx, owner, req.GetMandateHash())
	if err != nil {
		return nil, ToStatus(err)
	}
	u, err := s.mandateUsage(ctx, rec, req.GetPayee(), s.clock())
	if err != nil {
		return nil, ToStatus(err)
	}
	return &countersignv1.GetMandateUsageResponse{Usage: u}, nil
}

func (s *OwnerServer) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// mandateUsage counts rec's usage at now with the gate's window specs.
func (s *OwnerServer) mandateUsage(ctx context.Context, rec ledger.MandateRecord, payee string, now time.Time) (*countersignv1.MandateUsage, error) {
	m, err := mandate.FromCanonical(rec.Canonical)
	if err != nil {
		return nil, err
	}
	counts, err := s.store.MandateUsage(ctx, usageQuery(rec.Hash, m, payee, now))
	if err != nil {
		return nil, err
	}
	return toMandateUsage(rec.Hash, m, now, counts), nil
}

// usageQuery is what the limits gate would count for a decision under m at
// now: gate.WindowSpecs gives each window's key, start and currency exactly
// as the engine's ladder asks the ledger for them. A payee window counts
// by payee key; without payee it is asked for every key.
func usageQuery(hash string, m *countersignv1.Mandate, payee string, now time.Time) ledger.UsageQuery {
	q := ledger.UsageQuery{Hash: hash, MaxPayeeKeys: maxPayeeKeys, Fee: m.GetFeeBudget() != nil}
	for _, b := range m.GetBudgets() {
		q.Currencies = append(q.Currencies, b.GetCurrency())
	}
	// A payout names its payee key as its payee (gate.WindowSpecs).
	in := gate.Input{Now: now, Mandate: m, Agent: gate.Agent{ID: m.GetAgentId()},
		Action: gate.Action{Kind: sik.KindPayout, Payee: payee}}
	for i, spec := range gate.WindowSpecs(in) {
		q.Windows = append(q.Windows, ledger.WindowQuery{Index: i, ByPayee: spec.Scope == countersignv1.WindowScope_WINDOW_SCOPE_PAYEE,
			Key: spec.Key, Since: spec.Since, Currency: spec.Currency})
	}
	return q
}

// toMandateUsage shapes the counts as the owner reads them.
func toMandateUsage(hash string, m *countersignv1.Mandate, now time.Time, c ledger.UsageCounts) *countersignv1.MandateUsage {
	out := &countersignv1.MandateUsage{MandateHash: hash, AsOf: timestamppb.New(now), WindowsTruncated: c.Truncated}
	for i, b := range m.GetBudgets() {
		var held, spent int64
		if i < len(c.Budgets) && c.Budgets[i].Currency == b.GetCurrency() {
			held, spent = c.Budgets[i].Held, c.Budgets[i].Spent
		}
		out.Budgets = append(out.Budgets, &countersignv1.MandateBudgetUsage{Currency: b.GetCurrency(), LimitMinor: b.GetAmountMinor(),
			SpentMinor: spent, HeldMinor: held, FreeMinor: max(b.GetAmountMinor()-spent-held, 0)})
	}
	ws := m.GetWindows()
	for _, w := range c.Windows {
		mw := ws[w.Index]
		u := &countersignv1.MandateWindowUsage{WindowIndex: int32(w.Index), Scope: mw.GetScope(), Key: w.Key, //nolint:gosec // at most 16 windows
			Duration: durationpb.New(mw.GetDuration().AsDuration()), MaxCalls: mw.GetMaxCalls(), MaxAmount: mw.GetMaxAmount(),
			Calls: w.Calls, WindowStartTime: timestamppb.New(w.Since)}
		if w.Currency != "" {
			u.Amount = &countersignv1.Money{AmountMinor: w.AmountMinor, Currency: w.Currency}
		}
		if w.FirstPosted != nil {
			u.NextReleaseTime = timestamppb.New(w.FirstPosted.Add(mw.GetDuration().AsDuration()))
		}
		out.Windows = append(out.Windows, u)
	}
	if fb := m.GetFeeBudget(); fb != nil {
		out.FeeBudget = &countersignv1.MandateFeeUsage{Limit: fb, SpentMinor: c.FeeSpent, FreeMinor: max(fb.GetAmountMinor()-c.FeeSpent, 0)}
	}
	return out
}
