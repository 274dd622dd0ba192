package rail

import (
	"encoding/json"
	"regexp"
	"strconv"
	"testing"
	"unicode/utf16"
)

// TestTrimJSONSpaceTrimsWhatJSONSkips: what is trimmed is exactly what a
// JSON reader skips around a value; any other space stays, so the body
// stays as unreadable here as it is to the rail.
func TestTrimJSONSpaceTrimsWhatJSONSkips(t *testing.T) {
	for in, want := range map[string]string{
		" \t\r\n{}\n ": "{}",
		"{}":           "{}",
		" ":            "",
		"\f{}":         "\f{}",
		"{}\v":         "{}\v",
		"\u00a0{}":     "\u00a0{}",
		"\u0085{}":     "\u0085{}",
		" \f{} ":       "\f{}",
		"\n\u00a0\n":   "\u00a0",
		"":             "",
	} {
		got := string(TrimJSONSpace([]byte(in)))
		if got != want {
			t.Errorf("TrimJSONSpace(%q) = %q, want %q", in, got, want)
		}
		// What is left is JSON exactly when the whole was.
		if got != "" && json.Valid([]byte(got)) != json.Valid([]byte(in)) {
			t.Errorf("TrimJSONSpace(%q) = %q: JSON validity changed", in, got)
		}
	}
}

// TestCheckEscapesRefusesLoneSurrogates: a \u escape of half a surrogate
// pair is refused wherever it stands; a whole pair, an escaped backslash
// before a "u", and a literal U+FFFD are not.
func TestCheckEscapesRefusesLoneSurrogates(t *testing.T) {
	for text, lone := range map[string]bool{
		`{"a":"\ud800"}`:                  true,
		`{"a":"\uD800"}`:                  true,
		`{"a":"\udc00"}`:                  true,
		`{"a":"x\udfffy"}`:                true,
		`{"\ud800":1}`:                    true,
		`{"a":"\ud800\u0041"}`:            true,
		`{"a":"\ud800\ud800"}`:            true,
		`{"a":"\ud800x\udc00"}`:           true,
		`{"a":"\\\ud800"}`:                true,
		`{"a":"\ud83d\ude00"}`:            false,
		`{"a":"\uD83D\uDE00"}`:            false,
		`{"a":"\\ud800"}`:                 false,
		`{"a":"\u0041\n\"\/"}`:            false,
		`{"a":"�"}`:                       false,
		`{"a":"\ufffd","b":[1,"\u00e9"]}`: false,
	} {
		if !json.Valid([]byte(text)) {
			t.Fatalf("%s is not JSON: the case tests nothing", text)
		}
		err := CheckEscapes([]byte(text))
		if (err != nil) != lone {
			t.Errorf("CheckEscapes(%s) = %v, want refused %v", text, err, lone)
		}
	}
}

// escapeRE finds a run of backslashes and the \u escape it may end in: an
// odd run escapes the "u" (the last backslash starts an escape), an even
// run is escaped backslashes and then a plain "u".
var escapeRE = regexp.MustCompile(`(\\+)u([0-9a-fA-F]{4})`)

// loneSurrogate is CheckEscapes's oracle, worked out another way: every
// \u escape with its place, then a high half must end where a low half
// begins, and every low half must be so preceded.
func loneSurrogate(text []byte) bool {
	type unit struct {
		start, end int
		r          rune
	}
	var units []unit
	for _, m := range escapeRE.FindAllSubmatchIndex(text, -1) {
		if (m[3]-m[2])%2 == 0 {
			continue
		}
		v, _ := strconv.ParseUint(string(text[m[4]:m[5]]), 16, 32)
		units = append(units, unit{start: m[3] - 1, end: m[1], r: rune(v)})
	}
	paired := map[int]bool{} // units[i] is the low half of a pair
	for i, u := range units {
		switch {
		case utf16.IsSurrogate(u.r) && u.r < 0xDC00:
			if i+1 == len(units) || units[i+1].start != u.end || units[i+1].r < 0xDC00 || units[i+1].r > 0xDFFF {
				return true
			}
			paired[i+1] = true
		case utf16.IsSurrogate(u.r) && !paired[i]:
			return true
		}
	}
	return false
}

// FuzzCheckEscapes: CheckEscapes never panics, and on JSON it refuses
// exactly the texts with a lone surrogate escape.
func FuzzCheckEscapes(f *testing.F) {
	for _, s := range []string{`{"a":"\ud800"}`, `{"a":"\ud83d\ude00"}`, `{"a":"\\ud800"}`, `"\\\udc00"`, `["\u0041\ud800\udc00\udc00"]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		err := CheckEscapes(text)
		if !json.Valid(text) {
			return
		}
		if want := loneSurrogate(text); (err != nil) != want {
			t.Fatalf("CheckEscapes(%q) = %v; a lone surrogate escape: %v", text, err, want)
		}
	})
}
