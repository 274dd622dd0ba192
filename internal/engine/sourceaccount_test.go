package engine

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/razorpay"
	"github.com/countersign/countersign/internal/rails"
	"github.com/countersign/countersign/internal/sik"
	"github.com/countersign/countersign/internal/testing/mockrail"
)

// withPayoutAccounts is r's engine over its RazorpayX account (rzp_1)
// loaded again with payout_account_numbers set to numbers.
func withPayoutAccounts(t *testing.T, r *rig, numbers ...string) *Engine {
	t.Helper()
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte(mockrail.DefaultRazorpayKeyID+":"+mockrail.DefaultRazorpayKeySecret), 0o600); err != nil {
		t.Fatal(err)
	}
	rs, err := rails.New(rails.File{Rails: []rails.AccountConfig{{Account: "rzp_1", Rail: "razorpay", Hosts: []string{"api.razorpay.com"},
		BaseURL: r.railURL, KeyFile: key, PayoutAccountNumbers: numbers}}},
		rails.Adapters{sik.RailRazorpay: func() rail.Adapter { return razorpay.New() }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rebuilt(r.e, func(o *Options) { o.Rails = rs })
}

// fromAccount is r's RazorpayX payout with its account_number replaced.
func fromAccount(r *rig, number string) Request {
	req := r.razorpayPayout(`"payout"`, "")
	req.Body = []byte(strings.Replace(string(req.Body), `"account_number":"7878780080316316"`, `"account_number":"`+number+`"`, 1))
	return req
}

// TestPayoutSourceAccount: with payout_account_numbers set on a RazorpayX
// account, a payout whose account_number (the business account the money
// leaves from, chosen by the agent) is not listed is refused before any
// rail read and leaves no intent, without naming the listed accounts or
// echoing what was sent; a listed one is decided as before. Without the
// list, any account number is taken, as before.
func TestPayoutSourceAccount(t *testing.T) {
	ctx := context.Background()
	r := newRazorpayRig(t)
	e := withPayoutAccounts(t, r, "7878780080316316", "2323230041626905")

	for _, number := range []string{"1111222233334444", "acc_7878780080316316", "78787800803163160", "4111111111111111"} {
		t.Run("unlisted "+number, func(t *testing.T) {
			before := len(r.mock.Journal().Requests)
			out := e.Decide(ctx, fromAccount(r, number))
			expect(t, out, Block, ReasonSourceAccountNotAllowed)
			if out.Intent != nil {
				t.Fatalf("the refusal left intent %+v", out.Intent)
			}
			if n := len(r.mock.Journal().Requests); n != before {
				t.Fatalf("the rail received %d requests for a refused payout; want none", n-before)
			}
			if !strings.Contains(out.Reason, "2 RazorpayX accounts") || !strings.Contains(out.Reason, "rzp_1") {
				t.Errorf("reason %q does not say how many accounts rzp_1 allows", out.Reason)
			}
			for _, leak := range []string{number, "7878780080316316", "2323230041626905"} {
				if strings.Contains(out.Reason, leak) || strings.Contains(string(out.Body), leak) {
					t.Errorf("refusal %q / %s names %s", out.Reason, out.Body, leak)
				}
			}
			if !strings.Contains(string(out.Body), ReasonSourceAccountNotAllowed) {
				t.Errorf("body %s is not a Razorpay-shaped refusal with the reason code", out.Body)
			}
		})
	}
	t.Run("listed", func(t *testing.T) {
		expect(t, e.Decide(ctx, fromAccount(r, "2323230041626905")), Allow, ReasonAllowed)
	})
	t.Run("unset", func(t *testing.T) {
		expect(t, r.e.Decide(ctx, fromAccount(r, "5555666677778888")), Allow, ReasonAllowed)
	})
}

// TestPayoutListSourceAccount: with payout_account_numbers set, a payout
// list (GET /v1/payouts, whose account_number Razorpay requires) of an
// account not listed is refused before it reaches the rail; a listed one
// is read with the account's key. Without the list any account is read,
// as a payout from any account is made.
func TestPayoutListSourceAccount(t *testing.T) {
	ctx := context.Background()
	r := newRazorpayRig(t)
	e := withPayoutAccounts(t, r, "7878780080316316")
	list := func(number string) Request {
		return Request{Source: SourceExtAuthz, RequestID: "req", Credential: r.secret, Method: "GET", Host: "api.razorpay.com",
			Path: "/v1/payouts?count=10&account_number=" + number}
	}
	for _, number := range []string{"1111222233334444", "78787800803163160"} {
		out := e.Decide(ctx, list(number))
		expect(t, out, Block, ReasonSourceAccountNotAllowed)
		if strings.Contains(out.Reason, number) || strings.Contains(out.Reason, "7878780080316316") {
			t.Errorf("refusal %q names an account number", out.Reason)
		}
	}
	out := e.Decide(ctx, list("7878780080316316"))
	expect(t, out, Allow, ReasonReadAllowed)
	if out.SetHeaders["authorization"] == "" {
		t.Error("the listed account's read leaves without the account's key")
	}
	expect(t, r.e.Decide(ctx, list("5555666677778888")), Allow, ReasonReadAllowed)
}
