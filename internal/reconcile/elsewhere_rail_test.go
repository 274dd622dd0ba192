package reconcile

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/rail/railtest"
	"github.com/countersign/countersign/internal/rail/razorpay"
	"github.com/countersign/countersign/internal/rail/stripe"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
	"github.com/countersign/countersign/internal/testing/mockrail"
)

const (
	elsewhereStamp = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	otherStamp     = "BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
	rzpPay1        = "pay_29QQoUBi66xm2f"
	rzpPay2        = "pay_29QQoUBi66xm2g"
)

var (
	stripeAuth = "Bearer " + mockrail.DefaultStripeKey
	rzpAuth    = "Basic " + base64.StdEncoding.EncodeToString([]byte(mockrail.DefaultRazorpayKeyID+":"+mockrail.DefaultRazorpayKeySecret))
)

// kindOn is an intent's kind on a rail: its subject, and another one.
type kindOn struct {
	rail          sik.Rail
	kind          sik.Kind
	mine, another string
	currency      string
}

// made is an entity the rail made, under a stamp, for a subject.
type made struct {
	subject, stamp string
}

// makeOn has the mock rail at base make a refund (of the payment subject)
// or a transfer (to subject) of 500 stamped stamp, as the rail would on
// reading a request so; it returns the entity's id.
func makeOn(t *testing.T, base string, r sik.Rail, kind sik.Kind, m made) string {
	t.Helper()
	var path, auth, ctype string
	var body []byte
	switch r {
	case sik.RailStripe:
		form := url.Values{"amount": {"500"}, "metadata[" + sik.StampKey + "]": {m.stamp}}
		path = "/v1/refunds"
		if kind == sik.KindTransfer {
			path = "/v1/transfers"
			form.Set("destination", m.subject)
			form.Set("currency", "usd")
		} else {
			form.Set("payment_intent", m.subject)
		}
		auth, ctype, body = stripeAuth, "application/x-www-form-urlencoded", []byte(form.Encode())
	default:
		path = "/v1/payments/" + m.subject + "/refund"
		b, _ := json.Marshal(map[string]any{"amount": 500, "notes": map[string]string{sik.StampKey: m.stamp}})
		auth, ctype, body = rzpAuth, "application/json", b
	}
	req, err := http.NewRequest(http.MethodPost, base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", auth)
	req.Header.Set("Content-Type", ctype)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var out struct {
		ID string `json:"id"`
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &out) != nil || out.ID == "" {
		t.Fatalf("the mock rail did not make the %s: %d %s", kind, resp.StatusCode, b)
	}
	return out.ID
}

// failAccountListings answers 500 to a refund or transfer listing that
// names no payment or destination (the account's), and hands every other
// request to next.
func failAccountListings(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.Method == http.MethodGet && (r.URL.Path == "/v1/refunds" || r.URL.Path == "/v1/transfers") &&
			q.Get("payment_intent")+q.Get("charge")+q.Get("destination") == "" {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"error":{"message":"listing unavailable","code":"SERVER_ERROR","description":"listing unavailable"}}`)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// TestAStampedEntityElsewhereIsQuarantinedNotAbsent runs the reconciler
// against the mock rail, whose listings honour their filters as Stripe's
// and Razorpay's do. The rail made a Stripe refund under the attempt's
// stamp on another payment, or a transfer to another destination, than the
// intent (a parser differential). The payment's or destination's own
// listing does not show it; taking its end as absence recorded
// CONFIRMED_NOT_APPLIED, voiding the hold while the money moved (found by
// a review). The finding must quarantine it now, naming where it went;
// an attempt the rail never applied is still proven absent; the stamped
// entity on the intent's own subject is found on the first listing alone;
// and an account listing that fails leaves the finding inconclusive. A
// Razorpay refund names its payment in its URL path, which leaves no room
// for the differential: its absence is read from the payment's refunds
// alone, whatever the account's listing would answer.
func TestAStampedEntityElsewhereIsQuarantinedNotAbsent(t *testing.T) {
	stripeRefund := kindOn{sik.RailStripe, sik.KindRefund, "pi_1", "pi_2", "USD"}
	stripeTransfer := kindOn{sik.RailStripe, sik.KindTransfer, "acct_A", "acct_B", "USD"}
	rzpRefund := kindOn{sik.RailRazorpay, sik.KindRefund, rzpPay1, rzpPay2, "INR"}
	type want struct {
		outcome ledger.FindingOutcome
		pages   int
		says    string // in the detail
	}
	cases := []struct {
		name        string
		on          kindOn
		made        func(k kindOn) []made
		failAccount bool
		want        want
	}{
		{"stripe refund of another payment", stripeRefund, func(k kindOn) []made { return []made{{k.another, elsewhereStamp}} }, false,
			want{ledger.FindingInconclusive, 2, "pi_2"}},
		{"stripe transfer to another destination", stripeTransfer, func(k kindOn) []made { return []made{{k.another, elsewhereStamp}} }, false,
			want{ledger.FindingInconclusive, 2, "acct_B"}},

		{"stripe refund never applied", stripeRefund, decoys, false, want{ledger.FindingAbsent, 2, "read to the end"}},
		{"stripe transfer never applied", stripeTransfer, decoys, false, want{ledger.FindingAbsent, 2, "read to the end"}},
		{"razorpay refund never applied", rzpRefund, decoys, false, want{ledger.FindingAbsent, 1, "read to the end"}},

		{"stripe refund of its payment", stripeRefund, func(k kindOn) []made { return []made{{k.mine, elsewhereStamp}} }, false,
			want{ledger.FindingApplied, 1, elsewhereStamp}},
		{"stripe transfer to its destination", stripeTransfer, func(k kindOn) []made { return []made{{k.mine, elsewhereStamp}} }, false,
			want{ledger.FindingApplied, 1, elsewhereStamp}},
		{"razorpay refund of its payment", rzpRefund, func(k kindOn) []made { return []made{{k.mine, elsewhereStamp}} }, false,
			want{ledger.FindingApplied, 1, elsewhereStamp}},

		{"stripe refund, the account's listing fails", stripeRefund, decoys, true, want{ledger.FindingInconclusive, 1, "listing failed"}},
		{"stripe transfer, the account's listing fails", stripeTransfer, decoys, true, want{ledger.FindingInconclusive, 1, "listing failed"}},
		// A Razorpay refund's absence is its payment's listing's alone: the
		// account's, which a burst of refunds in one second anywhere on the
		// account makes inconclusive, is not read (found by a review).
		{"razorpay refund, the account's listing would fail", rzpRefund, decoys, true, want{ledger.FindingAbsent, 1, "read to the end"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := tc.on
			srv, err := mockrail.New(mockrail.WithPayments(
				mockrail.Payment{Rail: mockrail.Stripe, ID: "pi_1", Amount: 10000, Currency: "usd"},
				mockrail.Payment{Rail: mockrail.Stripe, ID: "pi_2", Amount: 10000, Currency: "usd"},
				mockrail.Payment{Rail: mockrail.Razorpay, ID: rzpPay1, Amount: 10000, Currency: "INR"},
				mockrail.Payment{Rail: mockrail.Razorpay, ID: rzpPay2, Amount: 10000, Currency: "INR"},
			))
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			var h http.Handler = srv
			if tc.failAccount {
				h = failAccountListings(srv)
			}
			hs := httptest.NewServer(h)
			defer hs.Close()
			ids := map[made]string{}
			for _, m := range tc.made(k) {
				ids[m] = makeOn(t, hs.URL, k.rail, k.kind, m)
			}

			acct := &rails.Account{ID: "acct_1", Rail: k.rail}
			if k.rail == sik.RailStripe {
				acct.Adapter, acct.Client = stripe.New(), railtest.NewClient(hs.URL, stripeAuth, hs.Client())
			} else {
				acct.Adapter, acct.Client = razorpay.New(), railtest.NewClient(hs.URL, rzpAuth, hs.Client())
			}
			l := &scripted{work: []ledger.ReconcileWork{{
				Intent: ledger.Intent{Key: ledger.Key{RailAccount: "acct_1", SIK: elsewhereStamp}, Action: string(k.kind), Subject: k.mine,
					AmountMinor: 500, Currency: k.currency, Canonical: `{"extra":{}}`, AttemptCount: 1, CreatedAt: time.Now().Add(-time.Minute)},
				Attempt: ledger.Attempt{Seq: 1, Stamp: elsewhereStamp, BodyStamped: true, ViaEnvoy: true, Outcome: "ambiguous"},
			}}}
			w := New(l, oneAccount{acct}, Options{Owner: "me", MaxAttempts: 6}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if _, err := w.Pass(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			f := l.finding
			if f == nil {
				t.Fatal("no finding recorded")
			}
			if f.Outcome != tc.want.outcome || f.Pages != tc.want.pages || !strings.Contains(f.Detail, tc.want.says) {
				t.Fatalf("finding %s after %d pages (%q); want %s after %d pages, saying %q", f.Outcome, f.Pages, f.Detail, tc.want.outcome, tc.want.pages, tc.want.says)
			}
			switch tc.want.outcome {
			case ledger.FindingAbsent:
				if !f.PaginationExhausted {
					t.Fatalf("absent without every page read: %+v", f)
				}
			case ledger.FindingApplied:
				if id := ids[made{k.mine, elsewhereStamp}]; f.EntityID != id {
					t.Fatalf("applied as %q, want the rail's %s", f.EntityID, id)
				}
			case ledger.FindingInconclusive:
				if f.PaginationExhausted || f.EntityID != "" {
					t.Fatalf("inconclusive finding claims exhaustion or an entity: %+v", f)
				}
				if !tc.failAccount && f.MaxReconciles != 1 {
					t.Fatalf("a stamped entity elsewhere must quarantine now (MaxReconciles 1): %+v", f)
				}
			}
		})
	}
}

// decoys are entities the rail made under another stamp, for the intent's
// subject and for another: none is the attempt's.
func decoys(k kindOn) []made {
	return []made{{k.mine, otherStamp}, {k.another, otherStamp}}
}

// TestElsewhereCasesUseTheRailsFilters: the mock rail the test above runs
// on lists, for the intent's subject, only that subject's entities, as the
// rails do (the earlier test served one listing whatever the query, which
// no rail does, and so passed with the hole open).
func TestElsewhereCasesUseTheRailsFilters(t *testing.T) {
	srv, err := mockrail.New(mockrail.WithPayments(
		mockrail.Payment{Rail: mockrail.Stripe, ID: "pi_1", Amount: 10000, Currency: "usd"},
		mockrail.Payment{Rail: mockrail.Stripe, ID: "pi_2", Amount: 10000, Currency: "usd"},
	))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	makeOn(t, hs.URL, sik.RailStripe, sik.KindRefund, made{"pi_2", elsewhereStamp})
	c := railtest.NewClient(hs.URL, stripeAuth, hs.Client())
	resp, err := c.Do(context.Background(), http.MethodGet, "/v1/refunds?payment_intent=pi_1&limit=100", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || strings.Contains(string(b), elsewhereStamp) || !strings.Contains(string(b), `"data":[]`) {
		t.Fatalf("the payment's listing shows another payment's refund (%d %s): the test above would prove nothing", resp.StatusCode, b)
	}
}
