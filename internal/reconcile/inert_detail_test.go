package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
)

// hostile is rail-written text aimed at whoever renders a reason: a Slack
// link under other words, HTML, and a line break to start a line of its own.
const hostile = "<https://x|APPROVE> <img src=x>\n@channel"

// TestRailTextInAFindingIsInert: a finding's Detail becomes the intent's
// reason, which leaves in signed webhooks (intent.quarantined): neither a
// listing's error (the rail's own message, or a proxy's page) nor a listed
// entity's id, currency or the adapter's account of how it differs may
// write markup or a line break there (found by a review: cf3cd81 made the
// classifiers' reasons inert, not the reconciler's).
func TestRailTextInAFindingIsInert(t *testing.T) {
	cases := []struct {
		name  string
		found rail.Finding
		err   error
		says  string // Countersign's own words, still readable
	}{
		{"listing error", rail.Finding{Pages: 1}, errors.New("stripe: 400: " + hostile), "listing failed: "},
		{"applied entity's id", rail.Finding{Pages: 1, Match: &rail.Entity{ID: "re_1" + hostile, AmountMinor: 500, Currency: "USD"}}, nil, "carries stamp STAMP"},
		{"unlike entity's id and amount", rail.Finding{Pages: 1, Match: &rail.Entity{ID: "re_1" + hostile, AmountMinor: 9, Currency: "USD"}}, nil, "the intent for 500"},
		{"unlike entity's currency", rail.Finding{Pages: 1, Match: &rail.Entity{ID: "re_1", AmountMinor: 500, Currency: "eur" + hostile}}, nil, "the intent in USD"},
		{"adapter's unlike sentence", rail.Finding{Pages: 1, Match: &rail.Entity{ID: "re_1", AmountMinor: 500, Currency: "USD", Unlike: "refund re_1 is for " + hostile}}, nil, "refund re_1 is for "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			acct := &rails.Account{ID: "acct_1", Rail: sik.RailStripe, Adapter: &listing{found: tc.found, err: tc.err}}
			l := &scripted{work: []ledger.ReconcileWork{{
				Intent:  ledger.Intent{Key: ledger.Key{RailAccount: "acct_1", SIK: "S"}, Action: "refund", Subject: "pi_1", AmountMinor: 500, Currency: "USD", Canonical: `{"extra":{}}`, AttemptCount: 1},
				Attempt: ledger.Attempt{Seq: 1, Stamp: "STAMP", BodyStamped: true},
			}}}
			w := New(l, oneAccount{acct}, Options{Owner: "me", MaxAttempts: 6}, slog.New(slog.DiscardHandler))
			if _, err := w.Pass(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			d := l.finding.Detail
			if strings.ContainsAny(d, "<>|\r\n") || !strings.Contains(d, tc.says) {
				t.Fatalf("detail = %q; want no <, >, | or line break, and %q", d, tc.says)
			}
		})
	}
}
