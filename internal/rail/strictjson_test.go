package rail

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestCheckStrictJSON(t *testing.T) {
	object := StrictJSON{Object: true}
	deep := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	for _, tc := range []struct {
		name  string
		body  string
		opts  StrictJSON
		fault JSONFault // 0: accepted
		field string    // JSONError.Field
		name2 string    // JSONError.Name for JSONTwice
		prev  string    // JSONError.Prev for JSONTwice
	}{
		{name: "object", body: `{"a":1,"b":{"c":[{"d":1},{"d":2}]}}`, opts: object},
		{name: "JSON space around", body: " \t{\"a\":1}\r\n", opts: object},
		{name: "one name in two objects", body: `{"a":{"x":1},"b":{"x":2}}`, opts: object},
		{name: "paired surrogate", body: `{"a":"\ud83d\ude00"}`, opts: object},
		{name: "any value without Object", body: `[1,"x",null]`},
		{name: "scalar without Object", body: `"x"`},
		{name: "array with Object", body: `[{"a":1}]`, opts: object, fault: JSONNotObject, field: "body"},
		{name: "scalar with Object", body: `5`, opts: object, fault: JSONNotObject, field: "body"},
		{name: "empty", body: ``, fault: JSONTruncated, field: "body"},
		{name: "unclosed", body: `{"a":1`, fault: JSONTruncated, field: "body"},
		{name: "two values", body: `{"a":1}{}`, fault: JSONTrailing, field: "body"},
		{name: "syntax", body: `{"a":1,}`, fault: JSONSyntax, field: "body"},
		{name: "not UTF-8", body: "{\"a\":\"\xff\"}", fault: JSONNotUTF8, field: "body"},
		{name: "lone high surrogate", body: `{"a":"\ud800"}`, fault: JSONLoneSurrogate, field: "body"},
		{name: "lone low surrogate in a name", body: `{"\udc00":1}`, fault: JSONLoneSurrogate, field: "body"},
		{name: "depth 64 by default", body: deep(64)},
		{name: "depth 65 by default", body: deep(65), fault: JSONTooDeep, field: "body"},
		{name: "depth 32 of 32", body: deep(32), opts: StrictJSON{MaxDepth: 32}},
		{name: "depth 33 of 32", body: deep(33), opts: StrictJSON{MaxDepth: 32}, fault: JSONTooDeep, field: "body"},
		{name: "arrays count as depth", body: strings.Repeat("[", 3) + strings.Repeat("]", 3), opts: StrictJSON{MaxDepth: 2}, fault: JSONTooDeep, field: "body"},
		{name: "twice at the top", body: `{"a":1,"a":2}`, fault: JSONTwice, field: "a", name2: "a", prev: "a"},
		{name: "twice in case", body: `{"amount":5000,"AMOUNT":100}`, fault: JSONTwice, field: "AMOUNT", name2: "AMOUNT", prev: "amount"},
		{name: "Kelvin sign is k", body: `{"o":{"k":1,"\u212a":2}}`, fault: JSONTwice, field: "o.\u212a", name2: "\u212a", prev: "k"},
		{name: "long s is s, in an array", body: `{"o":[{"s":1,"ſ":2}]}`, fault: JSONTwice, field: "o[].ſ", name2: "ſ", prev: "s"},
		{name: "path through a top-level array", body: `[[{"x":1,"x":2}]]`, fault: JSONTwice, field: "[][].x", name2: "x", prev: "x"},
		{name: "path of params", body: `{"params":{"arguments":{"amount":1,"amount":2}}}`, fault: JSONTwice, field: "params.arguments.amount", name2: "amount", prev: "amount"},
		{name: "empty name twice", body: `{"":1,"":2}`, fault: JSONTwice, field: "", name2: "", prev: ""},
		{name: "ExactNames keeps case apart", body: `{"amount":5000,"AMOUNT":100}`, opts: StrictJSON{ExactNames: true}},
		{name: "ExactNames still refuses twice", body: `{"o":{"a":1,"a":2}}`, opts: StrictJSON{ExactNames: true}, fault: JSONTwice, field: "o.a", name2: "a", prev: "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckStrictJSON([]byte(tc.body), tc.opts)
			if tc.fault == 0 {
				if err != nil {
					t.Fatalf("CheckStrictJSON(%.60q) = %v, want it accepted", tc.body, err)
				}
				return
			}
			var e *JSONError
			if !errors.As(err, &e) {
				t.Fatalf("CheckStrictJSON(%.60q) = %v, want a *JSONError", tc.body, err)
			}
			if e.Fault != tc.fault || e.Field() != tc.field || e.Name != tc.name2 || e.Prev != tc.prev {
				t.Errorf("CheckStrictJSON(%.60q) = fault %d field %q name %q prev %q, want %d %q %q %q",
					tc.body, e.Fault, e.Field(), e.Name, e.Prev, tc.fault, tc.field, tc.name2, tc.prev)
			}
		})
	}
}

// TestJSONErrorText pins the texts the callers show: CheckAnswerJSON's
// sentence (Error) and the request parsers' field and detail.
func TestJSONErrorText(t *testing.T) {
	for _, tc := range []struct {
		name, body    string
		opts          StrictJSON
		error, detail string
	}{
		{"not UTF-8", "{\"a\":\"\xff\"}", StrictJSON{}, "the body is not valid UTF-8", "not valid UTF-8"},
		{"syntax", `{"a" 1}`, StrictJSON{}, "the body is not JSON: invalid character '1' after object key", "not JSON: invalid character '1' after object key"},
		{"truncated", `[1`, StrictJSON{}, "the body is truncated JSON", "truncated JSON"},
		{"trailing", `{} 1`, StrictJSON{}, "the body has data after its JSON object", "data after the JSON object"},
		{"not an object", `[]`, StrictJSON{Object: true}, "the body is not a JSON object", "must be a JSON object"},
		{"too deep", `[[[]]]`, StrictJSON{MaxDepth: 2}, "the body is nested deeper than 2", "nested deeper than 2"},
		{"twice", `{"a":1,"a":2}`, StrictJSON{}, `the body has member "a" twice in one object`, "sent twice in one object"},
		{"twice in case", `{"a":1,"A":2}`, StrictJSON{}, `the body has member "A" twice in one object, as "a" and "A": readers that ignore case read them as one`,
			`sent twice in one object (as "a" and "A": servers that ignore case read them as one)`},
		{"lone surrogate", `{"a":"\udfff"}`, StrictJSON{}, ErrLoneSurrogate.Error(), ErrLoneSurrogate.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckStrictJSON([]byte(tc.body), tc.opts)
			var e *JSONError
			if !errors.As(err, &e) {
				t.Fatalf("CheckStrictJSON(%q) = %v, want a *JSONError", tc.body, err)
			}
			if e.Error() != tc.error || e.Detail() != tc.detail {
				t.Errorf("CheckStrictJSON(%q): Error %q, Detail %q; want %q, %q", tc.body, e.Error(), e.Detail(), tc.error, tc.detail)
			}
		})
	}
}

// TestJSONErrorUnwraps: a caller can still tell a lone surrogate and a
// decoder's syntax error apart from the rest.
func TestJSONErrorUnwraps(t *testing.T) {
	if err := CheckAnswerJSON([]byte(`{"a":"\ud800"}`)); !errors.Is(err, ErrLoneSurrogate) {
		t.Errorf("lone surrogate: %v does not wrap ErrLoneSurrogate", err)
	}
	var syn *json.SyntaxError
	if err := CheckAnswerJSON([]byte(`{"a":}`)); !errors.As(err, &syn) {
		t.Errorf("syntax: %v does not wrap a *json.SyntaxError", err)
	}
	if err := CheckAnswerJSON([]byte(`{"a":1,"a":2}`)); errors.Is(err, ErrLoneSurrogate) || errors.As(err, &syn) {
		t.Errorf("twice: %v wraps a cause it does not have", err)
	}
}

func TestFoldName(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{"method", "METHOD", true},
		{"kind", "\u212aind", true}, // KELVIN SIGN folds to k
		{"ſtatus", "status", true},  // LATIN SMALL LETTER LONG S folds to s
		{"\u03c3", "\u03c2", true},  // σ and final ς
		{"amount", "amount_", false},
		{"ticket", "tıcket", false}, // dotless i is not i
		{"é", "É", true},
		{"a", "b", false},
	} {
		if got := foldName(tc.a) == foldName(tc.b); got != tc.same || got != strings.EqualFold(tc.a, tc.b) {
			t.Errorf("foldName(%q) == foldName(%q) is %v, want %v (EqualFold %v)", tc.a, tc.b, got, tc.same, strings.EqualFold(tc.a, tc.b))
		}
	}
}
