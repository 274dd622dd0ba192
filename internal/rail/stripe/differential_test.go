package stripe

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-mock/param/nestedtypeassembler"
	"github.com/stripe/stripe-mock/param/parser"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// differentialBodies is how many generated bodies each action's
// differential test reads, whatever -short says.
const differentialBodies = 10_000

// piece is one name=value of a generated body, before encoding.
type piece struct{ name, value string }

// gen writes Stripe request bodies: the members an SDK sends, their
// harmless variants (explicit defaults, labels, metadata, expand, order,
// percent-encoding, "+" for spaces) and adversarial spellings (other case,
// stray and nested brackets, repeats, signs and leading zeros, encodings
// that decode to non-UTF-8, unknown and refused members, a JSON body).
type gen struct {
	r    *rand.Rand
	kind sik.Kind
	// clean spells only what the rail reads the same (no stray "&", ";"
	// or JSON body).
	clean bool
}

func (g gen) pick(vs ...string) string { return vs[g.r.IntN(len(vs))] }
func (g gen) chance(p float64) bool    { return g.r.Float64() < p }

func (g gen) amount() string {
	if g.chance(0.1) {
		return g.pick("0", "010", "+5", "-1", " 5", "5 ", "1e3", "10.5", "0x10", "9007199254740992", "", "١٢")
	}
	return strconv.Itoa(1 + g.r.IntN(100000))
}

func (g gen) currency() string {
	if g.chance(0.1) {
		return g.pick("usdd", "us", "u$d", "", "🇺🇸", "US D")
	}
	return g.pick("usd", "eur", "gbp", "USD", "Eur")
}

func (g gen) label() string {
	return g.pick("weekly", "order 42", "a+b", "naïve", "x&y=z", "", strings.Repeat("L", 23), "ACME")
}

// base returns the members that make a valid action of g.kind.
func (g gen) base() []piece {
	switch g.kind {
	case sik.KindRefund:
		subj := piece{"payment_intent", g.pick("pi_1", "pi_3Mtw", "pi_X9")}
		if g.chance(0.4) {
			subj = piece{"charge", g.pick("ch_1", "ch_3Mtw")}
		}
		ps := []piece{subj}
		if g.chance(0.7) {
			ps = append(ps, piece{"amount", g.amount()})
		}
		return ps
	case sik.KindPayout:
		return []piece{{"amount", g.amount()}, {"currency", g.currency()}, {"destination", g.pick("ba_1Nx", "card_1", "ba_2")}}
	default:
		return []piece{{"amount", g.amount()}, {"currency", g.currency()}, {"destination", g.pick("acct_1Q", "acct_2")}}
	}
}

// harmless are members that must not change the key (or change it the
// way the table says).
func (g gen) harmless() piece {
	md := piece{"metadata[" + g.pick("order", "run", "k 1", "countersign_sik", "ключ") + "]", g.label()}
	ex := piece{"expand[]", g.pick(specs[g.kind].expandable...)}
	switch g.kind {
	case sik.KindRefund:
		return g.pickPiece(md, ex,
			piece{"reason", g.pick("duplicate", "fraudulent", "requested_by_customer")},
			piece{"refund_application_fee", g.pick("false", "true")},
			piece{"reverse_transfer", g.pick("false", "true")},
			piece{"currency", g.currency()})
	case sik.KindPayout:
		return g.pickPiece(md, ex,
			piece{"method", g.pick("standard", "instant")},
			piece{"description", g.label()},
			piece{"statement_descriptor", g.label()})
	default:
		return g.pickPiece(md, ex,
			piece{"source_transaction", g.pick("ch_9", "py_1")},
			piece{"description", g.label()},
			piece{"transfer_group", g.pick("ORDER_9", "g 1")})
	}
}

func (g gen) pickPiece(ps ...piece) piece { return ps[g.r.IntN(len(ps))] }

// adversarial mutates a body.
func (g gen) adversarial(ps []piece) []piece {
	p := ps[g.r.IntN(len(ps))]
	switch g.r.IntN(14) {
	case 0:
		return append(ps, piece{strings.ToUpper(p.name[:1]) + p.name[1:], p.value})
	case 1:
		return append(ps, piece{p.name + "[]", p.value})
	case 2:
		return append(ps, piece{"[" + p.name + "]", p.value})
	case 3:
		return append(ps, piece{p.name + "]", p.value})
	case 4:
		return append(ps, piece{"metadata[a][b]", "1"})
	case 5:
		return append(ps, p) // a repeat
	case 6:
		return append(ps, piece{p.name, g.amount()})
	case 7:
		return append(ps, piece{g.pick("future_field", "customer", "origin", "instructions_email", "source_type", "payout_method", "_method", "metadata", "expand", "amount[x]"), g.pick("1", "card", "customer_balance", "")})
	case 8:
		return append(ps, piece{p.name + " ", p.value})
	case 9:
		return append(ps, piece{"expand[]", g.pick("charge.customer", "nope", "")})
	case 10:
		return append(ps, piece{g.pick("reason", "method", "refund_application_fee", "reverse_transfer"), g.pick("True", "1", "yes", "Duplicate", "fast", "")})
	case 11:
		return append(ps, piece{"metadata[" + strings.Repeat("k", 41) + "]", "v"})
	case 12:
		return append(ps, piece{p.name, p.value + "\xff"})
	}
	return append(ps, piece{p.name + "[0]", p.value})
}

// encode spells pieces as a form body, choosing among spellings a rail
// reads the same (or, rarely, ones it may not).
func (g gen) encode(ps []piece) string {
	g.r.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = g.escape(p.name, true) + "=" + g.escape(p.value, false)
	}
	body := strings.Join(parts, "&")
	switch {
	case g.clean:
	case g.chance(0.01):
		body += "&"
	case g.chance(0.01):
		body = strings.Replace(body, "&", ";", 1)
	case g.chance(0.01):
		body = `{"` + ps[0].name + `":"` + ps[0].value + `"}`
	}
	return body
}

func (g gen) escape(s string, name bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' && g.chance(0.5):
			b.WriteByte('+')
		case name && (c == '[' || c == ']') && g.chance(0.5):
			fmt.Fprintf(&b, "%%%02X", c)
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || name && (c == '[' || c == ']'):
			if g.chance(0.02) {
				fmt.Fprintf(&b, g.pick("%%%02X", "%%%02x"), c)
			} else {
				b.WriteByte(c)
			}
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// body generates one body.
func (g gen) body() string {
	ps := g.base()
	for range g.r.IntN(4) {
		ps = append(ps, g.harmless())
	}
	if g.chance(0.35) {
		ps = g.adversarial(ps)
		if g.chance(0.2) {
			ps = g.adversarial(ps)
		}
	}
	return g.encode(ps)
}

// verdict is stripe-mock's answer to one body.
type verdict struct {
	status int
	body   []byte
}

// askAll posts every distinct body to stripe-mock, four at a time.
func askAll(t *testing.T, base, path string, bodies []string) map[string]verdict {
	t.Helper()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer hc.CloseIdleConnections()
	distinct := map[string]verdict{}
	for _, b := range bodies {
		distinct[b] = verdict{}
	}
	work := make(chan string)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var failed error
	for range 4 {
		wg.Go(func() {
			for b := range work {
				req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, base+path, strings.NewReader(b))
				if err != nil {
					panic(err)
				}
				req.Header.Set("Authorization", "Bearer sk_test_123")
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				resp, err := hc.Do(req)
				var v verdict
				if err == nil {
					v.status = resp.StatusCode
					v.body, err = io.ReadAll(resp.Body)
					_ = resp.Body.Close()
				}
				mu.Lock()
				if err != nil && failed == nil {
					failed = err
				}
				distinct[b] = v
				mu.Unlock()
			}
		})
	}
	keys := make([]string, 0, len(distinct))
	for b := range distinct {
		keys = append(keys, b)
	}
	for _, b := range keys {
		work <- b
	}
	close(work)
	wg.Wait()
	if failed != nil {
		t.Fatalf("stripe-mock: %v", failed)
	}
	return distinct
}

// TestDifferentialStripeMock feeds generated bodies per action to Parse
// and to a reference reading of the rail — stripe-mock's own Rack-style
// parameter parser for what the rail reads, stripe-mock validating the
// body against Stripe's OpenAPI spec and reflecting it into the answer —
// and fails on any body the two read differently: Countersign accepts a
// body the rail refuses, or reads another amount, currency, subject or
// keyed member, or the rail reads a member Countersign has not placed.
func TestDifferentialStripeMock(t *testing.T) {
	base := stripeMock(t)
	paths := map[sik.Kind]string{sik.KindRefund: "/v1/refunds", sik.KindPayout: "/v1/payouts", sik.KindTransfer: "/v1/transfers"}
	for i, kind := range []sik.Kind{sik.KindRefund, sik.KindPayout, sik.KindTransfer} {
		t.Run(string(kind), func(t *testing.T) {
			g := gen{r: rand.New(rand.NewPCG(20260301, uint64(i))), kind: kind}
			bodies := make([]string, differentialBodies)
			for j := range bodies {
				bodies[j] = g.body()
			}
			answers := askAll(t, base, paths[kind], bodies)
			var accepted, refusedBoth, conservative int
			for _, b := range bodies {
				v := answers[b]
				p, err := New().Parse(rail.Request{Method: http.MethodPost, Path: paths[kind],
					Headers: map[string]string{"content-type": "application/x-www-form-urlencoded"}, Body: []byte(b)})
				if err != nil {
					if v.status == http.StatusOK {
						conservative++
					} else {
						refusedBoth++
					}
					continue
				}
				accepted++
				if v.status != http.StatusOK {
					t.Fatalf("Countersign accepts a body stripe-mock refuses (%d %s):\n%s", v.status, v.body, b)
				}
				if err := sameReading(kind, p.Action, b, v.body); err != nil {
					t.Fatalf("%v\nbody: %s", err, b)
				}
			}
			t.Logf("%s: %d bodies (%d distinct): %d accepted by both, %d refused by both, %d refused only by Countersign, 0 disagreements",
				kind, len(bodies), len(answers), accepted, refusedBoth, conservative)
			if accepted < differentialBodies/5 || refusedBoth+conservative < differentialBodies/10 {
				t.Fatalf("the generator is lopsided: %d accepted, %d refused", accepted, refusedBoth+conservative)
			}
		})
	}
}

// sameReading compares Countersign's action with the rail's reading of the
// same body: every top-level parameter the rail reads must be one the
// table places, with the value Countersign keyed.
func sameReading(kind sik.Kind, a rail.Action, body string, answer []byte) error {
	values, err := parser.ParseFormString(body)
	if err != nil {
		return fmt.Errorf("the reference cannot parse what Countersign accepted: %w", err)
	}
	params, err := nestedtypeassembler.AssembleParams(values)
	if err != nil {
		return fmt.Errorf("the reference cannot assemble what Countersign accepted: %w", err)
	}
	sp := specs[kind]
	extra := map[string]string{}
	for name, v := range params {
		m, ok := sp.members[name]
		switch {
		case name == "metadata":
			md, ok := v.(map[string]any)
			if !ok {
				return fmt.Errorf("the rail reads metadata as %T", v)
			}
			for k, mv := range md {
				if _, ok := mv.(string); !ok || strings.ContainsAny(k, "[]") {
					return fmt.Errorf("the rail reads metadata[%s] as %T", k, mv)
				}
			}
			continue
		case name == "expand":
			if _, ok := v.([]any); !ok {
				return fmt.Errorf("the rail reads expand as %T", v)
			}
			continue
		case !ok:
			return fmt.Errorf("the rail reads %q, which Countersign does not place", name)
		}
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("the rail reads %s as %T (%v)", name, v, v)
		}
		switch m.role {
		case roleAmount:
			if a.AmountMinor == nil || strconv.FormatInt(*a.AmountMinor, 10) != s {
				return fmt.Errorf("the rail reads amount %q, Countersign %s", s, minorString(a.AmountMinor))
			}
		case roleCurrency:
			if !strings.EqualFold(s, a.Currency) {
				return fmt.Errorf("the rail reads currency %q, Countersign %q", s, a.Currency)
			}
		case roleSubject:
			if s != a.Subject {
				return fmt.Errorf("the rail reads %s %q, Countersign subject %q", name, s, a.Subject)
			}
		case roleKey:
			extra[name] = s
		}
	}
	if _, ok := params["amount"]; !ok && a.AmountMinor != nil {
		return fmt.Errorf("Countersign reads amount %d, the rail none", *a.AmountMinor)
	}
	if want := sp.extra(extra); !equalMaps(want, a.Extra) {
		return fmt.Errorf("the rail's keyed members %v, Countersign's %v", want, a.Extra)
	}
	// The answer reflects the request (stripe-mock copies parameters into
	// the response where the names match).
	var obj struct {
		Amount        *int64     `json:"amount"`
		Currency      string     `json:"currency"`
		Charge        expandable `json:"charge"`
		PaymentIntent expandable `json:"payment_intent"`
		Destination   expandable `json:"destination"`
	}
	if err := json.Unmarshal(answer, &obj); err != nil {
		return fmt.Errorf("stripe-mock's answer: %w", err)
	}
	if a.AmountMinor != nil && (obj.Amount == nil || *obj.Amount != *a.AmountMinor) {
		return fmt.Errorf("stripe-mock created an entity for %s, Countersign read %d", minorString(obj.Amount), *a.AmountMinor)
	}
	if a.Currency != "" && !strings.EqualFold(obj.Currency, a.Currency) {
		return fmt.Errorf("stripe-mock created an entity in %q, Countersign read %q", obj.Currency, a.Currency)
	}
	got := obj.Destination.ID
	if kind == sik.KindRefund {
		got = obj.PaymentIntent.ID
		if !strings.HasPrefix(a.Subject, "pi_") {
			got = obj.Charge.ID
		}
	}
	if got != a.Subject {
		return fmt.Errorf("stripe-mock created an entity for %q, Countersign read %q", got, a.Subject)
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

func minorString(n *int64) string {
	if n == nil {
		return "none"
	}
	return strconv.FormatInt(*n, 10)
}

// FuzzReadForm: whatever readForm accepts, stripe-mock's form parser reads
// as the same pairs in the same order.
func FuzzReadForm(f *testing.F) {
	for _, tc := range parseCases {
		f.Add(string(tc.Req.Body))
	}
	for _, tc := range malformedCases {
		f.Add(string(tc.Req.Body))
	}
	f.Fuzz(func(t *testing.T, body string) {
		pairs, err := readForm("body", body)
		if err != nil {
			return
		}
		ref, err := parser.ParseFormString(body)
		if err != nil {
			t.Fatalf("readForm accepts %q, stripe-mock's parser refuses it: %v", body, err)
		}
		if len(ref) != len(pairs) {
			t.Fatalf("readForm reads %d pairs in %q, stripe-mock %d", len(pairs), body, len(ref))
		}
		for i, p := range pairs {
			if ref[i][0] != p.name || ref[i][1] != p.value {
				t.Fatalf("pair %d of %q: readForm %q=%q, stripe-mock %q=%q", i, body, p.name, p.value, ref[i][0], ref[i][1])
			}
		}
	})
}
