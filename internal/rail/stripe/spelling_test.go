package stripe

import (
	"maps"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"

	"pgregory.net/rapid"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/sik"
)

// keyOf is the SIK the engine derives from a parsed action (engine.act),
// for a fixed rail account and a refund's payment currency.
func keyOf(t *rapid.T, a rail.Action) sik.SIK {
	k := sik.Action{V: sik.Version, RailAccount: "acct_1", Action: string(a.Kind), Subject: a.Subject,
		Currency: a.Currency, Extra: maps.Clone(a.Extra), Distinct: a.Distinct}
	if k.Extra == nil {
		k.Extra = map[string]string{}
	}
	if k.Currency == "" {
		k.Currency = "USD"
	}
	if a.AmountMinor != nil {
		k.AmountMinor = *a.AmountMinor
	} else {
		k.Extra["amount"] = "full"
	}
	s, err := sik.Key(k)
	if err != nil {
		t.Fatalf("sik.Key(%+v): %v", k, err)
	}
	return s
}

// meaning is what a Stripe request asks for: the members in the key.
type meaning struct {
	kind                   sik.Kind
	subject, amount, curr  string
	refundFee, reverse     bool   // refunds
	method, sourceTransfer string // payouts: "instant" or ""; transfers: a charge or ""
	viaCharge, fullRefund  bool
	distinct               string
}

func drawMeaning(t *rapid.T) meaning {
	m := meaning{kind: rapid.SampledFrom([]sik.Kind{sik.KindRefund, sik.KindPayout, sik.KindTransfer}).Draw(t, "kind")}
	m.amount = strconv.Itoa(rapid.IntRange(1, 1<<40).Draw(t, "amount"))
	m.curr = rapid.SampledFrom([]string{"usd", "eur", "gbp"}).Draw(t, "currency")
	m.distinct = rapid.SampledFrom([]string{"", "second refund approved"}).Draw(t, "distinct")
	switch m.kind {
	case sik.KindRefund:
		m.viaCharge = rapid.Bool().Draw(t, "via_charge")
		m.subject = rapid.SampledFrom([]string{"pi_1", "pi_3Mtw"}).Draw(t, "pi")
		if m.viaCharge {
			m.subject = "ch_" + m.subject[3:]
		}
		m.fullRefund = rapid.Bool().Draw(t, "full")
		// refund_application_fee=true is refused (noFeeRefund): only its
		// explicit default is a spelling of a refund.
		m.reverse = rapid.Bool().Draw(t, "reverse")
	case sik.KindPayout:
		m.subject = rapid.SampledFrom([]string{"ba_1", "card_2"}).Draw(t, "dest")
		m.method = rapid.SampledFrom([]string{"", "instant"}).Draw(t, "method")
	default:
		m.subject = rapid.SampledFrom([]string{"acct_1", "acct_2"}).Draw(t, "dest")
		m.sourceTransfer = rapid.SampledFrom([]string{"", "ch_9"}).Draw(t, "source_transaction")
	}
	return m
}

// spell writes m as a form body: the key's members, then labels and
// explicit defaults chosen by r, in r's order and encoding.
func spell(m meaning, r *rand.Rand) rail.Request {
	g := gen{r: r, kind: m.kind, clean: true}
	label := func() string { return g.pick("weekly", "order 42", "a+b", "naïve", "x&y=z", "ACME") }
	var ps []piece
	add := func(n, v string) { ps = append(ps, piece{n, v}) }
	switch m.kind {
	case sik.KindRefund:
		if m.viaCharge {
			add("charge", m.subject)
		} else {
			add("payment_intent", m.subject)
		}
		if !m.fullRefund {
			add("amount", m.amount)
		}
		for name, on := range map[string]bool{"refund_application_fee": m.refundFee, "reverse_transfer": m.reverse} {
			switch {
			case on:
				add(name, "true")
			case g.chance(0.5):
				add(name, "false") // the explicit default
			}
		}
		if g.chance(0.6) {
			add("reason", g.pick("duplicate", "fraudulent", "requested_by_customer"))
		}
	case sik.KindPayout:
		add("amount", m.amount)
		add("currency", g.pick(m.curr, toUpper(m.curr)))
		add("destination", m.subject)
		switch {
		case m.method != "":
			add("method", m.method)
		case g.chance(0.5):
			add("method", "standard")
		}
		if g.chance(0.5) {
			add("description", label())
		}
		if g.chance(0.5) {
			add("statement_descriptor", "ACME PAYOUT")
		}
	default:
		add("amount", m.amount)
		add("currency", g.pick(m.curr, toUpper(m.curr)))
		add("destination", m.subject)
		if m.sourceTransfer != "" {
			add("source_transaction", m.sourceTransfer)
		}
		if g.chance(0.5) {
			add("transfer_group", "ORDER_9")
		}
		if g.chance(0.5) {
			add("description", label())
		}
	}
	for i := range r.IntN(4) {
		add("metadata["+g.pick("order", "run", "k 1", "countersign_sik")+strconv.Itoa(i)+"]", g.pick(label(), ""))
	}
	if g.chance(0.4) {
		add("expand[]", g.pick(specs[m.kind].expandable...))
	}
	headers := map[string]string{"content-type": g.pick("application/x-www-form-urlencoded", "application/x-www-form-urlencoded; charset=utf-8"),
		"idempotency-key": strconv.FormatUint(r.Uint64(), 36)}
	if g.chance(0.5) {
		headers["stripe-version"] = g.pick(APIVersion, "2025-08-27.basil")
	}
	if m.distinct != "" {
		headers[headerDistinct] = m.distinct
	}
	path := map[sik.Kind]string{sik.KindRefund: "/v1/refunds", sik.KindPayout: "/v1/payouts", sik.KindTransfer: "/v1/transfers"}[m.kind]
	return rail.Request{Method: http.MethodPost, Path: path, Headers: headers, Body: []byte(g.encode(ps))}
}

func toUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 32
		}
	}
	return string(b)
}

// TestSpellingsShareOneSIK: two requests that differ only in normalised
// members (labels, explicit defaults, metadata, expand, order, encoding,
// the SDK's own idempotency key and version) have one SIK — one rail
// effect — and changing the amount changes it.
func TestSpellingsShareOneSIK(t *testing.T) {
	ad := New()
	rapid.Check(t, func(t *rapid.T) {
		m := drawMeaning(t)
		var keys []sik.SIK
		for i := range 2 {
			req := spell(m, rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "spelling"), uint64(i))))
			p, err := ad.Parse(req)
			if err != nil {
				t.Fatalf("Parse(%s %s): %v", req.Path, req.Body, err)
			}
			keys = append(keys, keyOf(t, p.Action))
		}
		if keys[0] != keys[1] {
			t.Fatalf("one meaning, two SIKs: %s, %s", keys[0], keys[1])
		}
		if m.kind == sik.KindRefund && m.fullRefund {
			return
		}
		other := m
		n, _ := strconv.Atoi(m.amount)
		other.amount = strconv.Itoa(n + 1)
		p, err := ad.Parse(spell(other, rand.New(rand.NewPCG(1, 2))))
		if err != nil {
			t.Fatal(err)
		}
		if keyOf(t, p.Action) == keys[0] {
			t.Fatalf("amounts %s and %s share a SIK", m.amount, other.amount)
		}
	})
}
