package sik

import (
	"encoding/json"
	"testing"

	"pgregory.net/rapid"
)

// jcsOf is the canonical form through the general path: encoding/json,
// then the RFC 8785 library (Canonicalize).
func jcsOf(t interface{ Fatalf(string, ...any) }, a Action) []byte {
	if a.Extra == nil {
		a.Extra = map[string]string{}
	}
	raw, err := json.Marshal(a)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	out, err := Canonicalize(raw)
	if err != nil {
		t.Fatalf("canonicalize %s: %v", raw, err)
	}
	return out
}

// anyString draws valid UTF-8 from the runes where JSON encoders differ:
// the controls (each short escape and the \u00xx ones), the quote and the
// backslash, what encoding/json escapes for HTML (<, >, &) and U+2028/9,
// DEL, the last characters of the Basic Multilingual Plane (U+E000 to
// U+FFFF, which sort after surrogate pairs in UTF-16), characters above
// U+FFFF, and plain letters.
func anyString() *rapid.Generator[string] {
	special := []rune{0x00, 0x01, '\b', '\t', '\n', 0x0B, '\f', '\r', 0x1F, ' ', '"', '\\', '/', '<', '>', '&', 0x7F, 0x80, 0xA0,
		0x2028, 0x2029, 0xD7FF, 0xE000, 0xFEFF, 0xFFFD, 0xFFFF, 0x10000, 0x1F600, 0x10FFFF, 'a', 'z', 'A', '0', '_'}
	r := rapid.OneOf(rapid.SampledFrom(special), rapid.Rune(), rapid.Int32Range('a', 'e'))
	return rapid.Custom(func(t *rapid.T) string {
		return string(rapid.SliceOfN(r, 0, 8).Draw(t, "runes"))
	})
}

// TestActionCanonicalIsJCS: the direct encoding of an action is, byte for
// byte, what the RFC 8785 library makes of its JSON, so every SIK in a
// ledger is the key it was before the direct encoding (and, through
// TestKeyGolden's vectors, the key it has always been).
func TestActionCanonicalIsJCS(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := anyString()
		a := Action{
			V: rapid.IntRange(0, 3).Draw(t, "v"), RailAccount: s.Draw(t, "rail_account"), Action: s.Draw(t, "action"),
			Subject: s.Draw(t, "subject"), AmountMinor: rapid.Int64Range(-maxSafeAmount, maxSafeAmount).Draw(t, "amount"),
			Currency: s.Draw(t, "currency"), Window: s.Draw(t, "window"), Distinct: s.Draw(t, "distinct"),
			Extra: rapid.MapOfN(s, s, 0, 6).Draw(t, "extra"),
		}
		if rapid.Bool().Draw(t, "nil extra") {
			a.Extra = nil
		}
		got, want := appendCanonical(nil, a), jcsOf(t, a)
		if string(got) != string(want) {
			t.Fatalf("direct %q\nJCS    %q", got, want)
		}
	})
}

func BenchmarkKeyed(b *testing.B) {
	a := Action{V: Version, RailAccount: "acct_1", Action: "refund", Subject: "pi_3Mtw", Currency: "USD", AmountMinor: 1000,
		Extra: map[string]string{"countersign.alias": "request"}}
	for b.Loop() {
		if _, _, err := a.Keyed(); err != nil {
			b.Fatal(err)
		}
	}
}
