package reconcile

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/intent"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rail/railtest"
	"github.com/countersign/countersign/internal/rail/stripe"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
	"github.com/countersign/countersign/internal/testing/mockrail"
)

// passes is one intent as the ledger keeps it across passes: each claim
// counts a reconciliation, and a finding settles it as
// ledger.Store.RecordFinding does (applied; quarantined once an
// inconclusive pass is its MaxReconciles-th; else due again).
type passes struct {
	work    ledger.ReconcileWork
	state   string
	reasons []string
}

func (p *passes) ExpireLeasesIn(context.Context, int, time.Duration, ledger.ReconcileScope) (int, error) {
	return 0, nil
}

func (p *passes) ClaimReconcileIn(context.Context, string, time.Duration, int, ledger.ReconcileScope) ([]ledger.ReconcileWork, error) {
	if p.state != "UNKNOWN" {
		return nil, nil
	}
	p.work.Intent.ReconcileCount++
	return []ledger.ReconcileWork{p.work}, nil
}

func (p *passes) RecordFinding(_ context.Context, f ledger.Finding) (ledger.Intent, error) {
	p.reasons = append(p.reasons, f.Detail)
	switch {
	case f.Outcome == ledger.FindingApplied:
		p.state = "APPLIED"
	case f.Outcome == ledger.FindingInconclusive && f.MaxReconciles > 0 && p.work.Intent.ReconcileCount >= f.MaxReconciles:
		p.state = "QUARANTINED"
	case f.Outcome == ledger.FindingAbsent:
		p.state = "CONFIRMED_NOT_APPLIED"
	}
	return ledger.Intent{Key: f.Key, State: intent.State(p.state)}, nil
}

// TestAnUnconfirmedAttemptIsListedOnceTheRailIsDone: a native attempt
// whose caller never confirmed the body stamp (a Decide ALLOW never
// committed) cannot be proven absent by a listing. Once the rail can no
// longer apply it, one listing read to the end shows all any later one
// could: the reconciler listed it again every pass until the sixth
// quarantined it, two reads of the account's shared rate limit a pass,
// none charged to the agent (found by a review). It is quarantined after
// that one listing now; while the rail may still apply it, it is listed
// again; and one the rail did make under its stamp is still found
// applied. Never absent: that would let it be sent again.
func TestAnUnconfirmedAttemptIsListedOnceTheRailIsDone(t *testing.T) {
	const stamp = "NATIVESTAMPAAAAAAAAAAAAAAAAAAAAA"
	cases := []struct {
		name      string
		railDone  bool
		sent      bool // the caller did send it, stamped, and the rail made it
		wantState string
		wantReads int64 // listing requests at the rail, all passes together
	}{
		{"never sent, the rail done", true, false, "QUARANTINED", 2},
		{"never sent, the rail may still apply it", false, false, "QUARANTINED", 2 * 6},
		{"sent stamped but never confirmed, the rail done", true, true, "APPLIED", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mock, err := mockrail.New(mockrail.WithPayments(mockrail.Payment{Rail: mockrail.Stripe, ID: "pi_1", Amount: 10000, Currency: "usd"}))
			if err != nil {
				t.Fatal(err)
			}
			defer mock.Close()
			var reads atomic.Int64
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet {
					reads.Add(1)
				}
				mock.ServeHTTP(w, r)
			}))
			defer hs.Close()
			if tc.sent {
				makeOn(t, hs.URL, sik.RailStripe, sik.KindRefund, made{"pi_1", stamp})
			}
			acct := &rails.Account{ID: "acct_1", Rail: sik.RailStripe, Adapter: stripe.New(), Client: railtest.NewClient(hs.URL, stripeAuth, hs.Client())}
			l := &passes{state: "UNKNOWN", work: ledger.ReconcileWork{
				Intent: ledger.Intent{Key: ledger.Key{RailAccount: "acct_1", SIK: stamp}, Action: "refund", Subject: "pi_1",
					AmountMinor: 500, Currency: "USD", Canonical: `{"extra":{}}`, AttemptCount: 1, CreatedAt: time.Now().Add(-time.Minute)},
				// Native: not through Envoy, the stamp never confirmed.
				Attempt:  ledger.Attempt{Seq: 1, Stamp: stamp, ViaEnvoy: false, BodyStamped: false, Outcome: "lease_expired"},
				RailDone: tc.railDone,
			}}
			w := New(l, oneAccount{acct}, Options{Owner: "me", MaxAttempts: 6}, slog.New(slog.DiscardHandler))
			for range 10 { // more passes than MaxAttempts
				if _, err := w.Pass(context.Background(), nil); err != nil {
					t.Fatal(err)
				}
			}
			if l.state != tc.wantState || reads.Load() != tc.wantReads {
				t.Fatalf("%s after %d passes and %d listing reads at the rail; want %s after %d reads (findings: %q)",
					l.state, len(l.reasons), reads.Load(), tc.wantState, tc.wantReads, l.reasons)
			}
			if tc.wantState == "QUARANTINED" && !strings.Contains(l.reasons[len(l.reasons)-1], "never confirmed to carry the body stamp") {
				t.Fatalf("quarantined saying %q", l.reasons[len(l.reasons)-1])
			}
		})
	}
}
