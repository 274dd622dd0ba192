package sik

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode"

	"pgregory.net/rapid"
)

func validAction() Action {
	return Action{
		V:           1,
		RailAccount: "acct_1Nv0FGQ9RKHgCVdK",
		Action:      "refund",
		Subject:     "pi_3MtwBwLkdIwHu7ix28a3tqPa",
		AmountMinor: 2500,
		Currency:    "USD",
		Extra:       map[string]string{"reason": "requested_by_customer"},
	}
}

// The canonical forms and SIKs below were computed outside Go (Python
// hashlib + base64.b32encode). They pin the key format: a change here
// re-keys every intent already in a ledger.
func TestKeyGolden(t *testing.T) {
	tests := []struct {
		name      string
		action    Action
		canonical string
		sik       SIK
	}{
		{
			name:      "stripe refund",
			action:    validAction(),
			canonical: `{"action":"refund","amount_minor":2500,"currency":"USD","distinct":"","extra":{"reason":"requested_by_customer"},"rail_account":"acct_1Nv0FGQ9RKHgCVdK","subject":"pi_3MtwBwLkdIwHu7ix28a3tqPa","v":1,"window":""}`,
			sik:       "DPBJNX4N2J6BSDXUF5SSBJUQC63XNKV6",
		},
		{
			name: "razorpay payout with window and distinct, nil extra",
			action: Action{
				V: 1, RailAccount: "rzp_acc_1", Action: "payout", Subject: "fa_00000000000001",
				AmountMinor: 1000000, Currency: "INR", Window: "2026-01-05",
				Distinct: "second payout approved by owner",
			},
			canonical: `{"action":"payout","amount_minor":1000000,"currency":"INR","distinct":"second payout approved by owner","extra":{},"rail_account":"rzp_acc_1","subject":"fa_00000000000001","v":1,"window":"2026-01-05"}`,
			sik:       "BQWTQHUVUSJQ7FOHCV5EWLCC7QGHG5SY",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			canon, err := tc.action.Canonical()
			if err != nil {
				t.Fatalf("Canonical: %v", err)
			}
			if string(canon) != tc.canonical {
				t.Fatalf("canonical\ngot  %s\nwant %s", canon, tc.canonical)
			}
			got, err := Key(tc.action)
			if err != nil {
				t.Fatalf("Key: %v", err)
			}
			if got != tc.sik {
				t.Fatalf("Key = %s, want %s", got, tc.sik)
			}
			// The formula, restated independently of key.go.
			sum := sha256.Sum256([]byte(tc.canonical))
			if want := base32.StdEncoding.EncodeToString(sum[:])[:32]; string(got) != want {
				t.Fatalf("Key = %s, formula gives %s", got, want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Action)
		want   []string // substrings of the error; nil means valid
	}{
		{name: "valid refund", mutate: func(*Action) {}},
		{name: "zero amount is allowed", mutate: func(a *Action) { a.AmountMinor = 0 }},
		{name: "max safe amount", mutate: func(a *Action) { a.AmountMinor = 1<<53 - 1 }},
		{name: "nil extra", mutate: func(a *Action) { a.Extra = nil }},
		{name: "payout with window", mutate: func(a *Action) { a.Action = "payout"; a.Window = "2026-01" }},
		{name: "refund with distinct", mutate: func(a *Action) { a.Distinct = "customer asked twice, owner approved" }},
		{name: "v zero", mutate: func(a *Action) { a.V = 0 }, want: []string{"v is 0, want 1"}},
		{name: "v two", mutate: func(a *Action) { a.V = 2 }, want: []string{"v is 2, want 1"}},
		{name: "empty rail_account", mutate: func(a *Action) { a.RailAccount = "" }, want: []string{"rail_account is empty"}},
		{name: "empty action", mutate: func(a *Action) { a.Action = "" }, want: []string{"action is empty"}},
		{name: "empty subject", mutate: func(a *Action) { a.Subject = "" }, want: []string{"subject is empty"}},
		{name: "padded subject", mutate: func(a *Action) { a.Subject = " pi_1" }, want: []string{"subject", "whitespace"}},
		{name: "non-utf8 subject", mutate: func(a *Action) { a.Subject = "pi_\xff" }, want: []string{"subject is not valid UTF-8"}},
		{name: "negative amount", mutate: func(a *Action) { a.AmountMinor = -1 }, want: []string{"amount_minor is negative (-1)"}},
		{name: "amount beyond 2^53", mutate: func(a *Action) { a.AmountMinor = 1 << 53 }, want: []string{"amount_minor 9007199254740992 exceeds 2^53-1"}},
		{name: "lower-case currency", mutate: func(a *Action) { a.Currency = "usd" }, want: []string{`currency "usd"`}},
		{name: "short currency", mutate: func(a *Action) { a.Currency = "US" }, want: []string{`currency "US"`}},
		{name: "empty currency", mutate: func(a *Action) { a.Currency = "" }, want: []string{`currency ""`}},
		{name: "non-ascii currency", mutate: func(a *Action) { a.Currency = "ÜSD" }, want: []string{"currency"}},
		{name: "empty extra key", mutate: func(a *Action) { a.Extra[""] = "x" }, want: []string{"extra has an empty key"}},
		{name: "non-utf8 extra value", mutate: func(a *Action) { a.Extra["k"] = "\xc3" }, want: []string{`extra["k"] is not valid UTF-8`}},
		{name: "non-utf8 distinct", mutate: func(a *Action) { a.Distinct = "\xff" }, want: []string{"distinct is not valid UTF-8"}},
		{name: "right-to-left override in distinct", mutate: func(a *Action) { a.Distinct = "second \u202eDSU 00.1" },
			want: []string{"distinct holds the invisible character U+202E at byte 7"}},
		{name: "zero-width space in distinct", mutate: func(a *Action) { a.Distinct = "a\u200bb" }, want: []string{"U+200B at byte 1"}},
		{name: "newline in distinct", mutate: func(a *Action) { a.Distinct = "a\nb" }, want: []string{"U+000A at byte 1"}},
		{name: "tag characters in distinct", mutate: func(a *Action) { a.Distinct = "ok\U000E0034\U000E0032" }, want: []string{"U+E0034 at byte 2"}},
		{name: "variation selector in distinct", mutate: func(a *Action) { a.Distinct = "ok\U000E0104" }, want: []string{"U+E0104 at byte 2"}},
		{name: "hangul filler in distinct", mutate: func(a *Action) { a.Distinct = "ok\u3164" }, want: []string{"U+3164 at byte 2"}},
		{name: "refund with window", mutate: func(a *Action) { a.Window = "2026-01-05" }, want: []string{"window must be empty for a refund"}},
		{
			name:   "every problem is reported",
			mutate: func(a *Action) { a.V = 3; a.RailAccount = ""; a.AmountMinor = -5; a.Currency = "x" },
			want:   []string{"v is 3", "rail_account is empty", "amount_minor is negative", `currency "x"`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := validAction()
			a.Extra = maps.Clone(a.Extra)
			tc.mutate(&a)
			err := a.Validate()
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				if _, err := Key(a); err != nil {
					t.Fatalf("Key: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidAction) {
				t.Fatalf("Validate error %v does not wrap ErrInvalidAction", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate error %q does not contain %q", err, w)
				}
			}
			if _, kerr := Key(a); !errors.Is(kerr, ErrInvalidAction) {
				t.Fatalf("Key accepted an invalid action (err %v)", kerr)
			}
		})
	}
}

// Field values that would collide under naive concatenation stay apart.
func TestKeyFieldsDoNotBleed(t *testing.T) {
	tests := []struct {
		name string
		a, b func(*Action)
	}{
		{
			name: "subject swallowing a separator",
			a:    func(a *Action) { a.Subject = "pi_1"; a.Distinct = `x","subject":"pi_2` },
			b:    func(a *Action) { a.Subject = "pi_2"; a.Distinct = `x","subject":"pi_1` },
		},
		{
			name: "extra key and value boundary",
			a:    func(a *Action) { a.Extra = map[string]string{"ab": "c"} },
			b:    func(a *Action) { a.Extra = map[string]string{"a": "bc"} },
		},
		{
			name: "extra entry versus distinct",
			a:    func(a *Action) { a.Extra = map[string]string{"distinct": "x"} },
			b:    func(a *Action) { a.Extra = nil; a.Distinct = "x" },
		},
		{
			name: "rail_account versus subject",
			a:    func(a *Action) { a.RailAccount = "acct_1"; a.Subject = "pi_1" },
			b:    func(a *Action) { a.RailAccount = "pi_1"; a.Subject = "acct_1" },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := validAction(), validAction()
			tc.a(&a)
			tc.b(&b)
			ka, err := Key(a)
			if err != nil {
				t.Fatal(err)
			}
			kb, err := Key(b)
			if err != nil {
				t.Fatal(err)
			}
			if ka == kb {
				t.Fatalf("distinct actions share SIK %s", ka)
			}
		})
	}
}

func TestKeyNilAndEmptyExtraAgree(t *testing.T) {
	a, b := validAction(), validAction()
	a.Extra, b.Extra = nil, map[string]string{}
	ka, errA := Key(a)
	kb, errB := Key(b)
	if errA != nil || errB != nil {
		t.Fatalf("Key: %v, %v", errA, errB)
	}
	if ka != kb {
		t.Fatalf("nil extra keys %s, empty extra keys %s", ka, kb)
	}
}

func TestParseSIK(t *testing.T) {
	tests := []struct {
		name, in string
		ok       bool
	}{
		{"golden", "DPBJNX4N2J6BSDXUF5SSBJUQC63XNKV6", true},
		{"all A", strings.Repeat("A", 32), true},
		{"all 7", strings.Repeat("7", 32), true},
		{"empty", "", false},
		{"31 chars", strings.Repeat("A", 31), false},
		{"33 chars", strings.Repeat("A", 33), false},
		{"lower case", "dpbjnx4n2j6bsdxuf5ssbjuqc63xnkv6", false},
		{"digit 1 is not base32", "1PBJNX4N2J6BSDXUF5SSBJUQC63XNKV6", false},
		{"digit 8 is not base32", "DPBJNX4N2J6BSDXUF5SSBJUQC63XNKV8", false},
		{"padding", "DPBJNX4N2J6BSDXUF5SSBJUQC63XNKV=", false},
		{"stamp is not a SIK", "DPBJNX4N2J6BSDXUF5SSBJUQC63XNKV6-1", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSIK(tc.in)
			if SIK(tc.in).Valid() != tc.ok {
				t.Fatalf("Valid() = %v, want %v", !tc.ok, tc.ok)
			}
			if !tc.ok {
				if !errors.Is(err, ErrInvalidSIK) {
					t.Fatalf("ParseSIK(%q) error = %v, want ErrInvalidSIK", tc.in, err)
				}
				return
			}
			if err != nil || string(got) != tc.in {
				t.Fatalf("ParseSIK(%q) = %q, %v", tc.in, got, err)
			}
		})
	}
}

// readable draws text a person can read: control and format characters
// are refused in a distinct reason.
// readable draws text that reads as written: letters, marks, numbers,
// punctuation, symbols and spaces, but no Hidden character (variation
// selectors are marks, Hangul fillers letters).
func readable() *rapid.Generator[string] {
	return rapid.StringOf(rapid.RuneFrom(nil, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Zs).
		Filter(func(r rune) bool { return !Hidden(r) }))
}

func genAction() *rapid.Generator[Action] {
	return rapid.Custom(func(t *rapid.T) Action {
		action := rapid.SampledFrom([]string{"refund", "payout", "transfer", "charge.capture"}).Draw(t, "action")
		window := ""
		if action != string(KindRefund) {
			window = rapid.SampledFrom([]string{"", "2026-01-05", "2026-W02", "P1D"}).Draw(t, "window")
		}
		return Action{
			V:           Version,
			RailAccount: rapid.StringMatching(`acct_[A-Za-z0-9]{1,16}`).Draw(t, "rail_account"),
			Action:      action,
			Subject:     rapid.StringMatching(`(pi|ch|pay|fa)_[A-Za-z0-9]{1,20}`).Draw(t, "subject"),
			AmountMinor: rapid.Int64Range(0, maxSafeAmount).Draw(t, "amount_minor"),
			Currency:    rapid.StringMatching(`[A-Z]{3}`).Draw(t, "currency"),
			Extra:       rapid.MapOfN(rapid.StringMatching(`[a-z_]{1,8}|.{1,4}`), rapid.String(), 0, 5).Draw(t, "extra"),
			Window:      window,
			Distinct:    rapid.OneOf(rapid.Just(""), readable()).Draw(t, "distinct"),
		}
	})
}

func mustKey(t *rapid.T, a Action) SIK {
	k, err := Key(a)
	if err != nil {
		t.Fatalf("Key(%+v): %v", a, err)
	}
	if !k.Valid() {
		t.Fatalf("Key produced an invalid SIK %q", k)
	}
	return k
}

func TestKeyDeterministicAndOrderFree(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := genAction().Draw(t, "a")
		k1 := mustKey(t, a)
		if k2 := mustKey(t, a); k1 != k2 {
			t.Fatalf("Key not deterministic: %s then %s", k1, k2)
		}
		// Rebuild Extra with its entries inserted in a random order.
		keys := rapid.Permutation(sortedKeys(a.Extra)).Draw(t, "order")
		b := a
		b.Extra = make(map[string]string, len(keys))
		for _, k := range keys {
			b.Extra[k] = a.Extra[k]
		}
		if kb := mustKey(t, b); kb != k1 {
			t.Fatalf("Extra insertion order changed the key: %s vs %s", k1, kb)
		}
	})
}

// The canonical form decodes back to the action, so it loses nothing: two
// actions with different meanings cannot share a canonical form.
func TestCanonicalRoundTrips(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := genAction().Draw(t, "a")
		canon, err := a.Canonical()
		if err != nil {
			t.Fatal(err)
		}
		var back Action
		if err := json.Unmarshal(canon, &back); err != nil {
			t.Fatalf("Unmarshal(%s): %v", canon, err)
		}
		if len(a.Extra) == 0 {
			a.Extra = map[string]string{}
		}
		if !reflect.DeepEqual(a, back) {
			t.Fatalf("round trip\nfrom %+v\nto   %+v", a, back)
		}
	})
}

func TestKeyChangesWithEveryField(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := genAction().Draw(t, "a")
		a.Extra = maps.Clone(a.Extra)
		b := a
		b.Extra = maps.Clone(a.Extra)
		field := rapid.SampledFrom([]string{
			"v", "rail_account", "action", "subject", "amount_minor", "currency", "extra", "window", "distinct",
		}).Draw(t, "field")
		differs := func(old string) func(string) bool { return func(s string) bool { return s != old } }
		switch field {
		case "v":
			b.V = rapid.IntRange(-3, 5).Filter(func(v int) bool { return v != Version }).Draw(t, "v")
			if _, err := Key(b); !errors.Is(err, ErrInvalidAction) {
				t.Fatalf("Key accepted v=%d (err %v)", b.V, err)
			}
			return
		case "rail_account":
			b.RailAccount = rapid.StringMatching(`acct_[A-Za-z0-9]{1,16}`).Filter(differs(a.RailAccount)).Draw(t, "new")
		case "action":
			choices := []string{"payout", "transfer", "charge.capture", "refund"}
			if a.Window != "" {
				choices = choices[:3] // a refund cannot carry a window
			}
			b.Action = rapid.SampledFrom(choices).Filter(differs(a.Action)).Draw(t, "new")
		case "subject":
			b.Subject = rapid.StringMatching(`(pi|ch|pay|fa)_[A-Za-z0-9]{1,20}`).Filter(differs(a.Subject)).Draw(t, "new")
		case "amount_minor":
			b.AmountMinor = rapid.Int64Range(0, maxSafeAmount).Filter(func(v int64) bool { return v != a.AmountMinor }).Draw(t, "new")
		case "currency":
			b.Currency = rapid.StringMatching(`[A-Z]{3}`).Filter(differs(a.Currency)).Draw(t, "new")
		case "extra":
			mutateExtra(t, b.Extra)
		case "window":
			if a.Action == string(KindRefund) {
				b.Action = "payout" // keep the pair valid; window is what must move the key
				a.Action = "payout"
			}
			b.Window = rapid.SampledFrom([]string{"", "2026-01-05", "2026-01-06", "P1D"}).Filter(differs(a.Window)).Draw(t, "new")
		case "distinct":
			b.Distinct = readable().Filter(differs(a.Distinct)).Draw(t, "new")
		}
		ka, kb := mustKey(t, a), mustKey(t, b)
		if ka == kb {
			t.Fatalf("changing %s kept SIK %s\na=%+v\nb=%+v", field, ka, a, b)
		}
	})
}

func mutateExtra(t *rapid.T, m map[string]string) {
	keys := sortedKeys(m)
	op := "add"
	if len(keys) > 0 {
		op = rapid.SampledFrom([]string{"add", "delete", "change"}).Draw(t, "op")
	}
	switch op {
	case "add":
		k := rapid.StringMatching(`[a-z_]{1,8}`).Filter(func(k string) bool { _, ok := m[k]; return !ok }).Draw(t, "key")
		m[k] = rapid.String().Draw(t, "value")
	case "delete":
		delete(m, rapid.SampledFrom(keys).Draw(t, "key"))
	case "change":
		k := rapid.SampledFrom(keys).Draw(t, "key")
		old := m[k]
		m[k] = rapid.String().Filter(func(v string) bool { return v != old }).Draw(t, "value")
	}
}

// sortedKeys keeps rapid's draws reproducible from a seed.
func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

// TestCheckDistinctBoundsTheLength: a reason of MaxDistinct characters
// (not bytes: "é" is two) is accepted, one more is refused, naming both.
func TestCheckDistinctBoundsTheLength(t *testing.T) {
	if err := CheckDistinct(strings.Repeat("é", MaxDistinct)); err != nil {
		t.Fatalf("%d characters: %v", MaxDistinct, err)
	}
	err := CheckDistinct(strings.Repeat("é", MaxDistinct+1))
	if err == nil || !strings.Contains(err.Error(), "501 characters") || !strings.Contains(err.Error(), "at most 500") {
		t.Fatalf("%d characters: %v", MaxDistinct+1, err)
	}
}
