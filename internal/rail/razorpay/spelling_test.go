package razorpay

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

// keyOf is the SIK the engine derives from a parsed action (engine.act).
func keyOf(t *rapid.T, a rail.Action) sik.SIK {
	k := sik.Action{V: sik.Version, RailAccount: "acc_1", Action: string(a.Kind), Subject: a.Subject,
		Currency: a.Currency, Extra: maps.Clone(a.Extra), Distinct: a.Distinct}
	if k.Extra == nil {
		k.Extra = map[string]string{}
	}
	if k.Currency == "" {
		k.Currency = "INR" // the payment's
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

type meaning struct {
	kind          sik.Kind
	amount        string // "" = a full refund
	speed, mode   string
	queue         bool
	fundAccount   string
	accountNumber string
}

func drawMeaning(t *rapid.T) meaning {
	m := meaning{kind: rapid.SampledFrom([]sik.Kind{sik.KindRefund, sik.KindPayout}).Draw(t, "kind")}
	m.amount = strconv.Itoa(rapid.IntRange(100, 1<<40).Draw(t, "amount"))
	if m.kind == sik.KindRefund {
		if rapid.Bool().Draw(t, "full") {
			m.amount = ""
		}
		m.speed = rapid.SampledFrom([]string{"normal", "optimum"}).Draw(t, "speed")
		return m
	}
	m.mode = rapid.SampledFrom(payoutModes).Draw(t, "mode")
	m.queue = rapid.Bool().Draw(t, "queue")
	m.fundAccount = rapid.SampledFrom([]string{"fa_1", "fa_2"}).Draw(t, "fund_account")
	m.accountNumber = rapid.SampledFrom([]string{"7878780080316316", "2323230041626905"}).Draw(t, "account_number")
	return m
}

// spell writes m as a JSON body with labels and explicit defaults chosen
// by r, in r's order, whitespace and key escapes.
func spell(m meaning, r *rand.Rand) rail.Request {
	g := gen{r: r, kind: m.kind}
	var ms []jmember
	add := func(n, raw string) { ms = append(ms, jmember{n, raw}) }
	path := "/v1/payouts"
	if m.kind == sik.KindRefund {
		path = "/v1/payments/pay_1/refund"
		if m.amount != "" {
			add("amount", m.amount)
		}
		if m.speed != "normal" || g.chance(0.5) {
			add("speed", q(m.speed))
		}
		if g.chance(0.5) {
			add("receipt", q(g.pick("Receipt No. 31", "r-1")))
		}
		if g.chance(0.3) {
			add("currency", q(g.pick("INR", "inr")))
		}
	} else {
		add("account_number", q(m.accountNumber))
		add("fund_account_id", q(m.fundAccount))
		add("amount", m.amount)
		add("currency", q("INR"))
		add("mode", q(m.mode))
		add("purpose", q("refund"))
		switch {
		case m.queue:
			add("queue_if_low_balance", "true")
		case g.chance(0.5):
			add("queue_if_low_balance", "false")
		}
		if g.chance(0.5) {
			add("reference_id", q(g.pick("Acme Transaction ID 12345", "ref-1")))
		}
		if g.chance(0.5) {
			add("narration", q(g.pick("Acme Corp Fund Transfer", "salary")))
		}
	}
	if g.chance(0.6) {
		add("notes", g.pick(`{"order":"42"}`, `{}`, `null`, `{"countersign_sik":"forged","a":"b"}`))
	}
	g.r.Shuffle(len(ms), func(i, j int) { ms[i], ms[j] = ms[j], ms[i] })
	body := "{"
	for i, jm := range ms {
		if i > 0 {
			body += g.pick(",", ", ", ",\n ")
		}
		body += g.escapeKey(jm.name) + g.pick(":", ": ") + jm.raw
	}
	body += "}"
	headers := map[string]string{"content-type": g.pick("application/json", "application/json; charset=utf-8")}
	if g.chance(0.5) {
		headers["x-refund-idempotency"] = "sdk-" + strconv.FormatUint(r.Uint64(), 36)
	}
	return rail.Request{Method: http.MethodPost, Path: path, Headers: headers, Body: []byte(body)}
}

// TestSpellingsShareOneSIK: requests that differ only in normalised
// members (labels, explicit defaults, notes, order, whitespace, escaped key
// names, the SDK's own key) have one SIK, and another amount has another.
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
		if m.amount == "" {
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
