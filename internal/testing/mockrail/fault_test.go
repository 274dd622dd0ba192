package mockrail

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

type sent struct {
	x   resp
	err error
}

// sendAsync sends a keyed request on another goroutine.
func (r *rail) sendAsync(ctx context.Context, ep keyedEndpoint, key string, amount int64) <-chan sent {
	ch := make(chan sent, 1)
	m, p, b, h := ep.req(key, amount)
	go func() {
		x, err := r.send(ctx, m, p, b, h)
		ch <- sent{x, err}
	}()
	return ch
}

func lastRequest(r *rail) RequestRecord {
	rs := r.srv.Journal().Requests
	return rs[len(rs)-1]
}

// signalAt returns a hook that closes the returned channel the first time a
// request reaches stage with fault f.
func signalAt(stage Stage, f Profile) (Hook, <-chan struct{}) {
	ch := make(chan struct{})
	var once sync.Once
	return func(ctx context.Context, ev HookEvent) {
		if ev.Stage == stage && ev.Fault == f {
			once.Do(func() { close(ch) })
		}
	}, ch
}

// timeout_after_apply: the effect happens and is journaled, the client gets
// no answer at all, and the saved response (the real one) replays.
func TestFaultTimeoutAfterApply(t *testing.T) {
	ends := []struct {
		name  string
		delay Duration
		end   func(t *testing.T, r *rail, cancel context.CancelFunc)
	}{
		{"client gives up", 0, func(t *testing.T, r *rail, cancel context.CancelFunc) { cancel() }},
		{"configured delay passes", Duration(5 * time.Second), func(t *testing.T, r *rail, cancel context.CancelFunc) {
			if err := r.clock.WaitForTimers(waitCtx(t), 1); err != nil {
				t.Fatal(err)
			}
			r.clock.Advance(5 * time.Second)
		}},
		{"server closes", 0, func(t *testing.T, r *rail, cancel context.CancelFunc) { r.srv.Close() }},
	}
	for _, ep := range keyedEndpoints {
		for _, end := range ends {
			t.Run(ep.name+"/"+end.name, func(t *testing.T) {
				hook, applied := signalAt(StageAfterApply, FaultTimeoutAfterApply)
				r := newRail(t, WithPayments(piUSD, payINR), WithHook(hook),
					WithFaults(Fault{Profile: FaultTimeoutAfterApply, Count: 1, Delay: end.delay}))
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := r.sendAsync(ctx, ep, key1, 100)
				<-applied
				j := r.srv.Journal()
				if len(j.Effects) != 1 {
					t.Fatalf("%d effects before the client gave up, want 1", len(j.Effects))
				}
				if q := j.Requests[0]; q.Status != 0 || q.Outcome != OutcomeApplied || q.Fault != FaultTimeoutAfterApply || q.EntityID != j.Effects[0].EntityID {
					t.Fatalf("request record %+v", q)
				}
				end.end(t, r, cancel)
				got := <-done
				if got.err == nil {
					t.Fatalf("client got an answer: %d %s", got.x.status, got.x.body)
				}
				replay := r.keyed(ep, key1, 100)
				wantStatus(t, replay, 200)
				if replay.str(t, "id") != j.Effects[0].EntityID {
					t.Fatalf("replay answers %s, effect is %s", replay.str(t, "id"), j.Effects[0].EntityID)
				}
				if n := len(r.srv.Journal().Effects); n != 1 {
					t.Fatalf("%d effects, want 1", n)
				}
			})
		}
	}
}

// reset_before_apply: the connection dies, nothing is applied and the key is
// free again.
func TestFaultResetBeforeApply(t *testing.T) {
	for _, ep := range keyedEndpoints {
		t.Run(ep.name, func(t *testing.T) {
			r := newRail(t, WithPayments(piUSD, payINR), WithFaults(Fault{Profile: FaultResetBeforeApply, Count: 1}))
			m, p, b, h := ep.req(key1, 100)
			_, err := r.send(context.Background(), m, p, b, h)
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("client error %v, want a connection reset", err)
			}
			j := r.srv.Journal()
			if len(j.Effects) != 0 {
				t.Fatalf("%d effects, want 0", len(j.Effects))
			}
			if q := j.Requests[0]; q.Outcome != OutcomeReset || q.Status != 0 || q.Fault != FaultResetBeforeApply {
				t.Fatalf("request record %+v", q)
			}
			wantStatus(t, r.keyed(ep, key1, 100), 200)
			if got := outcomes(r); got[1] != OutcomeApplied {
				t.Fatalf("retry with the same key should apply, outcomes %v", got)
			}
			if n := len(r.srv.Journal().Effects); n != 1 {
				t.Fatalf("%d effects, want 1", n)
			}
		})
	}
}

// 5xx_after_apply: the effect happens, the client sees 500, and a replay of
// the key returns that saved 500 while a keyless retry would apply again.
func TestFault5xxAfterApply(t *testing.T) {
	for _, ep := range keyedEndpoints {
		t.Run(ep.name, func(t *testing.T) {
			r := newRail(t, WithPayments(piUSD, payINR), WithFaults(Fault{Profile: Fault5xxAfterApply, Count: 1}))
			a := r.keyed(ep, key1, 100)
			wantStatus(t, a, 500)
			if ep.rail == Stripe && a.str(t, "error", "type") != "api_error" {
				t.Fatalf("error: %s", a.body)
			}
			if ep.rail == Razorpay && a.str(t, "error", "code") != "SERVER_ERROR" {
				t.Fatalf("error: %s", a.body)
			}
			if n := effectsWithKey(r, key1); n != 1 {
				t.Fatalf("%d effects, want 1", n)
			}
			if q := lastRequest(r); q.Status != 500 || q.Outcome != OutcomeApplied || q.Fault != Fault5xxAfterApply {
				t.Fatalf("request record %+v", q)
			}
			b := r.keyed(ep, key1, 100)
			wantStatus(t, b, 500)
			if !bytes.Equal(a.body, b.body) || b.header.Get("X-Mockrail-Replayed") != "true" {
				t.Fatalf("saved 500 not replayed: %s", b.body)
			}
			if n := len(r.srv.Journal().Effects); n != 1 {
				t.Fatalf("%d effects after the replay, want 1", n)
			}
			wantStatus(t, r.keyed(ep, "", 100), 200)
			if n := len(r.srv.Journal().Effects); n != 2 {
				t.Fatalf("a keyless retry is a second effect: %d effects, want 2", n)
			}
		})
	}
}

// decline_before_apply: a definite refusal, nothing applied, the refusal
// saved under the key (a retry with the key gets it again), and a new key
// applies.
func TestFaultDeclineBeforeApply(t *testing.T) {
	for _, ep := range keyedEndpoints {
		t.Run(ep.name, func(t *testing.T) {
			r := newRail(t, WithPayments(piUSD, payINR), WithFaults(Fault{Profile: FaultDeclineBeforeApply, Count: 1}))
			a := r.keyed(ep, key1, 100)
			want := 402
			if ep.rail == Razorpay {
				want = 400
			}
			wantStatus(t, a, want)
			if ep.rail == Stripe && a.str(t, "error", "code") != "card_declined" {
				t.Fatalf("error: %s", a.body)
			}
			if ep.rail == Razorpay && a.str(t, "error", "code") != "BAD_REQUEST_ERROR" {
				t.Fatalf("error: %s", a.body)
			}
			if n := len(r.srv.Journal().Effects); n != 0 {
				t.Fatalf("%d effects after a decline, want none", n)
			}
			if q := lastRequest(r); q.Outcome != OutcomeRejected || q.Fault != FaultDeclineBeforeApply {
				t.Fatalf("request record %+v", q)
			}
			b := r.keyed(ep, key1, 100)
			wantStatus(t, b, want)
			if !bytes.Equal(a.body, b.body) || b.header.Get("X-Mockrail-Replayed") != "true" {
				t.Fatalf("saved refusal not replayed: %s", b.body)
			}
			wantStatus(t, r.keyed(ep, "", 100), 200)
			if n := len(r.srv.Journal().Effects); n != 1 {
				t.Fatalf("%d effects after a fresh request, want 1", n)
			}
		})
	}
}

// replay_other: the effect happens but the body answered is an earlier
// entity's; the key saves the true response.
func TestFaultReplayOther(t *testing.T) {
	for _, ep := range keyedEndpoints {
		t.Run(ep.name, func(t *testing.T) {
			r := newRail(t, WithPayments(piUSD, payINR))
			earlier := r.keyed(ep, "", 10)
			wantStatus(t, earlier, 200)
			if err := r.srv.SetFaults(Fault{Profile: FaultReplayOther, Count: 1}); err != nil {
				t.Fatal(err)
			}
			x := r.keyed(ep, key1, 100)
			wantStatus(t, x, 200)
			if !bytes.Equal(x.body, earlier.body) {
				t.Fatalf("answered %s, want the earlier entity %s", x.body, earlier.body)
			}
			effs := r.srv.Journal().EffectsWithKey(key1)
			if len(effs) != 1 || effs[0].EntityID == earlier.str(t, "id") || effs[0].Amount != 100 {
				t.Fatalf("effects %+v", effs)
			}
			truth := r.keyed(ep, key1, 100)
			if truth.str(t, "id") != effs[0].EntityID || truth.num(t, "amount") != 100 {
				t.Fatalf("replay answers %s, want the true entity %s", truth.body, effs[0].EntityID)
			}
		})
	}
	t.Run("a read answers another payment", func(t *testing.T) {
		r := newRail(t, WithPayments(piUSD, Payment{Rail: Stripe, ID: "pi_other", Amount: 1, Currency: "usd"}),
			WithFaults(Fault{Profile: FaultReplayOther, Method: "GET", Count: 1}))
		x := r.stripe("GET", "/v1/payment_intents/pi_1001", nil, "")
		if x.str(t, "id") != "pi_other" {
			t.Fatalf("answered %s", x.body)
		}
		if x := r.stripe("GET", "/v1/payment_intents/pi_1001", nil, ""); x.str(t, "id") != "pi_1001" {
			t.Fatalf("count 1 should be spent: %s", x.body)
		}
	})
}

// replica_lag: lists hide what is younger than the lag; reads by id do not.
func TestFaultReplicaLag(t *testing.T) {
	tests := []struct {
		name   string
		create func(r *rail) string
		list   func(r *rail) resp
		get    func(r *rail, id string) resp
	}{
		{"stripe refunds",
			func(r *rail) string {
				return r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_1001", "amount", "1"), "").str(r.t, "id")
			},
			func(r *rail) resp { return r.stripe("GET", "/v1/refunds", form("payment_intent", "pi_1001"), "") },
			func(r *rail, id string) resp { return r.stripe("GET", "/v1/refunds/"+id, nil, "") }},
		{"stripe payouts",
			func(r *rail) string {
				return r.stripe("POST", "/v1/payouts", form("amount", "1", "currency", "usd"), "").str(r.t, "id")
			},
			func(r *rail) resp { return r.stripe("GET", "/v1/payouts", nil, "") },
			func(r *rail, id string) resp { return r.stripe("GET", "/v1/payouts/"+id, nil, "") }},
		{"razorpay refunds",
			func(r *rail) string {
				return r.rzp("POST", "/v1/payments/pay_29QQoUBi66xm2f/refund", map[string]any{"amount": 1}).str(r.t, "id")
			},
			func(r *rail) resp { return r.rzp("GET", "/v1/payments/pay_29QQoUBi66xm2f/refunds", nil) },
			func(r *rail, id string) resp { return r.rzp("GET", "/v1/refunds/"+id, nil) }},
		{"razorpayx payouts",
			func(r *rail) string { return r.rzp("POST", "/v1/payouts", payoutBody(100)).str(r.t, "id") },
			func(r *rail) resp { return r.rzp("GET", "/v1/payouts?account_number=7878780080316316", nil) },
			func(r *rail, id string) resp { return r.rzp("GET", "/v1/payouts/"+id, nil) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRail(t, WithPayments(piUSD, payINR), WithFaults(Fault{Profile: FaultReplicaLag}))
			id := tc.create(r)
			if got := ids(t, tc.list(r)); len(got) != 0 {
				t.Fatalf("listed %v inside the lag", got)
			}
			wantStatus(t, tc.get(r, id), 200)
			r.clock.Advance(DefaultReplicaLag - time.Millisecond)
			if got := ids(t, tc.list(r)); len(got) != 0 {
				t.Fatalf("listed %v inside the lag", got)
			}
			r.clock.Advance(time.Millisecond)
			if got := ids(t, tc.list(r)); len(got) != 1 || got[0] != id {
				t.Fatalf("listed %v after the lag, want [%s]", got, id)
			}
			if q := lastRequest(r); q.Fault != FaultReplicaLag {
				t.Fatalf("request record %+v", q)
			}
		})
	}
	t.Run("configured delay and count", func(t *testing.T) {
		r := newRail(t, WithPayments(piUSD), WithFaults(Fault{Profile: FaultReplicaLag, Delay: Duration(time.Minute), Count: 1}))
		r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_1001", "amount", "1"), "")
		r.clock.Advance(30 * time.Second)
		if got := ids(t, r.stripe("GET", "/v1/refunds", nil, "")); len(got) != 0 {
			t.Fatalf("listed %v inside the lag", got)
		}
		if got := ids(t, r.stripe("GET", "/v1/refunds", nil, "")); len(got) != 1 {
			t.Fatalf("count 1 should be spent, listed %v", got)
		}
	})
}

// slow: nothing happens until the delay passes, and the key stays in use.
func TestFaultSlow(t *testing.T) {
	for _, ep := range keyedEndpoints {
		t.Run(ep.name, func(t *testing.T) {
			r := newRail(t, WithPayments(piUSD, payINR), WithFaults(Fault{Profile: FaultSlow, Delay: Duration(3 * time.Second), Count: 1}))
			done := r.sendAsync(context.Background(), ep, key1, 100)
			if err := r.clock.WaitForTimers(waitCtx(t), 1); err != nil {
				t.Fatal(err)
			}
			wantStatus(t, r.keyed(ep, key1, 100), 409)
			if n := len(r.srv.Journal().Effects); n != 0 {
				t.Fatalf("%d effects during the delay, want 0", n)
			}
			r.clock.Advance(3 * time.Second)
			got := <-done
			if got.err != nil {
				t.Fatal(got.err)
			}
			wantStatus(t, got.x, 200)
			if q := lastRequest(r); q.Fault != FaultSlow || q.Outcome != OutcomeApplied {
				t.Fatalf("request record %+v", q)
			}
		})
	}
	t.Run("reads are slowed too", func(t *testing.T) {
		r := newRail(t, WithPayments(piUSD), WithFaults(Fault{Profile: FaultSlow}))
		ch := make(chan sent, 1)
		go func() {
			x, err := r.send(context.Background(), "GET", "/v1/payment_intents/pi_1001", nil, stripeHeader(DefaultStripeKey, ""))
			ch <- sent{x, err}
		}()
		if err := r.clock.WaitForTimers(waitCtx(t), 1); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-ch:
			t.Fatalf("answered before the delay: %v %s", got.err, got.x.body)
		default:
		}
		r.clock.Advance(DefaultSlowDelay)
		if got := <-ch; got.err != nil || got.x.status != 200 {
			t.Fatalf("after the delay: %v %d", got.err, got.x.status)
		}
	})
}

// Which requests a rule matches and consumes.
func TestFaultMatching(t *testing.T) {
	refund := func(r *rail, key string) resp {
		return r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_1001", "amount", "1"), key)
	}
	payout := func(r *rail) resp { return r.stripe("POST", "/v1/payouts", form("amount", "1", "currency", "usd"), "") }
	get := func(r *rail) resp { return r.stripe("GET", "/v1/payment_intents/pi_1001", nil, "") }
	rzpRefund := func(r *rail) resp {
		return r.rzp("POST", "/v1/payments/pay_29QQoUBi66xm2f/refund", map[string]any{"amount": 1})
	}
	tests := []struct {
		name  string
		rules []Fault
		steps []func(r *rail) resp
		want  []int
		left  int // rules left afterwards
	}{
		{"count 1 hits the next POST only", []Fault{{Profile: Fault5xxAfterApply, Count: 1}},
			[]func(*rail) resp{func(r *rail) resp { return refund(r, "") }, func(r *rail) resp { return refund(r, "") }}, []int{500, 200}, 0},
		{"no count hits every POST", []Fault{{Profile: Fault5xxAfterApply}},
			[]func(*rail) resp{func(r *rail) resp { return refund(r, "") }, payout}, []int{500, 500}, 1},
		{"GETs do not match apply faults by default", []Fault{{Profile: Fault5xxAfterApply, Count: 1}},
			[]func(*rail) resp{get, payout}, []int{200, 500}, 0},
		{"an explicit method matches GETs", []Fault{{Profile: Fault5xxAfterApply, Method: "get", Count: 1}},
			[]func(*rail) resp{payout, get, get}, []int{200, 500, 200}, 0},
		{"rail filter", []Fault{{Profile: Fault5xxAfterApply, Rail: Razorpay, Count: 1}},
			[]func(*rail) resp{func(r *rail) resp { return refund(r, "") }, rzpRefund}, []int{200, 500}, 0},
		{"path filter", []Fault{{Profile: Fault5xxAfterApply, Path: "/v1/payouts", Count: 1}},
			[]func(*rail) resp{func(r *rail) resp { return refund(r, "") }, payout}, []int{200, 500}, 0},
		{"path pattern", []Fault{{Profile: Fault5xxAfterApply, Path: "/v1/payments/*/refund", Count: 1}},
			[]func(*rail) resp{func(r *rail) resp { return refund(r, "") }, rzpRefund}, []int{200, 500}, 0},
		{"a replay does not consume the rule", []Fault{},
			[]func(*rail) resp{
				func(r *rail) resp { return refund(r, key1) },
				func(r *rail) resp {
					if err := r.srv.SetFaults(Fault{Profile: Fault5xxAfterApply, Count: 1}); err != nil {
						r.t.Fatal(err)
					}
					return refund(r, key1)
				},
				func(r *rail) resp { return refund(r, "") },
			}, []int{200, 200, 500}, 0},
		{"the first matching rule wins", []Fault{{Profile: Fault5xxAfterApply, Path: "/v1/payouts", Count: 1}, {Profile: FaultReplayOther, Count: 1}},
			[]func(*rail) resp{payout, payout}, []int{500, 200}, 0},
		{"none clears", []Fault{{Profile: FaultNone}},
			[]func(*rail) resp{payout}, []int{200}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRail(t, WithPayments(piUSD, payINR), WithFaults(tc.rules...))
			for i, step := range tc.steps {
				if x := step(r); x.status != tc.want[i] {
					t.Fatalf("step %d: status %d, want %d: %s", i, x.status, tc.want[i], x.body)
				}
			}
			if left := r.srv.Faults(); len(left) != tc.left {
				t.Fatalf("rules left %+v, want %d", left, tc.left)
			}
		})
	}
}

func TestParseFault(t *testing.T) {
	tests := []struct {
		in   string
		want Fault
		err  string
	}{
		{in: "none", want: Fault{Profile: FaultNone}},
		{in: "5xx_after_apply", want: Fault{Profile: Fault5xxAfterApply}},
		{in: "5xx_after_apply:count=1,path=/v1/refunds", want: Fault{Profile: Fault5xxAfterApply, Count: 1, Path: "/v1/refunds"}},
		{in: " replica_lag : delay=3s ", want: Fault{Profile: FaultReplicaLag, Delay: Duration(3 * time.Second)}},
		{in: "slow:delay=250ms,rail=razorpay,method=get", want: Fault{Profile: FaultSlow, Delay: Duration(250 * time.Millisecond), Rail: Razorpay, Method: "GET"}},
		{in: "explode", err: "unknown profile"},
		{in: "slow:delay=fast", err: "delay"},
		{in: "slow:count=-1", err: "count must be"},
		{in: "slow:speed=1", err: "unknown key"},
		{in: "slow:count", err: "not key=value"},
		{in: "slow:rail=paypal", err: "unknown rail"},
		{in: "slow:path=[", err: "bad path pattern"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseFault(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	fs, err := ParseFaults("replica_lag; 5xx_after_apply:count=2;")
	if err != nil || len(fs) != 2 || fs[1].Count != 2 {
		t.Fatalf("ParseFaults: %+v, %v", fs, err)
	}
	if _, err := ParseFaults("slow;bogus"); err == nil {
		t.Fatal("ParseFaults accepted a bad rule")
	}
}

func TestFaultDoesNotTouchControlAPI(t *testing.T) {
	r := newRail(t, WithFaults(Fault{Profile: FaultResetBeforeApply, Method: "POST"}, Fault{Profile: Fault5xxAfterApply, Method: "GET"}))
	x := r.must("POST", "/_mock/payments", mustJSON(piUSD), nil)
	wantStatus(t, x, http.StatusCreated)
	wantStatus(t, r.must("GET", "/_mock/journal", nil, nil), 200)
}
