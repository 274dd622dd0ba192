package reconcile

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
)

// TestAStampedEntityUnlikeTheIntentIsNotApplied: the listing shows an
// entity under the attempt's stamp whose amount or currency is not the
// intent's — the rail read the request otherwise than Countersign did (a
// parser differential, reached by an answer the agent made ambiguous so
// that no answer check saw it). It is neither APPLIED (the ledger would
// post the intent's amount) nor absent: the finding quarantines it at
// once (MaxReconciles 1), naming the difference, and keeps no entity. A
// full refund names no amount: any amount is its own (found by an
// attacker's-eye review: any stamped entity was taken as applied).
func TestAStampedEntityUnlikeTheIntentIsNotApplied(t *testing.T) {
	cases := []struct {
		name      string
		canonical string // the intent's canonical form ({"extra":{"amount":"full"}}: a full refund)
		entity    rail.Entity
		want      ledger.FindingOutcome
		says      string
	}{
		{"the intent's amount and currency", `{"extra":{}}`, rail.Entity{AmountMinor: 500, Currency: "USD"}, ledger.FindingApplied, ""},
		{"currency in another case", `{"extra":{}}`, rail.Entity{AmountMinor: 500, Currency: "usd"}, ledger.FindingApplied, ""},
		{"a larger amount", `{"extra":{}}`, rail.Entity{AmountMinor: 50000, Currency: "USD"}, ledger.FindingInconclusive, "it is for 50000, the intent for 500"},
		{"a smaller amount", `{"extra":{}}`, rail.Entity{AmountMinor: 5, Currency: "USD"}, ledger.FindingInconclusive, "it is for 5, the intent for 500"},
		{"another currency", `{"extra":{}}`, rail.Entity{AmountMinor: 500, Currency: "JPY"}, ledger.FindingInconclusive, `it is in "JPY", the intent in USD`},
		{"a full refund of any amount", `{"extra":{"amount":"full"}}`, rail.Entity{AmountMinor: 123456, Currency: "USD"}, ledger.FindingApplied, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.entity
			e.ID, e.Stamp, e.Raw = "re_9", "STAMP", []byte(`{"id":"re_9"}`)
			acct := &rails.Account{ID: "acct_1", Rail: sik.RailStripe, Adapter: &listing{found: rail.Finding{Match: &e, Pages: 1}}}
			l := &scripted{work: []ledger.ReconcileWork{{
				Intent:  ledger.Intent{Key: ledger.Key{RailAccount: "acct_1", SIK: "S"}, Action: "refund", Subject: "pi_1", AmountMinor: 500, Currency: "USD", Canonical: tc.canonical, AttemptCount: 1},
				Attempt: ledger.Attempt{Seq: 1, Stamp: "STAMP", BodyStamped: true},
			}}}
			w := New(l, oneAccount{acct}, Options{Owner: "me", MaxAttempts: 6}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if _, err := w.Pass(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			f := l.finding
			switch {
			case f == nil || f.Outcome != tc.want:
				t.Fatalf("finding = %+v, want %s", f, tc.want)
			case tc.want == ledger.FindingApplied && f.EntityID != "re_9":
				t.Fatalf("applied without its entity: %+v", f)
			case tc.want != ledger.FindingApplied && (f.MaxReconciles != 1 || f.EntityID != "" || f.EntityBody != nil || !strings.Contains(f.Detail, tc.says)):
				t.Fatalf("want a finding that quarantines now, keeps no entity and says %q; got %+v", tc.says, f)
			}
		})
	}
}
