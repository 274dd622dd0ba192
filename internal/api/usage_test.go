package api

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
	"github.com/countersign/countersign/internal/ledger"
)

func TestUsageQueryAsksWhatTheGateCounts(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	m := &countersignv1.Mandate{AgentId: "agt_1",
		Budgets: []*countersignv1.Money{{AmountMinor: 100, Currency: "USD"}, {AmountMinor: 50, Currency: "EUR"}},
		Windows: []*countersignv1.Window{
			{Scope: countersignv1.WindowScope_WINDOW_SCOPE_AGENT, Duration: durationpb.New(time.Hour), MaxAmount: &countersignv1.Money{AmountMinor: 10, Currency: "EUR"}},
			{Scope: countersignv1.WindowScope_WINDOW_SCOPE_PAYEE, Duration: durationpb.New(time.Minute), MaxCalls: 3},
		}}
	for _, tc := range []struct {
		name, payee, payeeKey string
	}{
		{"every payee key", "", ""},
		{"one payee key", "ba_1", "ba_1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := usageQuery("h", m, tc.payee, now)
			want := []ledger.WindowQuery{
				{Index: 0, Key: "agt_1", Since: now.Add(-time.Hour), Currency: "EUR"},
				{Index: 1, ByPayee: true, Key: tc.payeeKey, Since: now.Add(-time.Minute)},
			}
			if len(q.Windows) != 2 || q.Windows[0] != want[0] || q.Windows[1] != want[1] || q.Fee || len(q.Currencies) != 2 || q.Currencies[1] != "EUR" {
				t.Fatalf("usageQuery = %+v, want windows %+v", q, want)
			}
		})
	}
}

func TestToMandateUsage(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	oldest := now.Add(-20 * time.Minute)
	m := &countersignv1.Mandate{AgentId: "agt_1",
		Budgets:   []*countersignv1.Money{{AmountMinor: 100, Currency: "USD"}},
		FeeBudget: &countersignv1.Money{AmountMinor: 30, Currency: "USD"},
		Windows: []*countersignv1.Window{{Scope: countersignv1.WindowScope_WINDOW_SCOPE_AGENT, Duration: durationpb.New(time.Hour),
			MaxCalls: 5, MaxAmount: &countersignv1.Money{AmountMinor: 10, Currency: "USD"}}}}
	for _, tc := range []struct {
		name                       string
		counts                     ledger.UsageCounts
		held, spent, free, feeFree int64
		release                    time.Time
	}{
		{"nothing counted", ledger.UsageCounts{Windows: []ledger.WindowCount{{WindowQuery: ledger.WindowQuery{Key: "agt_1", Since: now.Add(-time.Hour), Currency: "USD"}}}},
			0, 0, 100, 30, time.Time{}},
		{"held and spent", ledger.UsageCounts{Budgets: []ledger.BudgetCount{{Currency: "USD", Held: 30, Spent: 20}}, FeeSpent: 40,
			Windows: []ledger.WindowCount{{WindowQuery: ledger.WindowQuery{Key: "agt_1", Since: now.Add(-time.Hour), Currency: "USD"}, Calls: 2, AmountMinor: 7, FirstPosted: &oldest}}},
			30, 20, 50, 0, oldest.Add(time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := toMandateUsage("h", m, now, tc.counts)
			b := u.GetBudgets()[0]
			if b.GetHeldMinor() != tc.held || b.GetSpentMinor() != tc.spent || b.GetFreeMinor() != tc.free || b.GetLimitMinor() != 100 {
				t.Errorf("budget = %v", b)
			}
			if u.GetFeeBudget().GetFreeMinor() != tc.feeFree {
				t.Errorf("fee budget = %v", u.GetFeeBudget())
			}
			w := u.GetWindows()[0]
			if w.GetMaxCalls() != 5 || w.GetAmount().GetCurrency() != "USD" || !w.GetWindowStartTime().AsTime().Equal(now.Add(-time.Hour)) ||
				w.GetDuration().AsDuration() != time.Hour {
				t.Errorf("window = %v", w)
			}
			if got := w.GetNextReleaseTime(); (got == nil) != tc.release.IsZero() || (got != nil && !got.AsTime().Equal(tc.release)) {
				t.Errorf("next release = %v, want %v", got, tc.release)
			}
		})
	}
}

func TestStoredAnswerIsWhatADuplicateReplays(t *testing.T) {
	for _, tc := range []struct {
		name   string
		event  string
		resp   *ledger.HTTPMessage
		found  []byte
		source countersignv1.StoredRailAnswerSource
		body   string
	}{
		{"the rail's 2xx", "RAIL_APPLIED", &ledger.HTTPMessage{Status: 200, Body: []byte(`{"id":"re_1"}`), Headers: map[string]string{"request-id": "req_1"}}, nil,
			countersignv1.StoredRailAnswerSource_STORED_RAIL_ANSWER_SOURCE_RAIL_RESPONSE, `{"id":"re_1"}`},
		{"found by reconciliation", "FOUND_APPLIED", &ledger.HTTPMessage{Status: 500, Body: []byte("oops")}, []byte(`{"id":"re_2"}`),
			countersignv1.StoredRailAnswerSource_STORED_RAIL_ANSWER_SOURCE_RECONCILIATION, `{"id":"re_2"}`},
		{"nothing kept", "FOUND_APPLIED", nil, nil, countersignv1.StoredRailAnswerSource_STORED_RAIL_ANSWER_SOURCE_UNSPECIFIED, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			it := ledger.Intent{LastEvent: tc.event, RailEntityID: "re_x"}
			got := storedAnswer(it, ledger.Attempt{Seq: 2, Response: tc.resp, FoundEntity: tc.found})
			if got.GetSource() != tc.source || got.GetBody() != tc.body || (got != nil && (got.GetAttemptSeq() != 2 || got.GetRailEntityId() != "re_x")) {
				t.Fatalf("storedAnswer = %v", got)
			}
		})
	}
}
