package mockrail

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The rail accepts only the configured key: a request carrying the agent's
// own credential (what an agent would send if Countersign did not swap it)
// is refused and leaves no effect.
func TestAuth(t *testing.T) {
	custom := []Account{
		{Name: "acme_stripe", Rail: Stripe, SecretKey: "sk_test_acme_real_key_0001"},
		{Name: "acme_rzp", Rail: Razorpay, KeyID: "rzp_test_acme0001", KeySecret: "acme_secret"},
	}
	payments := []Payment{
		{Rail: Stripe, ID: "pi_1001", Amount: 5000, Currency: "usd"},
		{Rail: Razorpay, ID: "pay_29QQoUBi66xm2f", Amount: 50000, Currency: "INR"},
	}
	refundForm := []byte(form("payment_intent", "pi_1001", "amount", "1").Encode())
	rzpRefund := []byte(`{"amount":1}`)
	basic := func(user, pass string) http.Header {
		return rzpHeader(user, pass)
	}
	tests := []struct {
		name       string
		method     string
		path       string
		body       []byte
		hdr        http.Header
		status     int
		shape      Rail // error shape expected
		msg        string
		account    string
		credential string
	}{
		{"the real Stripe key", "POST", "/v1/refunds", refundForm, stripeHeader("sk_test_acme_real_key_0001", ""), 200, "", "", "acme_stripe", "sk_test****0001"},
		{"no credential", "POST", "/v1/refunds", refundForm, http.Header{}, 401, Stripe, "did not provide an API key", "", ""},
		{"the agent's credential", "POST", "/v1/refunds", refundForm, stripeHeader("cs_agent_7f3a9b2c1d", ""), 401, Stripe, "Invalid API Key provided: cs_agen****2c1d", "", "cs_agen****2c1d"},
		{"the default key when custom accounts are set", "GET", "/v1/payment_intents/pi_1001", nil, stripeHeader(DefaultStripeKey, ""), 401, Stripe, "Invalid API Key", "", MaskCredential(DefaultStripeKey)},
		{"a Razorpay key pair on a Stripe path", "GET", "/v1/payment_intents/pi_1001", nil, basic("rzp_test_acme0001", "acme_secret"), 401, Stripe, "Invalid API Key", "", ""},
		{"the real Razorpay key pair", "POST", "/v1/payments/pay_29QQoUBi66xm2f/refund", rzpRefund, basic("rzp_test_acme0001", "acme_secret"), 200, "", "", "acme_rzp", "rzp_tes****0001"},
		{"a wrong Razorpay secret", "POST", "/v1/payments/pay_29QQoUBi66xm2f/refund", rzpRefund, basic("rzp_test_acme0001", "agent"), 401, Razorpay, "api key provided is invalid", "", "rzp_tes****0001"},
		{"a Stripe key on a Razorpay path", "GET", "/v1/payments/pay_29QQoUBi66xm2f", nil, stripeHeader("sk_test_acme_real_key_0001", ""), 401, Razorpay, "api key provided is invalid", "", ""},
		{"no credential on a shared path with a JSON body", "POST", "/v1/payouts", []byte(`{}`), http.Header{"Content-Type": {"application/json"}}, 401, Razorpay, "api key", "", ""},
		{"garbage Basic credential", "GET", "/v1/payments/pay_29QQoUBi66xm2f", nil, http.Header{"Authorization": {"Basic !!!"}}, 401, Razorpay, "api key", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRail(t, WithAccounts(custom...), WithPayments(payments...))
			x := r.must(tc.method, tc.path, tc.body, tc.hdr)
			wantStatus(t, x, tc.status)
			switch tc.shape {
			case Stripe:
				if x.str(t, "error", "type") != "invalid_request_error" {
					t.Fatalf("not a Stripe error: %s", x.body)
				}
			case Razorpay:
				if x.str(t, "error", "code") != "BAD_REQUEST_ERROR" {
					t.Fatalf("not a Razorpay error: %s", x.body)
				}
			}
			wantContains(t, x, tc.msg)
			q := lastRequest(r)
			if q.Account != tc.account || tc.credential != "" && q.Credential != tc.credential {
				t.Fatalf("journal account %q credential %q, want %q %q", q.Account, q.Credential, tc.account, tc.credential)
			}
			if tc.status == 401 {
				if q.Outcome != OutcomeUnauthorized {
					t.Fatalf("outcome %s", q.Outcome)
				}
				if n := len(r.srv.Journal().Effects); n != 0 {
					t.Fatalf("%d effects, want 0", n)
				}
			}
		})
	}
}

func TestAccountsAreIsolated(t *testing.T) {
	r := newRail(t, WithAccounts(
		Account{Name: "a", Rail: Stripe, SecretKey: "sk_test_aaaaaaaaaaaa"},
		Account{Name: "b", Rail: Stripe, SecretKey: "sk_test_bbbbbbbbbbbb"},
	), WithPayments(Payment{Rail: Stripe, Account: "a", ID: "pi_1001", Amount: 10, Currency: "usd"}))
	wantStatus(t, r.must("GET", "/v1/payment_intents/pi_1001", nil, stripeHeader("sk_test_aaaaaaaaaaaa", "")), 200)
	wantStatus(t, r.must("GET", "/v1/payment_intents/pi_1001", nil, stripeHeader("sk_test_bbbbbbbbbbbb", "")), 404)
	wantStatus(t, r.must("POST", "/v1/refunds", []byte("payment_intent=pi_1001"), stripeHeader("sk_test_bbbbbbbbbbbb", "")), 404)
}

// The journal records every effect and every request exactly as it
// happened, including over the control API.
func TestJournal(t *testing.T) {
	r := newRail(t, WithPayments(piUSD, payINR))
	r.clock.Advance(time.Minute)
	refund := r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_1001", "amount", "1200", "metadata[countersign_sik]", "SIK1"), key1)
	r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_1001", "amount", "1200", "metadata[countersign_sik]", "SIK1"), key1)
	r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_1001", "amount", "9999"), "k2")
	r.must("POST", "/v1/refunds", []byte("payment_intent=pi_1001"), stripeHeader("cs_agent_credential", ""))
	r.stripe("GET", "/v1/refunds", form("payment_intent", "pi_1001"), "")
	r.clock.Advance(time.Second)
	rr := r.rzp("POST", "/v1/payments/pay_29QQoUBi66xm2f/refund", map[string]any{"amount": 300, "notes": map[string]any{"countersign_sik": "SIK2"}},
		"X-Refund-Idempotency", "rzp-key-00001")
	r.rzp("POST", "/v1/payouts", payoutBody(700), "X-Payout-Idempotency", "pk-1")

	x := r.must("GET", "/_mock/journal", nil, nil)
	wantStatus(t, x, 200)
	var j Journal
	if err := json.Unmarshal(x.body, &j); err != nil {
		t.Fatal(err)
	}
	wantEffects := []Effect{
		{Seq: 1, Time: t0.Add(time.Minute), Rail: Stripe, Account: DefaultStripeAccount, Kind: KindRefund, EntityID: refund.str(t, "id"),
			IdempotencyKey: key1, Subject: "pi_1001", Amount: 1200, Currency: "usd", Metadata: map[string]string{"countersign_sik": "SIK1"}},
		{Seq: 2, Time: t0.Add(time.Minute + time.Second), Rail: Razorpay, Account: DefaultRazorpayAccount, Kind: KindRefund, EntityID: rr.str(t, "id"),
			IdempotencyKey: "rzp-key-00001", Subject: "pay_29QQoUBi66xm2f", Amount: 300, Currency: "INR", Metadata: map[string]string{"countersign_sik": "SIK2"}},
		{Seq: 3, Time: t0.Add(time.Minute + time.Second), Rail: Razorpay, Account: DefaultRazorpayAccount, Kind: KindPayout, EntityID: "pout_00000000000001",
			IdempotencyKey: "pk-1", Subject: "fa_00000000000001", Amount: 700, Currency: "INR"},
	}
	if len(j.Effects) != len(wantEffects) {
		t.Fatalf("effects %+v", j.Effects)
	}
	for i, want := range wantEffects {
		got := j.Effects[i]
		if !got.Time.Equal(want.Time) {
			t.Fatalf("effect %d time %v, want %v", i, got.Time, want.Time)
		}
		got.Time = want.Time
		if string(mustJSON(got)) != string(mustJSON(want)) {
			t.Fatalf("effect %d:\n got %s\nwant %s", i, mustJSON(got), mustJSON(want))
		}
	}
	type rec struct {
		method, path, query, key string
		status                   int
		outcome                  Outcome
		entity                   string
	}
	wantRequests := []rec{
		{"POST", "/v1/refunds", "", key1, 200, OutcomeApplied, refund.str(t, "id")},
		{"POST", "/v1/refunds", "", key1, 200, OutcomeReplayed, refund.str(t, "id")},
		{"POST", "/v1/refunds", "", "k2", 400, OutcomeRejected, ""},
		{"POST", "/v1/refunds", "", "", 401, OutcomeUnauthorized, ""},
		{"GET", "/v1/refunds", "payment_intent=pi_1001", "", 200, OutcomeRead, ""},
		{"POST", "/v1/payments/pay_29QQoUBi66xm2f/refund", "", "rzp-key-00001", 200, OutcomeApplied, rr.str(t, "id")},
		{"POST", "/v1/payouts", "", "pk-1", 200, OutcomeApplied, "pout_00000000000001"},
	}
	if len(j.Requests) != len(wantRequests) {
		t.Fatalf("requests %+v", j.Requests)
	}
	for i, want := range wantRequests {
		q := j.Requests[i]
		got := rec{q.Method, q.Path, q.Query, q.IdempotencyKey, q.Status, q.Outcome, q.EntityID}
		if got != want || q.Seq != i+1 {
			t.Fatalf("request %d: got %+v, want %+v", i, got, want)
		}
	}
	if j.Requests[3].Credential != "cs_agen****tial" || j.Requests[3].Account != "" {
		t.Fatalf("unauthorized request %+v", j.Requests[3])
	}
}

func TestControlAPI(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, r *rail)
	}{
		{"healthz", func(t *testing.T, r *rail) {
			wantStatus(t, r.must("GET", "/_mock/healthz", nil, nil), 200)
		}},
		{"create a Stripe payment and use it", func(t *testing.T, r *rail) {
			x := r.must("POST", "/_mock/payments", []byte(`{"rail":"stripe","id":"pi_77","amount":1000,"currency":"USD"}`), nil)
			wantStatus(t, x, 201)
			if x.str(t, "charge_id") != "ch_77" || x.str(t, "currency") != "usd" || x.str(t, "account") != DefaultStripeAccount || x.str(t, "status") != "succeeded" {
				t.Fatalf("payment: %s", x.body)
			}
			wantStatus(t, r.stripe("POST", "/v1/refunds", form("charge", "ch_77", "amount", "400"), ""), 200)
			l := r.must("GET", "/_mock/payments", nil, nil)
			wantContains(t, l, `"amount_refunded": 400`)
		}},
		{"create a Razorpay payment", func(t *testing.T, r *rail) {
			x := r.must("POST", "/_mock/payments", []byte(`{"rail":"razorpay","id":"pay_X","amount":100,"currency":"inr","account":"razorpay"}`), nil)
			wantStatus(t, x, 201)
			wantStatus(t, r.rzp("GET", "/v1/payments/pay_X", nil), 200)
		}},
		{"payment errors", func(t *testing.T, r *rail) {
			for body, status := range map[string]int{
				`{"rail":"stripe","id":"pi_1001","amount":1,"currency":"usd"}`:                   409,
				`{"rail":"stripe","id":"ch_1001","amount":1,"currency":"usd"}`:                   409, // the charge of pi_1001
				`{"rail":"paypal","id":"x","amount":1,"currency":"usd"}`:                         400,
				`{"rail":"stripe","id":"py_1","amount":1,"currency":"usd"}`:                      400,
				`{"rail":"razorpay","id":"pi_1","amount":1,"currency":"inr"}`:                    400,
				`{"rail":"stripe","id":"pi_2","amount":0,"currency":"usd"}`:                      400,
				`{"rail":"stripe","id":"pi_2","amount":1,"currency":"dollars"}`:                  400,
				`{"rail":"stripe","id":"pi_2","amount":1,"currency":"usd","account":"razorpay"}`: 400,
				`{"rail":"stripe","id":"pi_2","amount":1,"currency":"usd","account":"nobody"}`:   400,
				`{"rail":"stripe","id":"pi_2","amount":1,"currency":"usd","amount_refunded":1}`:  400,
				`{"rail":"stripe","id":"pi_2","amount":1,"currency":"usd","colour":"red"}`:       400,
				`{"rail":"stripe","id":"pi_2","amount":1,"currency":"usd","charge_id":"re_1"}`:   400,
				`{"rail":"stripe","id":"pi_2","amount":1,"currency":"usd"} {"rail":"stripe"}`:    400,
				`not json`: 400,
			} {
				if x := r.must("POST", "/_mock/payments", []byte(body), nil); x.status != status {
					t.Fatalf("%s: status %d, want %d: %s", body, x.status, status, x.body)
				}
			}
		}},
		{"add an account", func(t *testing.T, r *rail) {
			wantStatus(t, r.must("POST", "/_mock/accounts", []byte(`{"name":"x","rail":"stripe","secret_key":"sk_test_xxxxxxxxxx"}`), nil), 201)
			wantStatus(t, r.must("POST", "/_mock/accounts", []byte(`{"name":"x","rail":"stripe","secret_key":"sk_test_other"}`), nil), 409)
			wantStatus(t, r.must("POST", "/_mock/accounts", []byte(`{"name":"y","rail":"stripe","secret_key":"sk_test_xxxxxxxxxx"}`), nil), 409)
			wantStatus(t, r.must("POST", "/_mock/accounts", []byte(`{"name":"z","rail":"razorpay","secret_key":"sk"}`), nil), 400)
			wantStatus(t, r.must("GET", "/v1/payouts", nil, stripeHeader("sk_test_xxxxxxxxxx", "")), 200)
			wantContains(t, r.must("GET", "/_mock/accounts", nil, nil), `"name": "x"`)
		}},
		{"set, read and clear faults", func(t *testing.T, r *rail) {
			x := r.must("POST", "/_mock/fault", []byte(`{"profile":"5xx_after_apply","count":1,"path":"/v1/refunds"}`), nil)
			wantStatus(t, x, 200)
			wantContains(t, x, `"profile": "5xx_after_apply"`)
			wantStatus(t, r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_1001", "amount", "1"), ""), 500)
			wantContains(t, r.must("GET", "/_mock/fault", nil, nil), `"rules": []`)

			x = r.must("POST", "/_mock/fault", []byte(`{"rules":[{"profile":"replica_lag","delay":"5s"},{"profile":"slow","delay":"1ms","rail":"razorpay"}]}`), nil)
			wantStatus(t, x, 200)
			if fs := r.srv.Faults(); len(fs) != 2 || fs[0].Delay != Duration(5*time.Second) {
				t.Fatalf("faults %+v", fs)
			}
			wantStatus(t, r.must("POST", "/_mock/fault", []byte(`{"profile":"none"}`), nil), 200)
			if fs := r.srv.Faults(); len(fs) != 0 {
				t.Fatalf("faults %+v", fs)
			}
		}},
		{"fault errors", func(t *testing.T, r *rail) {
			for _, body := range []string{
				`{"profile":"explode"}`, `{"profile":"slow","delay":5}`, `{"profile":"slow","delay":"soon"}`,
				`{"profile":"slow","count":-1}`, `{"profile":"slow","colour":"red"}`, `{"rules":[{"profile":"x"}]}`, `[`,
			} {
				if x := r.must("POST", "/_mock/fault", []byte(body), nil); x.status != 400 {
					t.Fatalf("%s: status %d: %s", body, x.status, x.body)
				}
			}
		}},
		{"reset restores the start", func(t *testing.T, r *rail) {
			wantStatus(t, r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_1001"), key1), 200)
			r.must("POST", "/_mock/payments", []byte(`{"rail":"stripe","id":"pi_new","amount":1,"currency":"usd"}`), nil)
			r.must("POST", "/_mock/fault", []byte(`{"profile":"slow"}`), nil)
			wantStatus(t, r.must("POST", "/_mock/reset", nil, nil), 204)
			j := r.srv.Journal()
			if len(j.Effects) != 0 || len(j.Requests) != 0 {
				t.Fatalf("journal after reset %+v", j)
			}
			if p, _ := r.srv.Payment(DefaultStripeAccount, "pi_1001"); p.AmountRefunded != 0 {
				t.Fatalf("payment after reset %+v", p)
			}
			if _, ok := r.srv.Payment(DefaultStripeAccount, "pi_new"); ok {
				t.Fatal("runtime payment survived reset")
			}
			if fs := r.srv.Faults(); len(fs) != 1 || fs[0].Profile != FaultReplicaLag {
				t.Fatalf("faults after reset %+v, want the initial replica_lag", fs)
			}
			// The key is forgotten: the same request applies again.
			x := r.stripe("POST", "/v1/refunds", form("payment_intent", "pi_1001"), key1)
			wantStatus(t, x, 200)
			if x.header.Get("X-Mockrail-Replayed") != "" {
				t.Fatal("replayed after reset")
			}
		}},
		{"unknown control endpoint", func(t *testing.T, r *rail) {
			wantStatus(t, r.must("GET", "/_mock/nothing", nil, nil), 404)
			wantStatus(t, r.must("DELETE", "/_mock/journal", nil, nil), 404)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRail(t, WithPayments(piUSD), WithFaults(Fault{Profile: FaultReplicaLag, Delay: Duration(time.Nanosecond)}))
			tc.run(t, r)
		})
	}
}

func TestLoadSeed(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "seed.json")
	if err := os.WriteFile(good, []byte(`{
  "accounts": [
    {"name": "acme_stripe", "rail": "stripe", "secret_key": "sk_test_acme"},
    {"name": "acme_rzp", "rail": "razorpay", "key_id": "rzp_test_acme", "key_secret": "s"}
  ],
  "payments": [
    {"rail": "stripe", "id": "pi_1", "amount": 100, "currency": "usd"},
    {"rail": "razorpay", "id": "pay_1", "amount": 100, "currency": "INR"}
  ],
  "faults": [{"profile": "replica_lag", "delay": "3s"}]
}`), 0o600); err != nil {
		t.Fatal(err)
	}
	seed, err := LoadSeed(good)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(WithSeed(seed))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.Accounts()) != 2 || len(s.Payments()) != 2 || len(s.Faults()) != 1 || s.Faults()[0].Delay != Duration(3*time.Second) {
		t.Fatalf("accounts %+v payments %+v faults %+v", s.Accounts(), s.Payments(), s.Faults())
	}

	tests := []struct{ name, body, err string }{
		{"unknown field", `{"acounts":[]}`, "unknown field"},
		{"not json", `{`, "unexpected EOF"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
			if err := os.WriteFile(p, []byte(tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadSeed(p); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want %q", err, tc.err)
			}
		})
	}
	if _, err := LoadSeed(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing file loaded")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		opts []Option
		err  string
	}{
		{"account without key", []Option{WithAccounts(Account{Name: "a", Rail: Stripe})}, "secret_key"},
		{"account without name", []Option{WithAccounts(Account{Rail: Stripe, SecretKey: "k"})}, "name is required"},
		{"duplicate key", []Option{WithAccounts(Account{Name: "a", Rail: Stripe, SecretKey: "k"}, Account{Name: "b", Rail: Stripe, SecretKey: "k"})}, "already used"},
		{"payment of an unknown account", []Option{WithPayments(Payment{Rail: Stripe, Account: "x", ID: "pi_1", Amount: 1, Currency: "usd"})}, "no account"},
		{"bad fault", []Option{WithFaults(Fault{Profile: "nope"})}, "unknown profile"},
		{"bad TTL", []Option{WithIdempotencyTTL(-1)}, "TTL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.opts...); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %v, want %q", err, tc.err)
			}
		})
	}
}

func TestIDSources(t *testing.T) {
	seq := SequentialIDs()
	if a, b, c := seq("re_"), seq("re_"), seq("rfnd_"); a != "re_00000000000001" || b != "re_00000000000002" || c != "rfnd_00000000000001" {
		t.Fatalf("sequential ids %s %s %s", a, b, c)
	}
	rnd := RandomIDs()
	a, b := rnd("re_"), rnd("re_")
	if a == b || len(a) != 3+24 || len(rnd("rfnd_")) != 5+14 {
		t.Fatalf("random ids %s %s", a, b)
	}
}
