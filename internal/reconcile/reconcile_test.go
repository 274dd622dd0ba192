package reconcile

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
)

// scripted hands out one claimed intent and records the finding.
type scripted struct {
	work    []ledger.ReconcileWork
	finding *ledger.Finding
}

func (s *scripted) ExpireLeasesIn(context.Context, int, time.Duration, ledger.ReconcileScope) (int, error) {
	return 0, nil
}
func (s *scripted) ClaimReconcileIn(context.Context, string, time.Duration, int, ledger.ReconcileScope) ([]ledger.ReconcileWork, error) {
	w := s.work
	s.work = nil
	return w, nil
}
func (s *scripted) RecordFinding(_ context.Context, f ledger.Finding) (ledger.Intent, error) {
	s.finding = &f
	return ledger.Intent{State: "RECONCILING"}, nil
}

// listing is an adapter whose Find answers from fields.
type listing struct {
	rail.Adapter
	found rail.Finding
	err   error
	stamp string
}

func (l *listing) Find(_ context.Context, _ rail.Client, _ rail.Action, stamp string, _ time.Time) (rail.Finding, error) {
	l.stamp = stamp
	return l.found, l.err
}

type oneAccount struct{ acct *rails.Account }

func (o oneAccount) ByID(id string) (*rails.Account, bool) { return o.acct, id == o.acct.ID }

func TestFindingsFollowTheEvidence(t *testing.T) {
	entity := &rail.Entity{ID: "re_9", Stamp: "STAMP", AmountMinor: 5, Currency: "USD", Raw: []byte(`{"id":"re_9","metadata":{"countersign_sik":"STAMP"}}`)}
	cases := []struct {
		name      string
		found     rail.Finding
		err       error
		unstamped bool // the request was never confirmed to carry the body stamp
		want      ledger.FindingOutcome
		exhausted bool
	}{
		{"match on page 3", rail.Finding{Match: entity, Pages: 3}, nil, false, ledger.FindingApplied, false},
		{"absent after every page", rail.Finding{Exhausted: true, Pages: 4}, nil, false, ledger.FindingAbsent, true},
		{"absent, but the body stamp was never confirmed", rail.Finding{Exhausted: true, Pages: 4}, nil, true, ledger.FindingInconclusive, false},

		{"match without a confirmed body stamp", rail.Finding{Match: entity, Pages: 1}, nil, true, ledger.FindingApplied, false},
		{"empty page, not read to the end", rail.Finding{Pages: 1}, nil, false, ledger.FindingInconclusive, false},
		{"listing failed", rail.Finding{Pages: 2}, errors.New("503 from the rail"), false, ledger.FindingInconclusive, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ad := &listing{found: tc.found, err: tc.err}
			acct := &rails.Account{ID: "acct_1", Rail: sik.RailStripe, Adapter: ad}
			l := &scripted{work: []ledger.ReconcileWork{{
				Intent:  ledger.Intent{Key: ledger.Key{RailAccount: "acct_1", SIK: "S"}, Action: "refund", Subject: "pi_1", AmountMinor: 5, Currency: "USD", Canonical: `{"extra":{}}`, AttemptCount: 1},
				Attempt: ledger.Attempt{Seq: 1, Stamp: "STAMP", BodyStamped: !tc.unstamped, ViaEnvoy: strings.Contains(tc.name, "through Envoy")},
			}}}
			w := New(l, oneAccount{acct}, Options{Owner: "me"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if _, err := w.Pass(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			f := l.finding
			if f == nil || f.Outcome != tc.want || f.PaginationExhausted != tc.exhausted || f.Owner != "me" || f.AttemptSeq != 1 {
				t.Fatalf("finding = %+v", f)
			}
			if ad.stamp != "STAMP" {
				t.Fatalf("searched for stamp %q, want the attempt's", ad.stamp)
			}
			if tc.want == ledger.FindingApplied && (f.EntityID != "re_9" || string(f.EntityBody) != string(entity.Raw)) {
				t.Fatalf("entity = %q, body %s", f.EntityID, f.EntityBody)
			}
			if tc.want != ledger.FindingApplied && f.EntityBody != nil {
				t.Fatalf("a %s finding keeps an entity body %s", f.Outcome, f.EntityBody)
			}
		})
	}
}

func TestUnconfiguredAccountIsInconclusive(t *testing.T) {
	l := &scripted{work: []ledger.ReconcileWork{{
		Intent:  ledger.Intent{Key: ledger.Key{RailAccount: "acct_gone", SIK: "S"}, Canonical: `{}`, AttemptCount: 1},
		Attempt: ledger.Attempt{Seq: 1, Stamp: "X"},
	}}}
	w := New(l, oneAccount{&rails.Account{ID: "acct_1"}}, Options{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if _, err := w.Pass(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if l.finding.Outcome != ledger.FindingInconclusive {
		t.Fatalf("finding = %+v", l.finding)
	}
}

func TestBackoffGrowsAndIsBounded(t *testing.T) {
	w := New(&scripted{}, oneAccount{&rails.Account{}}, Options{Delay: 2 * time.Second}, slog.New(slog.DiscardHandler))
	if w.backoff(0) != 2*time.Second || w.backoff(1) != 4*time.Second || w.backoff(30) != 5*time.Minute {
		t.Fatalf("backoff = %s, %s, %s", w.backoff(0), w.backoff(1), w.backoff(30))
	}
}

// TestNeverSentAttemptIsSettledWithoutAListing: an attempt through Envoy
// (ext_proc in the path) that ext_proc never marked sent, and no longer
// pending, is found absent without a read at the rail; one that is still
// pending, was marked (stamped or not), or came another way is listed.
func TestNeverSentAttemptIsSettledWithoutAListing(t *testing.T) {
	never := ledger.Attempt{Seq: 1, Stamp: "STAMP", ViaEnvoy: true, Outcome: "lease_expired"}
	cases := []struct {
		name    string
		at      func(a *ledger.Attempt)
		listed  bool
		earlier bool // an earlier attempt under its stamp may have left
	}{
		{"never marked, its lease expired", func(*ledger.Attempt) {}, false, false},
		{"never marked, but an earlier attempt under its stamp may have left", func(*ledger.Attempt) {}, true, true},
		{"never marked, stopped by ext_proc", func(a *ledger.Attempt) { a.Outcome = "ambiguous" }, false, false},
		{"still pending: a mark may come", func(a *ledger.Attempt) { a.Outcome = "pending" }, true, false},
		{"marked stamped", func(a *ledger.Attempt) { a.BodyStamped = true }, true, false},
		{"marked unstamped", func(a *ledger.Attempt) { a.LeftUnstamped = true }, true, false},
		{"native, not through Envoy", func(a *ledger.Attempt) { a.ViaEnvoy = false }, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			at := never
			tc.at(&at)
			ad := &listing{found: rail.Finding{Exhausted: true, Pages: 7}}
			acct := &rails.Account{ID: "acct_1", Rail: sik.RailStripe, Adapter: ad}
			l := &scripted{work: []ledger.ReconcileWork{{
				Intent:  ledger.Intent{Key: ledger.Key{RailAccount: "acct_1", SIK: "S"}, Action: "payout", Subject: "ba_1", AmountMinor: 5, Currency: "USD", Canonical: `{"extra":{}}`, AttemptCount: 1},
				Attempt: at, EarlierMayHaveLeft: tc.earlier,
			}}}
			w := New(l, oneAccount{acct}, Options{Owner: "me"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if _, err := w.Pass(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			f := l.finding
			if listed := ad.stamp != ""; listed != tc.listed {
				t.Fatalf("listed the rail: %v, want %v (finding %+v)", listed, tc.listed, f)
			}
			if !tc.listed && (f.Outcome != ledger.FindingAbsent || !f.NeverSent || !f.PaginationExhausted || f.Pages != 0) {
				t.Fatalf("finding = %+v, want absent, never sent, no page", f)
			}
			if tc.listed && f.NeverSent {
				t.Fatalf("finding = %+v: never sent for an attempt that may have left", f)
			}
		})
	}
}
