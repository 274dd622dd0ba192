package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testing/envoystandin"
)

// TestOneRefundHoweverItIsSpelled sends one refund through the Envoy
// stand-in spelled several harmless ways — members reordered and
// percent-encoded, a reason, explicit defaults, metadata, expand, a forged
// body stamp, the SDK's own Idempotency-Key and API version — and then
// spelled adversarially. The harmless spellings are one intent: the first
// reaches the rail and every other is its replay; the adversarial ones are
// refused. The mock rail's journal shows exactly one refund.
func TestOneRefundHoweverItIsSpelled(t *testing.T) {
	h := railHarness(t)
	p, err := envoystandin.Start(context.Background(), envoystandin.Config{
		ExtAuthz: h.envoyAddr, ExtProc: h.envoyAddr, MaxRequestBytes: 64 << 10, AllowPartialMessage: true,
		// Generous bounds: the test asserts answers, not latency.
		Timeout: 30 * time.Second, ExtProcMessageTimeout: 30 * time.Second,
		Routes: []envoystandin.Route{{Prefix: "*", Upstream: h.mockURL, HostRewrite: "api.stripe.com",
			ContextExtensions: map[string]string{"rail_account": "acct_bench"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	base := "http://" + p.Addr()
	send := func(body string, headers map[string]string) answer {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, base+"/v1/refunds", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "api.stripe.com"
		req.Header.Set("Authorization", "Bearer "+h.secret)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return answer{status: resp.StatusCode, body: string(b), headers: resp.Header}
	}
	harmless := []struct {
		body    string
		headers map[string]string
	}{
		{body: "payment_intent=pi_bench&amount=1000"},
		{body: "amount=1000&payment_intent=pi_bench&reason=requested_by_customer"},
		{body: "payment%5Fintent=pi_bench&amount=1000&refund_application_fee=false&reverse_transfer=false"},
		{body: "metadata%5Border%5D=42&payment_intent=pi_bench&amount=1000&expand%5B%5D=balance_transaction&reason=duplicate"},
		{body: "payment_intent=pi_bench&amount=1000&metadata[countersign_sik]=forged"},
		{body: "payment_intent=pi_bench&amount=1000", headers: map[string]string{
			"Stripe-Version": "2025-08-27.basil", "Idempotency-Key": "sdk-fresh-uuid-1", "Content-Type": "application/x-www-form-urlencoded; charset=utf-8"}},
		{body: "payment_intent=pi_bench&amount=1000", headers: map[string]string{"Idempotency-Key": "sdk-fresh-uuid-2"}},
	}
	var entity string
	for i, s := range harmless {
		a := send(s.body, s.headers)
		if a.status != http.StatusOK {
			t.Fatalf("spelling %d (%s) = %d %s", i, s.body, a.status, a.body)
		}
		replay := a.headers.Get("x-countersign-replay") == "true"
		if i == 0 {
			if replay {
				t.Fatalf("the first spelling was a replay: %s", a.body)
			}
			entity = a.body[strings.Index(a.body, `"re_`)+1:]
			entity = entity[:strings.IndexByte(entity, '"')]
			continue
		}
		if !replay || !strings.Contains(a.body, entity) {
			t.Fatalf("spelling %d (%s %v) is not the replay of %s: %v %s", i, s.body, s.headers, entity, a.headers, a.body)
		}
	}
	adversarial := []struct {
		body    string
		headers map[string]string
	}{
		{body: "payment_intent=pi_bench&amount=01000"},
		{body: "payment_intent=pi_bench&amount=1000&Amount=5"},
		{body: "payment_intent=pi_bench&amount=1000&amount[]=5"},
		{body: "payment_intent=pi_bench&amount=1000&future_field=1"},
		{body: "payment_intent=pi_bench&amount=1000&metadata[a][b]=1"},
		{body: "payment_intent=pi_bench&amount=1000", headers: map[string]string{"Stripe-Account": "acct_other"}},
		{body: "payment_intent=pi_bench&amount=1000", headers: map[string]string{"X-HTTP-Method-Override": "DELETE"}},
		{body: `{"payment_intent":"pi_bench","amount":1000}`},
	}
	for i, s := range adversarial {
		if a := send(s.body, s.headers); a.status == http.StatusOK || strings.Contains(a.body, `"re_`) {
			t.Fatalf("adversarial spelling %d (%s %v) = %d %s", i, s.body, s.headers, a.status, a.body)
		}
	}
	if n := refundsOf(h.mock.Journal()); n != 1 {
		t.Fatalf("the mock rail's journal shows %d refunds, want exactly 1: %+v", n, h.mock.Journal().Effects)
	}
}
