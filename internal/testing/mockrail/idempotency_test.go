package mockrail

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

// keyedEndpoint is a money-moving endpoint; every idempotency behaviour is
// checked against each of them.
type keyedEndpoint struct {
	name string
	rail Rail
	req  func(key string, amount int64) (method, path string, body []byte, hdr http.Header)
}

var keyedEndpoints = []keyedEndpoint{
	{"stripe refund", Stripe, func(key string, amount int64) (string, string, []byte, http.Header) {
		return "POST", "/v1/refunds", []byte(form("payment_intent", "pi_1001", "amount", strconv.FormatInt(amount, 10)).Encode()), stripeHeader(DefaultStripeKey, key)
	}},
	{"stripe payout", Stripe, func(key string, amount int64) (string, string, []byte, http.Header) {
		return "POST", "/v1/payouts", []byte(form("amount", strconv.FormatInt(amount, 10), "currency", "usd").Encode()), stripeHeader(DefaultStripeKey, key)
	}},
	{"stripe transfer", Stripe, func(key string, amount int64) (string, string, []byte, http.Header) {
		return "POST", "/v1/transfers", []byte(form("amount", strconv.FormatInt(amount, 10), "currency", "usd", "destination", "acct_A").Encode()), stripeHeader(DefaultStripeKey, key)
	}},
	{"razorpay refund", Razorpay, func(key string, amount int64) (string, string, []byte, http.Header) {
		return "POST", "/v1/payments/pay_29QQoUBi66xm2f/refund", mustJSON(map[string]any{"amount": amount}),
			rzpHeader(DefaultRazorpayKeyID, DefaultRazorpayKeySecret, "X-Refund-Idempotency", key)
	}},
	{"razorpayx payout", Razorpay, func(key string, amount int64) (string, string, []byte, http.Header) {
		return "POST", "/v1/payouts", mustJSON(payoutBody(amount)),
			rzpHeader(DefaultRazorpayKeyID, DefaultRazorpayKeySecret, "X-Payout-Idempotency", key)
	}},
}

func (r *rail) keyed(ep keyedEndpoint, key string, amount int64) resp {
	r.t.Helper()
	m, p, b, h := ep.req(key, amount)
	return r.must(m, p, b, h)
}

func effectsWithKey(r *rail, key string) int { return len(r.srv.Journal().EffectsWithKey(key)) }

func outcomes(r *rail) []Outcome {
	var out []Outcome
	for _, q := range r.srv.Journal().Requests {
		out = append(out, q.Outcome)
	}
	return out
}

const key1 = "cs-key-0000000001"

func TestIdempotency(t *testing.T) {
	behaviours := []struct {
		name string
		run  func(t *testing.T, r *rail, ep keyedEndpoint)
	}{
		{"same key and parameters replay the first response", func(t *testing.T, r *rail, ep keyedEndpoint) {
			a := r.keyed(ep, key1, 100)
			wantStatus(t, a, 200)
			b := r.keyed(ep, key1, 100)
			wantStatus(t, b, 200)
			if !bytes.Equal(a.body, b.body) {
				t.Fatalf("replay differs:\n%s\n%s", a.body, b.body)
			}
			if b.header.Get("X-Mockrail-Replayed") != "true" || a.header.Get("X-Mockrail-Replayed") != "" {
				t.Fatal("replay header wrong")
			}
			if ep.rail == Stripe && b.header.Get("Idempotent-Replayed") != "true" {
				t.Fatal("Stripe replay lacks Idempotent-Replayed")
			}
			if n := effectsWithKey(r, key1); n != 1 {
				t.Fatalf("%d effects, want 1", n)
			}
			if got := outcomes(r); len(got) != 2 || got[0] != OutcomeApplied || got[1] != OutcomeReplayed {
				t.Fatalf("outcomes %v", got)
			}
		}},
		{"same key with different parameters is an error", func(t *testing.T, r *rail, ep keyedEndpoint) {
			wantStatus(t, r.keyed(ep, key1, 100), 200)
			x := r.keyed(ep, key1, 101)
			wantStatus(t, x, 400)
			if ep.rail == Stripe && x.str(t, "error", "type") != "idempotency_error" {
				t.Fatalf("error: %s", x.body)
			}
			if ep.rail == Razorpay {
				if x.str(t, "error", "code") != "BAD_REQUEST_ERROR" {
					t.Fatalf("error: %s", x.body)
				}
				wantContains(t, x, "Different request with the same idempotency key")
			}
			if n := effectsWithKey(r, key1); n != 1 {
				t.Fatalf("%d effects, want 1", n)
			}
			if got := outcomes(r); got[1] != OutcomeKeyMismatch {
				t.Fatalf("outcomes %v", got)
			}
		}},
		{"requests without a key are never deduplicated", func(t *testing.T, r *rail, ep keyedEndpoint) {
			wantStatus(t, r.keyed(ep, "", 100), 200)
			wantStatus(t, r.keyed(ep, "", 100), 200)
			if n := len(r.srv.Journal().Effects); n != 2 {
				t.Fatalf("%d effects, want 2", n)
			}
		}},
		{"different keys are different requests", func(t *testing.T, r *rail, ep keyedEndpoint) {
			wantStatus(t, r.keyed(ep, key1, 100), 200)
			wantStatus(t, r.keyed(ep, key1+"b", 100), 200)
			if n := len(r.srv.Journal().Effects); n != 2 {
				t.Fatalf("%d effects, want 2", n)
			}
		}},
		{"a key is forgotten after the TTL", func(t *testing.T, r *rail, ep keyedEndpoint) {
			wantStatus(t, r.keyed(ep, key1, 100), 200)
			r.clock.Advance(DefaultIdempotencyTTL - time.Second)
			r.keyed(ep, key1, 100)
			if n := effectsWithKey(r, key1); n != 1 {
				t.Fatalf("inside the TTL: %d effects, want 1", n)
			}
			r.clock.Advance(time.Second)
			wantStatus(t, r.keyed(ep, key1, 100), 200)
			if n := effectsWithKey(r, key1); n != 2 {
				t.Fatalf("after the TTL: %d effects, want 2", n)
			}
		}},
		{"a validation error is not saved under the key", func(t *testing.T, r *rail, ep keyedEndpoint) {
			wantStatus(t, r.keyed(ep, key1, -5), 400)
			wantStatus(t, r.keyed(ep, key1, 100), 200)
			if got := outcomes(r); got[0] != OutcomeInvalid || got[1] != OutcomeApplied {
				t.Fatalf("outcomes %v", got)
			}
		}},
	}
	for _, ep := range keyedEndpoints {
		for _, b := range behaviours {
			t.Run(ep.name+"/"+b.name, func(t *testing.T) {
				r := newRail(t, WithPayments(piUSD, payINR))
				b.run(t, r, ep)
			})
		}
	}
}

// A second request with the key of one still running gets 409 and applies
// nothing. The first is held at StageBeforeApply by the hook, so there is no
// race and no sleep.
func TestIdempotencyConcurrentKeyInUse(t *testing.T) {
	for _, ep := range keyedEndpoints {
		t.Run(ep.name, func(t *testing.T) {
			entered, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			hook := func(ctx context.Context, ev HookEvent) {
				if ev.Stage != StageBeforeApply || ev.IdempotencyKey != key1 {
					return
				}
				first := false
				once.Do(func() { first = true })
				if !first {
					return
				}
				close(entered)
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			r := newRail(t, WithPayments(piUSD, payINR), WithHook(hook))
			var releaseOnce sync.Once
			unblock := func() { releaseOnce.Do(func() { close(release) }) }
			t.Cleanup(unblock) // a failing test must not leave the first request held
			type got struct {
				x   resp
				err error
			}
			done := make(chan got, 1)
			go func() {
				m, p, b, h := ep.req(key1, 100)
				x, err := r.send(context.Background(), m, p, b, h)
				done <- got{x, err}
			}()
			<-entered
			x := r.keyed(ep, key1, 100)
			wantStatus(t, x, 409)
			if ep.rail == Stripe && x.str(t, "error", "code") != "idempotency_key_in_use" {
				t.Fatalf("error: %s", x.body)
			}
			if n := len(r.srv.Journal().Effects); n != 0 {
				t.Fatalf("%d effects while the first is held, want 0", n)
			}
			unblock()
			first := <-done
			if first.err != nil {
				t.Fatal(first.err)
			}
			wantStatus(t, first.x, 200)
			third := r.keyed(ep, key1, 100)
			wantStatus(t, third, 200)
			if !bytes.Equal(first.x.body, third.body) {
				t.Fatal("after the first finished, the key should replay it")
			}
			if n := effectsWithKey(r, key1); n != 1 {
				t.Fatalf("%d effects, want 1", n)
			}
			if got := outcomes(r); len(got) != 3 || got[0] != OutcomeInProgress || got[1] != OutcomeApplied || got[2] != OutcomeReplayed {
				t.Fatalf("outcomes %v", got)
			}
		})
	}
}

// Business rejections happen after execution begins, so Stripe and Razorpay
// save them under the key: the same key keeps answering 400 even once the
// request would succeed.
func TestIdempotencySavesRejections(t *testing.T) {
	tests := []struct {
		name string
		ep   keyedEndpoint
		big  int64
	}{
		{"stripe over-refund", keyedEndpoints[0], 6000},
		{"razorpay over-refund", keyedEndpoints[3], 60000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRail(t, WithPayments(piUSD, payINR))
			a := r.keyed(tc.ep, key1, tc.big)
			wantStatus(t, a, 400)
			b := r.keyed(tc.ep, key1, tc.big)
			wantStatus(t, b, 400)
			if !bytes.Equal(a.body, b.body) || b.header.Get("X-Mockrail-Replayed") != "true" {
				t.Fatalf("rejection not replayed: %s", b.body)
			}
			if got := outcomes(r); got[0] != OutcomeRejected || got[1] != OutcomeReplayed {
				t.Fatalf("outcomes %v", got)
			}
		})
	}
}

func TestIdempotencyScope(t *testing.T) {
	second := Account{Name: "stripe_b", Rail: Stripe, SecretKey: "sk_test_second_account"}
	tests := []struct {
		name    string
		run     func(r *rail) (resp, resp)
		effects int
	}{
		{"same key on two Stripe accounts", func(r *rail) (resp, resp) {
			f := []byte(form("amount", "100", "currency", "usd").Encode())
			return r.must("POST", "/v1/payouts", f, stripeHeader(DefaultStripeKey, key1)),
				r.must("POST", "/v1/payouts", f, stripeHeader(second.SecretKey, key1))
		}, 2},
		{"same Stripe key on another endpoint", func(r *rail) (resp, resp) {
			return r.keyed(keyedEndpoints[1], key1, 100), r.keyed(keyedEndpoints[2], key1, 100)
		}, 1},
		{"same key as refund and payout idempotency on Razorpay", func(r *rail) (resp, resp) {
			return r.keyed(keyedEndpoints[3], key1, 100), r.keyed(keyedEndpoints[4], key1, 100)
		}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pi := piUSD
			pi.Account = DefaultStripeAccount
			r := newRail(t, WithAccounts(append(DefaultAccounts(), second)...), WithPayments(pi, payINR))
			a, b := tc.run(r)
			wantStatus(t, a, 200)
			if tc.effects == 2 {
				wantStatus(t, b, 200)
			} else {
				wantStatus(t, b, 400)
				if b.str(t, "error", "type") != "idempotency_error" {
					t.Fatalf("error: %s", b.body)
				}
			}
			if n := effectsWithKey(r, key1); n != tc.effects {
				t.Fatalf("%d effects, want %d", n, tc.effects)
			}
		})
	}
}

func TestIdempotencyKeyFormat(t *testing.T) {
	tests := []struct {
		name   string
		ep     keyedEndpoint
		key    string
		status int
	}{
		{"stripe key of 255 characters", keyedEndpoints[0], string(bytes.Repeat([]byte("k"), 255)), 200},
		{"stripe key of 256 characters", keyedEndpoints[0], string(bytes.Repeat([]byte("k"), 256)), 400},
		{"razorpay refund key of 9 characters", keyedEndpoints[3], "123456789", 400},
		{"razorpay refund key with a dot", keyedEndpoints[3], "1234567890.", 400},
		{"razorpay refund key of 10 characters", keyedEndpoints[3], "1234567890", 200},
		{"razorpayx payout key of 3 characters", keyedEndpoints[4], "abc", 400},
		{"razorpayx payout key of 37 characters", keyedEndpoints[4], string(bytes.Repeat([]byte("k"), 37)), 400},
		{"razorpayx payout key of 36 characters", keyedEndpoints[4], string(bytes.Repeat([]byte("k"), 36)), 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRail(t, WithPayments(piUSD, payINR))
			wantStatus(t, r.keyed(tc.ep, tc.key, 100), tc.status)
		})
	}
}
