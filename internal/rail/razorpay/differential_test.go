package razorpay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
	"github.com/countersign/countersign/internal/testing/mockrail"
)

// differentialBodies is how many generated bodies each action's
// differential test reads, whatever -short says.
const differentialBodies = 10_000

// member is one "name": value of a generated body, value as JSON text.
type jmember struct{ name, raw string }

// gen writes Razorpay request bodies: the members an SDK sends, their
// harmless variants (explicit defaults, labels, notes, order, whitespace,
// escaped key names) and adversarial spellings (other case, repeats,
// numbers as strings, fractions and exponents, signs, nulls, nested or
// oversized notes, unknown and refused members, a form body).
type gen struct {
	r    *rand.Rand
	kind sik.Kind
}

func (g gen) pick(vs ...string) string { return vs[g.r.IntN(len(vs))] }
func (g gen) chance(p float64) bool    { return g.r.Float64() < p }
func q(s string) string                { b, _ := json.Marshal(s); return string(b) }

func (g gen) amount() string {
	if g.chance(0.12) {
		return g.pick("0", "-1", "100.0", "1e2", `"100"`, "null", "true", "9007199254740992", `{"v":1}`, "1.5")
	}
	return strconv.Itoa(100 + g.r.IntN(100000))
}

func (g gen) notes() string {
	switch g.r.IntN(8) {
	case 0:
		return g.pick("null", "[]", `"x"`, `{"a":{"b":1}}`, `{"a":1}`, `{"a":"`+strings.Repeat("v", 257)+`"}`)
	case 1:
		return `{"countersign_sik":"forged","a":"b"}`
	}
	return `{"order":` + q(g.pick("42", "tea, hot", "naïve", "")) + `}`
}

func (g gen) base() []jmember {
	if g.kind == sik.KindRefund {
		var ms []jmember
		if g.chance(0.7) {
			ms = append(ms, jmember{"amount", g.amount()})
		}
		return ms
	}
	return []jmember{
		{"account_number", q(g.pick("7878780080316316", "2323230041626905"))},
		{"fund_account_id", q(g.pick("fa_00000000000001", "fa_2"))},
		{"amount", g.amount()},
		{"currency", q("INR")},
		{"mode", q(g.pick("IMPS", "NEFT", "RTGS", "UPI"))},
		{"purpose", q(g.pick("refund", "payout", "vendor bill"))},
	}
}

func (g gen) harmless() jmember {
	if g.kind == sik.KindRefund {
		return g.pickM(
			jmember{"speed", q(g.pick("normal", "optimum"))},
			jmember{"receipt", q(g.pick("Receipt No. 31", "r-1"))},
			jmember{"notes", g.notes()},
			jmember{"currency", q(g.pick("INR", "inr"))})
	}
	return g.pickM(
		jmember{"queue_if_low_balance", g.pick("true", "false")},
		jmember{"reference_id", q(g.pick("Acme Transaction ID 12345", "ref-1"))},
		jmember{"narration", q(g.pick("Acme Corp Fund Transfer", "salary"))},
		jmember{"notes", g.notes()})
}

func (g gen) pickM(ms ...jmember) jmember { return ms[g.r.IntN(len(ms))] }

func (g gen) adversarial(ms []jmember) []jmember {
	if len(ms) == 0 {
		ms = append(ms, jmember{"amount", "100"})
	}
	m := ms[g.r.IntN(len(ms))]
	switch g.r.IntN(11) {
	case 0:
		return append(ms, jmember{strings.ToUpper(m.name[:1]) + m.name[1:], m.raw})
	case 1:
		return append(ms, m) // a repeat
	case 2:
		return append(ms, jmember{m.name + " ", m.raw})
	case 3:
		return append(ms, jmember{g.pick("future_field", "fund_account", "payment_id", "speed_requested"), g.pick(`{"account_type":"vpa"}`, `"x"`, "1")})
	case 4:
		return append(ms, jmember{"amount", g.amount()})
	case 5:
		return append(ms, jmember{m.name, "null"})
	case 6:
		return append(ms, jmember{g.pick("speed", "mode", "currency", "purpose", "queue_if_low_balance"), g.pick(`"instant"`, `"imps"`, `"inr"`, `""`, `"true"`, "1", `"USD"`)})
	case 7:
		return append(ms, jmember{"narration", q(g.pick("pay-out!", strings.Repeat("n", 31)))})
	case 8:
		return append(ms, jmember{"reference_id", q(strings.Repeat("r", 41))})
	case 9:
		return append(ms, jmember{"notes", g.notes()})
	}
	return append(ms, jmember{m.name, m.raw + " "})
}

// escapeKey spells a key name with JSON escapes a decoder reads the same.
func (g gen) escapeKey(name string) string {
	if !g.chance(0.05) || name == "" {
		return q(name)
	}
	i := g.r.IntN(len(name))
	return `"` + name[:i] + fmt.Sprintf(`\u%04x`, name[i]) + name[i+1:] + `"`
}

func (g gen) encode(ms []jmember) string {
	g.r.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
	sep := g.pick(",", ", ", ",\n  ")
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = g.escapeKey(m.name) + g.pick(":", ": ") + m.raw
	}
	body := "{" + strings.Join(parts, sep) + "}"
	switch {
	case g.chance(0.01):
		body += "{}"
	case g.chance(0.01):
		body = "amount=100&speed=normal"
	case g.chance(0.01):
		body = strings.Replace(body, "{", "{\"x\":\"\xff\",", 1)
	case g.chance(0.03) && len(ms) == 0:
		body = ""
	}
	return body
}

func (g gen) body() string {
	ms := g.base()
	for range g.r.IntN(4) {
		ms = append(ms, g.harmless())
	}
	if g.chance(0.35) {
		ms = g.adversarial(ms)
		if g.chance(0.2) {
			ms = g.adversarial(ms)
		}
	}
	return g.encode(ms)
}

// TestDifferentialMockRail feeds generated bodies per action to Parse and
// to the mock rail's Razorpay handlers (their parsers and validation) and
// fails on any body the two read differently: Countersign accepts a body
// the rail refuses, or the rail's created entity has another amount,
// currency, subject or keyed member, or the rail reads a member Countersign
// has not placed.
func TestDifferentialMockRail(t *testing.T) {
	mr, err := mockrail.New()
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(mr)
	t.Cleanup(func() { mr.Close(); ts.Close() })
	hc := ts.Client()
	t.Cleanup(hc.CloseIdleConnections)
	// A payment per refund body: a full refund drains its payment.
	path := func(kind sik.Kind, n int) string {
		if kind == sik.KindPayout {
			return "/v1/payouts"
		}
		id := fmt.Sprintf("pay_diff%05d", n)
		if _, err := mr.AddPayment(mockrail.Payment{Rail: mockrail.Razorpay, ID: id, Amount: 1 << 52, Currency: "INR", Status: "captured"}); err != nil {
			t.Fatal(err)
		}
		return "/v1/payments/" + id + "/refund"
	}
	keyHeader := map[sik.Kind]string{sik.KindRefund: "X-Refund-Idempotency", sik.KindPayout: "X-Payout-Idempotency"}
	for i, kind := range []sik.Kind{sik.KindRefund, sik.KindPayout} {
		t.Run(string(kind), func(t *testing.T) {
			g := gen{r: rand.New(rand.NewPCG(20260301, uint64(i))), kind: kind}
			var accepted, refusedBoth, conservative, gated int
			for n := range differentialBodies {
				b := g.body()
				p := path(kind, n)
				req, err := http.NewRequest(http.MethodPost, ts.URL+p, strings.NewReader(b))
				if err != nil {
					t.Fatal(err)
				}
				req.SetBasicAuth(mockrail.DefaultRazorpayKeyID, mockrail.DefaultRazorpayKeySecret)
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(keyHeader[kind], fmt.Sprintf("diff-%s-%08d", kind, n))
				resp, err := hc.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				answer, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				parsed, perr := New().Parse(rail.Request{Method: http.MethodPost, Path: p,
					Headers: map[string]string{"content-type": "application/json"}, Body: []byte(b)})
				if perr != nil {
					if resp.StatusCode == http.StatusOK {
						conservative++
					} else {
						refusedBoth++
					}
					continue
				}
				if c := parsed.Action.Currency; kind == sik.KindRefund && c != "" && c != "INR" {
					// Another currency than the payment's: the value gate's
					// to refuse (G2 currency_mismatch), as the rail does.
					if resp.StatusCode == http.StatusOK {
						t.Fatalf("the mock rail refunded an INR payment in %s:\n%s", c, b)
					}
					gated++
					continue
				}
				accepted++
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("Countersign accepts a body the mock rail refuses (%d %s):\n%s", resp.StatusCode, answer, b)
				}
				if err := sameReading(kind, parsed.Action, []byte(b), answer); err != nil {
					t.Fatalf("%v\nbody: %s", err, b)
				}
			}
			t.Logf("%s: %d bodies: %d accepted by both, %d refused by both, %d refused only by Countersign, %d left to the value gate (another currency), 0 disagreements",
				kind, differentialBodies, accepted, refusedBoth, conservative, gated)
			if accepted < differentialBodies/5 || refusedBoth+conservative < differentialBodies/10 {
				t.Fatalf("the generator is lopsided: %d accepted, %d refused", accepted, refusedBoth+conservative)
			}
		})
	}
}

// sameReading compares Countersign's action with the mock rail's reading:
// its decoding of the body (encoding/json into a map, as its handlers do)
// and the entity it created.
func sameReading(kind sik.Kind, a rail.Action, body, answer []byte) error {
	read := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, &read); err != nil {
			return fmt.Errorf("the reference cannot decode what Countersign accepted: %w", err)
		}
	}
	sp := specs[kind]
	keyed := map[string]string{}
	for name, raw := range read {
		m, ok := sp.members[name]
		if !ok {
			return fmt.Errorf("the rail reads %q, which Countersign does not place", name)
		}
		if m.role == roleKey {
			v := string(raw)
			if m.json == jsonString {
				if err := json.Unmarshal(raw, &v); err != nil {
					return fmt.Errorf("the rail reads %s as %s", name, raw)
				}
			}
			keyed[name] = v
		}
	}
	if want := sp.extra(keyed); !equalMaps(want, a.Extra) {
		return fmt.Errorf("the rail's keyed members %v, Countersign's %v", want, a.Extra)
	}
	var e struct {
		Amount         int64  `json:"amount"`
		Currency       string `json:"currency"`
		PaymentID      string `json:"payment_id"`
		FundAccountID  string `json:"fund_account_id"`
		SpeedRequested string `json:"speed_requested"`
		Mode           string `json:"mode"`
		Purpose        string `json:"purpose"`
	}
	if err := json.Unmarshal(answer, &e); err != nil {
		return fmt.Errorf("the mock rail's answer: %w", err)
	}
	subject, checks := e.FundAccountID, map[string]string{"mode": e.Mode, "purpose": e.Purpose}
	if kind == sik.KindRefund {
		subject, checks = e.PaymentID, map[string]string{"speed": e.SpeedRequested}
	}
	switch {
	case a.AmountMinor != nil && e.Amount != *a.AmountMinor:
		return fmt.Errorf("the rail created an entity for %d, Countersign read %d", e.Amount, *a.AmountMinor)
	case a.Currency != "" && !strings.EqualFold(e.Currency, a.Currency):
		return fmt.Errorf("the rail created an entity in %q, Countersign read %q", e.Currency, a.Currency)
	case subject != a.Subject:
		return fmt.Errorf("the rail created an entity for %q, Countersign read %q", subject, a.Subject)
	}
	for name, got := range checks {
		if a.Extra[name] != got {
			return fmt.Errorf("the rail's entity has %s %q, Countersign keyed %q", name, got, a.Extra[name])
		}
	}
	return nil
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
