package mockrail

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"
)

var (
	piUSD  = Payment{Rail: Stripe, ID: "pi_1001", Amount: 5000, Currency: "usd"}
	chBare = Payment{Rail: Stripe, ID: "ch_2002", Amount: 700, Currency: "eur"}
)

func TestStripeEndpoints(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, r *rail)
	}{
		{"get payment intent", func(t *testing.T, r *rail) {
			x := r.stripe("GET", "/v1/payment_intents/pi_1001", nil, "")
			wantStatus(t, x, 200)
			if x.str(t, "object") != "payment_intent" || x.num(t, "amount") != 5000 || x.str(t, "currency") != "usd" ||
				x.str(t, "status") != "succeeded" || x.str(t, "latest_charge") != "ch_1001" || x.num(t, "amount_refunded") != 0 {
				t.Fatalf("payment intent: %s", x.body)
			}
		}},
		{"get payment intent expands latest_charge", func(t *testing.T, r *rail) {
			x := r.stripe("GET", "/v1/payment_intents/pi_1001", form("expand[]", "latest_charge"), "")
			wantStatus(t, x, 200)
			if x.str(t, "latest_charge", "object") != "charge" || x.num(t, "latest_charge", "amount_refunded") != 0 {
				t.Fatalf("expanded: %s", x.body)
			}
		}},
		{"get charge", func(t *testing.T, r *rail) {
			x := r.stripe("GET", "/v1/charges/ch_1001", nil, "")
			wantStatus(t, x, 200)
			if x.str(t, "object") != "charge" || x.num(t, "amount") != 5000 || x.str(t, "payment_intent") != "pi_1001" ||
				x.field(t, "refunded") != false || x.num(t, "amount_refunded") != 0 {
				t.Fatalf("charge: %s", x.body)
			}
		}},
		{"get bare charge", func(t *testing.T, r *rail) {
			x := r.stripe("GET", "/v1/charges/ch_2002", nil, "")
			wantStatus(t, x, 200)
			if x.field(t, "payment_intent") != nil || x.str(t, "currency") != "eur" {
				t.Fatalf("charge: %s", x.body)
			}
		}},
		{"unknown payment intent is 404", func(t *testing.T, r *rail) {
			x := r.stripe("GET", "/v1/payment_intents/pi_nope", nil, "")
			wantStatus(t, x, 404)
			if x.str(t, "error", "code") != "resource_missing" {
				t.Fatalf("error: %s", x.body)
			}
		}},
		{"a charge id is not a payment intent", func(t *testing.T, r *rail) {
			wantStatus(t, r.stripe("GET", "/v1/payment_intents/ch_1001", nil, ""), 404)
		}},
		{"full refund when amount is absent", func(t *testing.T, r *rail) {
			x := r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_1001"), "")
			wantStatus(t, x, 200)
			if x.str(t, "object") != "refund" || x.num(t, "amount") != 5000 || x.str(t, "charge") != "ch_1001" ||
				x.str(t, "payment_intent") != "pi_1001" || x.str(t, "status") != "succeeded" || x.str(t, "currency") != "usd" {
				t.Fatalf("refund: %s", x.body)
			}
			if x.str(t, "id") != "re_00000000000001" {
				t.Fatalf("id %q", x.str(t, "id"))
			}
			ch := r.stripe("GET", "/v1/charges/ch_1001", nil, "")
			if ch.num(t, "amount_refunded") != 5000 || ch.field(t, "refunded") != true {
				t.Fatalf("charge after full refund: %s", ch.body)
			}
		}},
		{"partial refund keeps metadata", func(t *testing.T, r *rail) {
			x := r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_1001", "amount", "1200",
				"metadata[countersign_sik]", "SIK123", "metadata[order]", "42", "reason", "requested_by_customer"), "")
			wantStatus(t, x, 200)
			if x.num(t, "amount") != 1200 || x.str(t, "metadata", "countersign_sik") != "SIK123" ||
				x.str(t, "metadata", "order") != "42" || x.str(t, "reason") != "requested_by_customer" {
				t.Fatalf("refund: %s", x.body)
			}
			pi := r.stripe("GET", "/v1/payment_intents/pi_1001", nil, "")
			if pi.num(t, "amount_refunded") != 1200 {
				t.Fatalf("payment intent: %s", pi.body)
			}
		}},
		{"refund by charge names its payment intent", func(t *testing.T, r *rail) {
			x := r.stripe("POST", "/v1/refunds", form("charge", "ch_1001", "amount", "10"), "")
			wantStatus(t, x, 200)
			if x.str(t, "payment_intent") != "pi_1001" || x.str(t, "charge") != "ch_1001" {
				t.Fatalf("refund: %s", x.body)
			}
		}},
		{"refund of a bare charge", func(t *testing.T, r *rail) {
			x := r.stripe("POST", "/v1/refunds", form("charge", "ch_2002"), "")
			wantStatus(t, x, 200)
			if x.field(t, "payment_intent") != nil || x.num(t, "amount") != 700 {
				t.Fatalf("refund: %s", x.body)
			}
		}},
		{"refund of an unknown payment intent", func(t *testing.T, r *rail) {
			x := r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_nope"), "")
			wantStatus(t, x, 404)
			if x.str(t, "error", "code") != "resource_missing" || x.str(t, "error", "param") != "payment_intent" {
				t.Fatalf("error: %s", x.body)
			}
		}},
		{"refund without a subject", func(t *testing.T, r *rail) {
			x := r.stripe("POST", "/v1/refunds", form("amount", "1"), "")
			wantStatus(t, x, 400)
			if x.str(t, "error", "code") != "parameter_missing" {
				t.Fatalf("error: %s", x.body)
			}
		}},
		{"unknown parameter is refused", func(t *testing.T, r *rail) {
			x := r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_1001", "amout", "1"), "")
			wantStatus(t, x, 400)
			if x.str(t, "error", "code") != "parameter_unknown" || x.str(t, "error", "param") != "amout" {
				t.Fatalf("error: %s", x.body)
			}
		}},
		{"non-integer amount is refused", func(t *testing.T, r *rail) {
			x := r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_1001", "amount", "12.5"), "")
			wantStatus(t, x, 400)
			if x.str(t, "error", "code") != "parameter_invalid_integer" {
				t.Fatalf("error: %s", x.body)
			}
		}},
		{"currency must match", func(t *testing.T, r *rail) {
			x := r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_1001", "amount", "1", "currency", "eur"), "")
			wantStatus(t, x, 400)
			if x.str(t, "error", "param") != "currency" {
				t.Fatalf("error: %s", x.body)
			}
		}},
		{"charge of another payment intent is refused", func(t *testing.T, r *rail) {
			x := r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_1001", "charge", "ch_2002"), "")
			wantStatus(t, x, 400)
		}},
		{"get refund", func(t *testing.T, r *rail) {
			id := r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_1001", "amount", "5"), "").str(t, "id")
			x := r.stripe("GET", "/v1/refunds/"+id, nil, "")
			wantStatus(t, x, 200)
			if x.str(t, "id") != id || x.num(t, "amount") != 5 {
				t.Fatalf("refund: %s", x.body)
			}
			wantStatus(t, r.stripe("GET", "/v1/refunds/re_nope", nil, ""), 404)
		}},
		{"list refunds filters by payment intent and charge", func(t *testing.T, r *rail) {
			a := r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_1001", "amount", "1"), "").str(t, "id")
			b := r.stripe("POST", "/v1/refunds", form("charge", "ch_2002", "amount", "1"), "").str(t, "id")
			c := r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_1001", "amount", "2"), "").str(t, "id")
			for _, tc := range []struct {
				q    url.Values
				want []string
			}{
				{form("payment_intent", "pi_1001"), []string{c, a}},
				{form("charge", "ch_1001"), []string{c, a}},
				{form("charge", "ch_2002"), []string{b}},
				{nil, []string{c, b, a}},
			} {
				x := r.stripe("GET", "/v1/refunds", tc.q, "")
				wantStatus(t, x, 200)
				if got := ids(t, x); fmt.Sprint(got) != fmt.Sprint(tc.want) {
					t.Fatalf("%v: got %v, want %v", tc.q, got, tc.want)
				}
				if x.str(t, "object") != "list" || x.str(t, "url") != "/v1/refunds" || x.field(t, "has_more") != false {
					t.Fatalf("list: %s", x.body)
				}
			}
		}},
		{"empty list has an empty data array", func(t *testing.T, r *rail) {
			x := r.stripe("GET", "/v1/refunds", form("payment_intent", "pi_1001"), "")
			wantContains(t, x, `"data":[]`)
		}},
		{"list limit out of range", func(t *testing.T, r *rail) {
			wantStatus(t, r.stripe("GET", "/v1/refunds", form("limit", "101"), ""), 400)
			wantStatus(t, r.stripe("GET", "/v1/refunds", form("limit", "0"), ""), 400)
		}},
		{"list with an unknown cursor", func(t *testing.T, r *rail) {
			x := r.stripe("GET", "/v1/refunds", form("starting_after", "re_nope"), "")
			wantStatus(t, x, 400)
			if x.str(t, "error", "code") != "resource_missing" {
				t.Fatalf("error: %s", x.body)
			}
		}},
		{"list with both cursors", func(t *testing.T, r *rail) {
			wantStatus(t, r.stripe("GET", "/v1/refunds", form("starting_after", "a", "ending_before", "b"), ""), 400)
		}},
		{"create and list payouts", func(t *testing.T, r *rail) {
			x := r.stripe("POST", "/v1/payouts", form("amount", "2500", "currency", "usd", "destination", "ba_1",
				"metadata[countersign_sik]", "S1"), "")
			wantStatus(t, x, 200)
			if x.str(t, "object") != "payout" || x.str(t, "id") != "po_00000000000001" || x.num(t, "amount") != 2500 ||
				x.str(t, "destination") != "ba_1" || x.str(t, "status") != "pending" || x.str(t, "metadata", "countersign_sik") != "S1" {
				t.Fatalf("payout: %s", x.body)
			}
			r.stripe("POST", "/v1/payouts", form("amount", "10", "currency", "usd"), "")
			l := r.stripe("GET", "/v1/payouts", nil, "")
			if got := ids(t, l); fmt.Sprint(got) != "[po_00000000000002 po_00000000000001]" {
				t.Fatalf("payouts %v", got)
			}
			if got := ids(t, r.stripe("GET", "/v1/payouts", form("destination", "ba_1"), "")); fmt.Sprint(got) != "[po_00000000000001]" {
				t.Fatalf("payouts to ba_1 %v", got)
			}
			wantStatus(t, r.stripe("GET", "/v1/payouts/po_00000000000001", nil, ""), 200)
		}},
		{"payout needs amount and currency", func(t *testing.T, r *rail) {
			wantStatus(t, r.stripe("POST", "/v1/payouts", form("currency", "usd"), ""), 400)
			wantStatus(t, r.stripe("POST", "/v1/payouts", form("amount", "1"), ""), 400)
			wantStatus(t, r.stripe("POST", "/v1/payouts", form("amount", "1", "currency", "usd", "method", "fast"), ""), 400)
		}},
		{"create and list transfers", func(t *testing.T, r *rail) {
			x := r.stripe("POST", "/v1/transfers", form("amount", "900", "currency", "usd", "destination", "acct_A",
				"transfer_group", "order_1", "metadata[k]", "v"), "")
			wantStatus(t, x, 200)
			if x.str(t, "object") != "transfer" || x.str(t, "id") != "tr_00000000000001" || x.str(t, "destination") != "acct_A" ||
				x.str(t, "transfer_group") != "order_1" || x.str(t, "metadata", "k") != "v" {
				t.Fatalf("transfer: %s", x.body)
			}
			r.stripe("POST", "/v1/transfers", form("amount", "1", "currency", "usd", "destination", "acct_B"), "")
			if got := ids(t, r.stripe("GET", "/v1/transfers", nil, "")); fmt.Sprint(got) != "[tr_00000000000002 tr_00000000000001]" {
				t.Fatalf("transfers %v", got)
			}
			if got := ids(t, r.stripe("GET", "/v1/transfers", form("destination", "acct_B"), "")); fmt.Sprint(got) != "[tr_00000000000002]" {
				t.Fatalf("transfers to acct_B %v", got)
			}
			if got := ids(t, r.stripe("GET", "/v1/transfers", form("transfer_group", "order_1"), "")); fmt.Sprint(got) != "[tr_00000000000001]" {
				t.Fatalf("transfers in order_1 %v", got)
			}
			wantStatus(t, r.stripe("GET", "/v1/transfers/tr_00000000000002", nil, ""), 200)
		}},
		{"transfer needs a connected account", func(t *testing.T, r *rail) {
			wantStatus(t, r.stripe("POST", "/v1/transfers", form("amount", "1", "currency", "usd"), ""), 400)
			wantStatus(t, r.stripe("POST", "/v1/transfers", form("amount", "1", "currency", "usd", "destination", "ba_1"), ""), 400)
		}},
		{"unrecognized URL", func(t *testing.T, r *rail) {
			x := r.stripe("GET", "/v1/customers", nil, "")
			wantStatus(t, x, 404)
			wantContains(t, x, "Unrecognized request URL")
		}},
		{"Basic auth with the secret key as user name", func(t *testing.T, r *rail) {
			h := stripeHeader(DefaultStripeKey, "")
			req, _ := http.NewRequest("GET", "/", nil)
			req.SetBasicAuth(DefaultStripeKey, "")
			h.Set("Authorization", req.Header.Get("Authorization"))
			wantStatus(t, r.must("GET", "/v1/payment_intents/pi_1001", nil, h), 200)
		}},
		{"response carries a request id", func(t *testing.T, r *rail) {
			x := r.stripe("GET", "/v1/payment_intents/pi_1001", nil, "")
			if x.header.Get("Request-Id") == "" {
				t.Fatal("no Request-Id header")
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRail(t, WithPayments(piUSD, chBare))
			tc.run(t, r)
		})
	}
}

// Refunding more than is left is refused, whether in one refund or in
// several, and the refused attempt leaves no effect.
func TestStripeOverRefundRejected(t *testing.T) {
	tests := []struct {
		name     string
		amounts  []string // "" = no amount (full)
		last     int      // status of the last request
		code     string   // error code of the last request
		refunded int64
	}{
		{"single refund above the amount", []string{"5001"}, 400, "amount_too_large", 0},
		{"second refund above what is left", []string{"3000", "2001"}, 400, "amount_too_large", 3000},
		{"exact remainder is fine", []string{"3000", "2000"}, 200, "", 5000},
		{"full refund after a partial takes the rest", []string{"3000", ""}, 200, "", 5000},
		{"anything after a full refund", []string{"", "1"}, 400, "charge_already_refunded", 5000},
		{"full refund twice", []string{"", ""}, 400, "charge_already_refunded", 5000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRail(t, WithPayments(piUSD))
			var x resp
			for _, a := range tc.amounts {
				f := form("payment_intent", "pi_1001")
				if a != "" {
					f.Set("amount", a)
				}
				x = r.stripe("POST", "/v1/refunds", f, "")
			}
			wantStatus(t, x, tc.last)
			if tc.code != "" && (x.str(t, "error", "code") != tc.code || x.str(t, "error", "type") != "invalid_request_error") {
				t.Fatalf("error: %s", x.body)
			}
			p, _ := r.srv.Payment(DefaultStripeAccount, "pi_1001")
			if p.AmountRefunded != tc.refunded {
				t.Fatalf("refunded %d, want %d", p.AmountRefunded, tc.refunded)
			}
			var sum int64
			for _, e := range r.srv.Journal().EffectsOn("pi_1001") {
				sum += e.Amount
			}
			if sum != tc.refunded {
				t.Fatalf("journal effects sum to %d, want %d", sum, tc.refunded)
			}
		})
	}
}

// Paging 250 refunds with starting_after returns each exactly once, newest
// first, even when refunds are created while paging.
func TestStripeCursorPagination(t *testing.T) {
	tests := []struct {
		name          string
		limit         int
		insertBetween int // refunds created after the first page
		wantPages     int
	}{
		{"limit 100", 100, 0, 3},
		{"limit 7", 7, 0, 36},
		{"limit 100 with inserts while paging", 100, 5, 3},
		{"limit 1", 1, 0, 250},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRail(t, WithIDs(RandomIDs()), WithPayments(Payment{Rail: Stripe, ID: "pi_big", Amount: 1_000_000, Currency: "usd"}))
			var created []string
			for i := range 250 {
				x := r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_big", "amount", strconv.Itoa(i+1)), "")
				wantStatus(t, x, 200)
				created = append(created, x.str(t, "id"))
			}
			seen := map[string]int{}
			var order []string
			cursor, pages := "", 0
			for {
				q := form("payment_intent", "pi_big", "limit", strconv.Itoa(tc.limit))
				if cursor != "" {
					q.Set("starting_after", cursor)
				}
				x := r.stripe("GET", "/v1/refunds", q, "")
				wantStatus(t, x, 200)
				pages++
				page := ids(t, x)
				if len(page) > tc.limit {
					t.Fatalf("page of %d > limit %d", len(page), tc.limit)
				}
				for _, id := range page {
					seen[id]++
					order = append(order, id)
				}
				if pages == 1 {
					for range tc.insertBetween {
						wantStatus(t, r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_big", "amount", "1"), ""), 200)
					}
				}
				if x.field(t, "has_more") == false {
					break
				}
				if pages > 300 {
					t.Fatal("pagination does not end")
				}
				cursor = page[len(page)-1]
			}
			if pages != tc.wantPages {
				t.Fatalf("%d pages, want %d", pages, tc.wantPages)
			}
			if len(order) != 250 {
				t.Fatalf("saw %d refunds, want 250", len(order))
			}
			for i, id := range created {
				if seen[id] != 1 {
					t.Fatalf("refund %s seen %d times", id, seen[id])
				}
				if order[249-i] != id {
					t.Fatalf("position %d is %s, want %s (newest first)", 249-i, order[249-i], id)
				}
			}
		})
	}
}

func TestStripeEndingBefore(t *testing.T) {
	r := newRail(t, WithPayments(piUSD))
	var created []string
	for range 10 {
		created = append(created, r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_1001", "amount", "1"), "").str(t, "id"))
	}
	// Newest first: created[9] … created[0]. Just newer than created[2] are
	// created[3], created[4]; the page closest to the cursor is [4 3].
	x := r.stripe("GET", "/v1/refunds", form("ending_before", created[2], "limit", "2"), "")
	if got, want := fmt.Sprint(ids(t, x)), fmt.Sprint([]string{created[4], created[3]}); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if x.field(t, "has_more") != true {
		t.Fatal("has_more should be true")
	}
	x = r.stripe("GET", "/v1/refunds", form("ending_before", created[7], "limit", "5"), "")
	if got, want := fmt.Sprint(ids(t, x)), fmt.Sprint([]string{created[9], created[8]}); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if x.field(t, "has_more") != false {
		t.Fatal("has_more should be false")
	}
}

func TestStripeCreatedFilter(t *testing.T) {
	r := newRail(t, WithPayments(piUSD))
	a := r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_1001", "amount", "1"), "").str(t, "id")
	r.clock.Advance(10 * time.Second)
	b := r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_1001", "amount", "1"), "").str(t, "id")
	mid := strconv.FormatInt(t0.Add(5*time.Second).Unix(), 10)
	if got := ids(t, r.stripe("GET", "/v1/refunds", form("created[gte]", mid), "")); fmt.Sprint(got) != fmt.Sprint([]string{b}) {
		t.Fatalf("created[gte]: %v", got)
	}
	if got := ids(t, r.stripe("GET", "/v1/refunds", form("created[lt]", mid), "")); fmt.Sprint(got) != fmt.Sprint([]string{a}) {
		t.Fatalf("created[lt]: %v", got)
	}
	wantStatus(t, r.stripe("GET", "/v1/refunds", form("created[near]", mid), ""), 400)
}
