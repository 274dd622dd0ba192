package reconcile

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
)

// sinceRecorder is an adapter whose Find records the since it is given and
// finds nothing, read to the end.
type sinceRecorder struct {
	rail.Adapter
	since []time.Time
}

func (s *sinceRecorder) Find(_ context.Context, _ rail.Client, _ rail.Action, _ string, since time.Time) (rail.Finding, error) {
	s.since = append(s.since, since)
	return rail.Finding{Exhausted: true, Pages: 1}, nil
}

// TestListingStartsAtTheFirstAttemptUnderTheStamp: the listing's
// creation-time bound is the slack before the first attempt under the
// stamp started (a retry after a proven absence keeps the stamp, and its
// first request may reach the rail late), not before the intent's
// creation: an intent a month old whose attempt is minutes old lists
// minutes of the account, not a month and a day (found by a review: a day
// before the intent's creation let an agent run the account's listing to
// the page cap for old intents, which then ended quarantined).
func TestListingStartsAtTheFirstAttemptUnderTheStamp(t *testing.T) {
	created := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	first := created.Add(30 * 24 * time.Hour)
	retry := first.Add(3 * 24 * time.Hour)
	cases := []struct {
		name       string
		firstUnder time.Time // ReconcileWork.StampFirstStarted
		slack      time.Duration
		want       time.Time
	}{
		{"a retry under the first attempt's stamp", first, 0, first.Add(-time.Hour)},
		{"the first attempt itself", retry, 0, retry.Add(-time.Hour)},
		{"a slack of its own", first, 10 * time.Minute, first.Add(-10 * time.Minute)},
		{"a claim that does not say: the intent's creation", time.Time{}, 0, created.Add(-time.Hour)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ad := &sinceRecorder{}
			acct := &rails.Account{ID: "acct_1", Rail: sik.RailStripe, Adapter: ad}
			l := &scripted{work: []ledger.ReconcileWork{{
				Intent: ledger.Intent{Key: ledger.Key{RailAccount: "acct_1", SIK: "S"}, Action: "refund", Subject: "pi_1", AmountMinor: 5,
					Currency: "USD", Canonical: `{"extra":{}}`, AttemptCount: 2, CreatedAt: created},
				Attempt:           ledger.Attempt{Seq: 2, Stamp: "STAMP", BodyStamped: true, ViaEnvoy: true, Outcome: "ambiguous", StartedAt: retry},
				StampFirstStarted: tc.firstUnder,
			}}}
			w := New(l, oneAccount{acct}, Options{Owner: "me", SinceSlack: tc.slack}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if _, err := w.Pass(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			if len(ad.since) != 1 || !ad.since[0].Equal(tc.want) {
				t.Fatalf("Find was given since %v, want %v", ad.since, tc.want)
			}
			if l.finding == nil || l.finding.Outcome != ledger.FindingAbsent {
				t.Fatalf("finding %+v, want absent", l.finding)
			}
		})
	}
}
