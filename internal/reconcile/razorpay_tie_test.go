package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rail/railtest"
	"github.com/countersign/countersign/internal/rail/razorpay"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
)

// rzpPayouts serves GET /v1/payouts newest first by created_at, with
// offset paging. Rows with equal created_at come back in an order that
// differs between queries (MySQL: "If multiple rows have identical values
// in the ORDER BY columns, the server is free to return those rows in any
// order"); here: reversed on every other query.
type rzpPayouts struct {
	mu    sync.Mutex
	calls int
	rows  []map[string]any // sorted newest first
}

func (s *rzpPayouts) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	rows := slices.Clone(s.rows)
	if s.calls%2 == 0 { // another query plan: ties in another order
		for i := 0; i < len(rows); {
			j := i
			for j < len(rows) && rows[j]["created_at"] == rows[i]["created_at"] {
				j++
			}
			slices.Reverse(rows[i:j])
			i = j
		}
	}
	skip, _ := strconv.Atoi(r.URL.Query().Get("skip"))
	count, _ := strconv.Atoi(r.URL.Query().Get("count"))
	end := min(skip+count, len(rows))
	items := []map[string]any{}
	if skip < len(rows) {
		items = rows[skip:end]
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"entity": "collection", "count": len(items), "items": items})
}

// TestSameSecondBurstAcrossPagesIsFound: an agent fires 40 payouts in one
// second (the stamped one among them), then 70 more, so that the burst
// straddles the first page boundary; the rail orders the burst differently
// on the next query. The reconciler must find the payout (a review found
// Razorpay's Find skipped it, and the intent ended CONFIRMED_NOT_APPLIED:
// its hold voided, a retry allowed, for money that moved).
func TestSameSecondBurstAcrossPagesIsFound(t *testing.T) {
	const stamp = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	base := int64(1_760_000_000)
	srv := &rzpPayouts{}
	// 70 payouts after the burst (one a second), then a burst of 40 the agent
	// fired in one second, the stamped one among them (index 30 of it),
	// then older ones.
	add := func(id string, created int64, st string) {
		notes := any([]any{})
		if st != "" {
			notes = map[string]string{sik.StampKey: st}
		}
		srv.rows = append(srv.rows, map[string]any{"id": id, "entity": "payout", "fund_account_id": "fa_1", "amount": 100, "currency": "INR",
			"status": "processed", "created_at": created, "notes": notes})
	}
	for i := 0; i < 70; i++ {
		add(fmt.Sprintf("pout_after%02d", i), base+100-int64(i), "")
	}
	for i := 0; i < 40; i++ {
		st := ""
		if i == 30 {
			st = stamp
		}
		add(fmt.Sprintf("pout_burst%02d", i), base, st)
	}
	for i := 0; i < 40; i++ {
		add(fmt.Sprintf("pout_before%02d", i), base-1-int64(i), "")
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()

	acct := &rails.Account{ID: "rzp_1", Rail: sik.RailRazorpay, Adapter: razorpay.New(), Client: railtest.NewClient(hs.URL, "", hs.Client())}
	l := &scripted{work: []ledger.ReconcileWork{{
		Intent: ledger.Intent{Key: ledger.Key{RailAccount: "rzp_1", SIK: "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"}, Action: "payout", Subject: "fa_1",
			AmountMinor: 100, Currency: "INR", Canonical: `{"extra":{"account_number":"7878780080316316","mode":"IMPS","purpose":"payout"}}`,
			AttemptCount: 1, CreatedAt: time.Unix(base-5, 0)},
		Attempt: ledger.Attempt{Seq: 1, Stamp: stamp, BodyStamped: true, ViaEnvoy: true, Outcome: "lease_expired"},
	}}}
	w := New(l, oneAccount{acct}, Options{Owner: "me"}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if _, err := w.Pass(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	f := l.finding
	t.Logf("rail holds pout_burst30 carrying stamp %s; finding: outcome=%s exhausted=%v pages=%d detail=%q", stamp, f.Outcome, f.PaginationExhausted, f.Pages, f.Detail)
	if f.Outcome != ledger.FindingApplied || f.EntityID != "pout_burst30" {
		t.Fatalf("finding %+v: want applied as pout_burst30", f)
	}
}
