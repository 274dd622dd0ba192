package mockrail

import (
	"fmt"
	"strconv"
	"testing"
)

var payINR = Payment{Rail: Razorpay, ID: "pay_29QQoUBi66xm2f", Amount: 50000, Currency: "INR"}

func payoutBody(amount int64, kv ...any) map[string]any {
	b := map[string]any{
		"account_number": "7878780080316316", "fund_account_id": "fa_00000000000001", "amount": amount,
		"currency": "INR", "mode": "IMPS", "purpose": "refund",
	}
	for i := 0; i+1 < len(kv); i += 2 {
		b[kv[i].(string)] = kv[i+1]
	}
	return b
}

func TestRazorpayEndpoints(t *testing.T) {
	const pay = "/v1/payments/pay_29QQoUBi66xm2f"
	tests := []struct {
		name string
		run  func(t *testing.T, r *rail)
	}{
		{"get payment", func(t *testing.T, r *rail) {
			x := r.rzp("GET", pay, nil)
			wantStatus(t, x, 200)
			if x.str(t, "entity") != "payment" || x.num(t, "amount") != 50000 || x.str(t, "currency") != "INR" ||
				x.str(t, "status") != "captured" || x.num(t, "amount_refunded") != 0 || x.field(t, "refund_status") != nil {
				t.Fatalf("payment: %s", x.body)
			}
			wantContains(t, x, `"notes":[]`) // Razorpay writes empty notes as an array
		}},
		{"unknown payment", func(t *testing.T, r *rail) {
			x := r.rzp("GET", "/v1/payments/pay_nope", nil)
			wantStatus(t, x, 400)
			if x.str(t, "error", "code") != "BAD_REQUEST_ERROR" {
				t.Fatalf("error: %s", x.body)
			}
		}},
		{"full refund when amount is absent", func(t *testing.T, r *rail) {
			x := r.rzp("POST", pay+"/refund", nil)
			wantStatus(t, x, 200)
			if x.str(t, "entity") != "refund" || x.str(t, "id") != "rfnd_00000000000001" || x.num(t, "amount") != 50000 ||
				x.str(t, "payment_id") != "pay_29QQoUBi66xm2f" || x.str(t, "status") != "processed" || x.str(t, "currency") != "INR" {
				t.Fatalf("refund: %s", x.body)
			}
			p := r.rzp("GET", pay, nil)
			if p.num(t, "amount_refunded") != 50000 || p.str(t, "refund_status") != "full" || p.str(t, "status") != "refunded" {
				t.Fatalf("payment after full refund: %s", p.body)
			}
		}},
		{"partial refund keeps notes", func(t *testing.T, r *rail) {
			x := r.rzp("POST", pay+"/refund", map[string]any{"amount": 1500, "notes": map[string]any{"countersign_sik": "SIK9", "n": 7}, "receipt": "r1"})
			wantStatus(t, x, 200)
			if x.num(t, "amount") != 1500 || x.str(t, "notes", "countersign_sik") != "SIK9" || x.str(t, "notes", "n") != "7" ||
				x.str(t, "receipt") != "r1" {
				t.Fatalf("refund: %s", x.body)
			}
			if p := r.rzp("GET", pay, nil); p.str(t, "refund_status") != "partial" || p.num(t, "amount_refunded") != 1500 {
				t.Fatalf("payment: %s", p.body)
			}
		}},
		{"amount as a string", func(t *testing.T, r *rail) {
			x := r.rzp("POST", pay+"/refund", `{"amount":"200"}`)
			wantStatus(t, x, 200)
			if x.num(t, "amount") != 200 {
				t.Fatalf("refund: %s", x.body)
			}
		}},
		{"over-refund", func(t *testing.T, r *rail) {
			x := r.rzp("POST", pay+"/refund", map[string]any{"amount": 50001})
			wantStatus(t, x, 400)
			if x.str(t, "error", "code") != "BAD_REQUEST_ERROR" || x.str(t, "error", "field") != "amount" {
				t.Fatalf("error: %s", x.body)
			}
			wantStatus(t, r.rzp("POST", pay+"/refund", map[string]any{"amount": 30000}), 200)
			wantStatus(t, r.rzp("POST", pay+"/refund", map[string]any{"amount": 20001}), 400)
			wantStatus(t, r.rzp("POST", pay+"/refund", nil), 200) // the remaining 20000
			x = r.rzp("POST", pay+"/refund", nil)
			wantStatus(t, x, 400)
			wantContains(t, x, "fully refunded")
			if n := len(r.srv.Journal().EffectsOn("pay_29QQoUBi66xm2f")); n != 2 {
				t.Fatalf("%d effects, want 2", n)
			}
		}},
		{"currency must match", func(t *testing.T, r *rail) {
			wantStatus(t, r.rzp("POST", pay+"/refund", map[string]any{"amount": 1, "currency": "USD"}), 400)
		}},
		{"unknown field is refused", func(t *testing.T, r *rail) {
			x := r.rzp("POST", pay+"/refund", map[string]any{"amount": 1, "amout": 2})
			wantStatus(t, x, 400)
			if x.str(t, "error", "field") != "amout" {
				t.Fatalf("error: %s", x.body)
			}
		}},
		{"refund of an unknown payment", func(t *testing.T, r *rail) {
			wantStatus(t, r.rzp("POST", "/v1/payments/pay_nope/refund", nil), 400)
		}},
		{"get refund both ways", func(t *testing.T, r *rail) {
			id := r.rzp("POST", pay+"/refund", map[string]any{"amount": 1}).str(t, "id")
			wantStatus(t, r.rzp("GET", "/v1/refunds/"+id, nil), 200)
			wantStatus(t, r.rzp("GET", pay+"/refunds/"+id, nil), 200)
			wantStatus(t, r.rzp("GET", "/v1/payments/pay_other/refunds/"+id, nil), 400)
		}},
		{"list refunds", func(t *testing.T, r *rail) {
			a := r.rzp("POST", pay+"/refund", map[string]any{"amount": 1}).str(t, "id")
			b := r.rzp("POST", pay+"/refund", map[string]any{"amount": 2}).str(t, "id")
			x := r.rzp("GET", pay+"/refunds", nil)
			wantStatus(t, x, 200)
			if x.str(t, "entity") != "collection" || x.num(t, "count") != 2 || fmt.Sprint(ids(t, x)) != fmt.Sprint([]string{b, a}) {
				t.Fatalf("collection: %s", x.body)
			}
			wantContains(t, r.rzp("GET", "/v1/payments/pay_29QQoUBi66xm2f/refunds?skip=5", nil), `"items":[]`)
			wantStatus(t, r.rzp("GET", pay+"/refunds?count=101", nil), 400)
			wantStatus(t, r.rzp("GET", pay+"/refunds?skip=-1", nil), 400)
		}},
		{"create payout", func(t *testing.T, r *rail) {
			x := r.rzp("POST", "/v1/payouts", payoutBody(10000, "reference_id", "ref-1", "notes", map[string]any{"countersign_sik": "S"}))
			wantStatus(t, x, 200)
			if x.str(t, "entity") != "payout" || x.str(t, "id") != "pout_00000000000001" || x.num(t, "amount") != 10000 ||
				x.str(t, "fund_account_id") != "fa_00000000000001" || x.str(t, "mode") != "IMPS" || x.str(t, "purpose") != "refund" ||
				x.str(t, "status") != "processing" || x.num(t, "fees") != 590 || x.num(t, "tax") != 90 ||
				x.str(t, "reference_id") != "ref-1" || x.str(t, "notes", "countersign_sik") != "S" {
				t.Fatalf("payout: %s", x.body)
			}
			wantStatus(t, r.rzp("GET", "/v1/payouts/pout_00000000000001", nil), 200)
		}},
		{"payout validation", func(t *testing.T, r *rail) {
			for _, b := range []map[string]any{
				payoutBody(0), payoutBody(1, "currency", "USD"), payoutBody(1, "mode", "TELEPORT"),
				payoutBody(1, "fund_account_id", "x"), payoutBody(1, "purpose", ""), payoutBody(1, "extra", 1),
			} {
				wantStatus(t, r.rzp("POST", "/v1/payouts", b), 400)
			}
			b := payoutBody(1)
			delete(b, "account_number")
			wantStatus(t, r.rzp("POST", "/v1/payouts", b), 400)
		}},
		{"list payouts", func(t *testing.T, r *rail) {
			a := r.rzp("POST", "/v1/payouts", payoutBody(100)).str(t, "id")
			b := r.rzp("POST", "/v1/payouts", payoutBody(200, "fund_account_id", "fa_00000000000002")).str(t, "id")
			x := r.rzp("GET", "/v1/payouts?account_number=7878780080316316", nil)
			if fmt.Sprint(ids(t, x)) != fmt.Sprint([]string{b, a}) {
				t.Fatalf("payouts: %s", x.body)
			}
			x = r.rzp("GET", "/v1/payouts?account_number=7878780080316316&fund_account_id=fa_00000000000002", nil)
			if fmt.Sprint(ids(t, x)) != fmt.Sprint([]string{b}) {
				t.Fatalf("payouts: %s", x.body)
			}
			if got := ids(t, r.rzp("GET", "/v1/payouts?account_number=1111", nil)); len(got) != 0 {
				t.Fatalf("other account number: %v", got)
			}
			wantStatus(t, r.rzp("GET", "/v1/payouts", nil), 400) // account_number is required
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRail(t, WithPayments(payINR))
			tc.run(t, r)
		})
	}
}

// Offset paging is not stable: a refund created between two page requests
// pushes every older refund one place down, so a naive walk sees one refund
// twice and never sees the new one. This is the trap the reconciler must
// handle (overlap pages and de-duplicate by id, then re-read the head).
func TestRazorpayOffsetPagingShiftsOnInsert(t *testing.T) {
	tests := []struct {
		name       string
		count      int
		total      int
		insertions int // refunds created after the first page
	}{
		{"one insert between pages of 10", 10, 25, 1},
		{"three inserts between pages of 4", 4, 11, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRail(t, WithPayments(payINR))
			pay := "/v1/payments/pay_29QQoUBi66xm2f"
			var created []string // oldest first
			for range tc.total {
				created = append(created, r.rzp("POST", pay+"/refund", map[string]any{"amount": 1}).str(t, "id"))
			}
			page := func(skip int) []string {
				x := r.rzp("GET", pay+"/refunds?count="+strconv.Itoa(tc.count)+"&skip="+strconv.Itoa(skip), nil)
				wantStatus(t, x, 200)
				return ids(t, x)
			}
			first := page(0)
			var inserted []string
			for range tc.insertions {
				inserted = append(inserted, r.rzp("POST", pay+"/refund", map[string]any{"amount": 1}).str(t, "id"))
			}
			second := page(tc.count)
			// The second page starts with the last insertions items of the
			// first page: the shift.
			overlap := first[len(first)-tc.insertions:]
			if fmt.Sprint(second[:tc.insertions]) != fmt.Sprint(overlap) {
				t.Fatalf("second page %v does not start with %v (first page %v)", second, overlap, first)
			}
			seen := map[string]int{}
			walk := append(append([]string{}, first...), second...)
			for skip := 2 * tc.count; ; skip += tc.count {
				p := page(skip)
				if len(p) == 0 {
					break
				}
				walk = append(walk, p...)
			}
			for _, id := range walk {
				seen[id]++
			}
			for _, id := range overlap {
				if seen[id] != 2 {
					t.Fatalf("%s seen %d times, want 2", id, seen[id])
				}
			}
			for _, id := range inserted {
				if seen[id] != 0 {
					t.Fatalf("inserted %s seen by the naive walk", id)
				}
			}
			for _, id := range created {
				if seen[id] == 0 {
					t.Fatalf("%s missed", id)
				}
			}
			// Stripe-style cursors would not have shifted; the de-duplicated
			// walk plus a re-read of the head finds everything exactly once.
			head := page(0)
			for _, id := range head {
				seen[id]++
			}
			for _, id := range inserted {
				if seen[id] != 1 {
					t.Fatalf("re-reading the head should find %s", id)
				}
			}
		})
	}
}
