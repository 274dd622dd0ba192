package sik

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

// RFC 8785 §3.2.2 and §3.2.3 samples, plus structural cases.
func TestCanonicalizeRFC8785(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{
			name: "rfc8785 3.2.2 numbers strings literals",
			in: `{
  "numbers": [333333333.33333329, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`,
			want: `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		{
			name: "rfc8785 3.2.3 sorting by utf-16 code units",
			in: `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`,
			// Raw UTF-8 in the output, spelled with Go escapes here so that no
			// editor can normalise U+FB33 into U+05D3 U+05BC.
			want: "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\"," +
				"\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\"," +
				"\"\U0001F600\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
		{
			name: "nested objects sorted, arrays kept in order",
			in:   `[56, {"d": true, "10": null, "1": [ ]}]`,
			want: `[56,{"1":[],"10":null,"d":true}]`,
		},
		{
			name: "sorting is not locale aware",
			in:   `{"peach":1,"péché":2,"pêche":3,"sin":4}`,
			want: `{"peach":1,"péché":2,"pêche":3,"sin":4}`,
		},
		{
			name: "unicode is not normalised",
			in:   `{"Unnormalized Unicode":"A\u030a"}`,
			want: "{\"Unnormalized Unicode\":\"A\u030a\"}",
		},
		{
			name: "escapes: short forms, lower-case hex, raw DEL and U+2028",
			in:   `"\b\f\n\r\t\u0001\u001F\u007f\u2028\/"`,
			want: "\"\\b\\f\\n\\r\\t\\u0001\\u001f\u007f\u2028/\"",
		},
		{
			name: "html characters are not escaped",
			in:   `"\u003c/script\u003e&"`,
			want: `"</script>&"`,
		},
		{name: "top-level scalar with whitespace", in: " \n\t 42 \r\n", want: `42`},
		{name: "escaped backslash before u is not an escape", in: `"\\ud800"`, want: `"\\ud800"`},
		{name: "surrogate pair in a value", in: `["\ud83d\ude00"]`, want: "[\"\U0001F600\"]"},
		{name: "top-level null", in: `null`, want: `null`},
		{name: "empty containers", in: `{ "a" : [ ] , "b" : { } }`, want: `{"a":[],"b":{}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Canonicalize([]byte(tc.in))
			if err != nil {
				t.Fatalf("Canonicalize: %v", err)
			}
			if string(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// RFC 8785 Appendix B: IEEE 754 bit patterns and their ES6 serialisation.
func TestCanonicalizeNumbersAppendixB(t *testing.T) {
	tests := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"}, // minus zero
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, tc := range tests {
		t.Run(strconv.FormatUint(tc.bits, 16), func(t *testing.T) {
			f := math.Float64frombits(tc.bits)
			// 'e' with 17 digits is an exact decimal spelling of the double,
			// and deliberately not the shortest one, so the test does not
			// assume the formatting it checks.
			in := strconv.FormatFloat(f, 'e', 16, 64)
			got, err := Canonicalize([]byte(in))
			if err != nil {
				t.Fatalf("Canonicalize(%s): %v", in, err)
			}
			if string(got) != tc.want {
				t.Fatalf("Canonicalize(%s) = %s, want %s", in, got, tc.want)
			}
		})
	}
}

// ES6 Number.prototype.toString examples written as JSON text.
func TestCanonicalizeNumberText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"1e+21", "1e+21"},
		{"1e21", "1e+21"},
		{"1E21", "1e+21"},
		{"999999999999999999999", "1e+21"},
		{"100000000000000000000", "100000000000000000000"},
		{"0.000001", "0.000001"},
		{"1e-6", "0.000001"},
		{"1e-7", "1e-7"},
		{"0.0000001", "1e-7"},
		{"-0", "0"},
		{"-0.0", "0"},
		{"0e10", "0"},
		{"333333333.33333329", "333333333.3333333"},
		{"9007199254740992", "9007199254740992"},
		{"9007199254740993", "9007199254740992"}, // rounds: why amounts stop at 2^53-1
		{"-9007199254740992", "-9007199254740992"},
		{"1.5", "1.5"},
		{"4.50", "4.5"},
		{"2e-3", "0.002"},
		{"1E30", "1e+30"},
		{"123456789012345680000", "123456789012345680000"},
		{"1e-400", "0"}, // underflow rounds to zero, as in ECMAScript JSON.parse
		{"5e-324", "5e-324"},
		{"1.7976931348623157e308", "1.7976931348623157e+308"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := Canonicalize([]byte(tc.in))
			if err != nil {
				t.Fatalf("Canonicalize(%s): %v", tc.in, err)
			}
			if string(got) != tc.want {
				t.Fatalf("Canonicalize(%s) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

func TestCanonicalizeRejects(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    error
		message string // substring the error must contain
	}{
		{"empty", ``, ErrInvalidJSON, "empty input"},
		{"whitespace only", "  \n", ErrInvalidJSON, "offset"},
		{"trailing comma in object", `{"a":1,}`, ErrInvalidJSON, "offset"},
		{"trailing comma in array", `[1,]`, ErrInvalidJSON, "offset"},
		{"unquoted key", `{a:1}`, ErrInvalidJSON, "offset"},
		{"single quotes", `{'a':1}`, ErrInvalidJSON, "offset"},
		{"leading zero", `01`, ErrInvalidJSON, "offset"},
		{"leading plus", `+1`, ErrInvalidJSON, "offset"},
		{"bare fraction", `.5`, ErrInvalidJSON, "offset"},
		{"NaN", `NaN`, ErrInvalidJSON, "offset"},
		{"Infinity", `[Infinity]`, ErrInvalidJSON, "offset"},
		{"hex number", `0x10`, ErrInvalidJSON, "offset"},
		{"two top-level values", `1 2`, ErrInvalidJSON, "offset"},
		{"trailing garbage", `{"a":1}x`, ErrInvalidJSON, "offset"},
		{"raw control character in string", "\"a\tb\"", ErrInvalidJSON, "offset"},
		{"bad escape", `"\x41"`, ErrInvalidJSON, "offset"},
		{"unterminated string", `"abc`, ErrInvalidJSON, "offset"},
		{"invalid utf-8 byte", "\"a\xffb\"", ErrInvalidUTF8, "0xff at offset 2"},
		{"truncated utf-8 sequence", "\"\xc3\"", ErrInvalidUTF8, "offset 1"},
		{"overlong utf-8", "\"\xc0\xaf\"", ErrInvalidUTF8, "offset 1"},
		{"utf-8 encoded surrogate", "\"\xed\xa0\x80\"", ErrInvalidUTF8, "offset 1"},
		{"utf-8 bom", "\xef\xbb\xbf{}", ErrInvalidJSON, "offset"},
		{"duplicate key", `{"a":1,"a":2}`, ErrDuplicateKey, `"a"`},
		{"duplicate key same value", `{"a":1,"a":1}`, ErrDuplicateKey, `"a"`},
		{"duplicate key via escape", `{"a":1,"\u0061":2}`, ErrDuplicateKey, `"a"`},
		{"duplicate key nested", `[{"x":{"k":1,"j":2,"k":3}}]`, ErrDuplicateKey, `"k"`},
		{"number overflow", `1e400`, ErrNotIJSON, "double range"},
		{"negative number overflow", `[-1e309]`, ErrNotIJSON, "double range"},
		{"lone high surrogate", `"\ud800"`, ErrNotIJSON, "surrogate"},
		{"lone low surrogate", `"\udc00"`, ErrNotIJSON, "surrogate"},
		{"high surrogate then non-surrogate", `"\ud800\u0041"`, ErrNotIJSON, "surrogate"},
		{"lone surrogate in key", `{"\udfff":1}`, ErrNotIJSON, "surrogate"},
		{"two high surrogates", `"\ud800\ud800\udc00"`, ErrNotIJSON, "offset 1"},
		{"high surrogate before short escape", `["\ud83d\n"]`, ErrNotIJSON, "offset 2"},
		{"high surrogate before raw char", `"\ud83dx"`, ErrNotIJSON, "offset 1"},
	}
	sentinels := []error{ErrInvalidJSON, ErrInvalidUTF8, ErrDuplicateKey, ErrNotIJSON}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Canonicalize([]byte(tc.in))
			if err == nil {
				t.Fatalf("Canonicalize(%q) = %s, want error %v", tc.in, got, tc.want)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %q does not wrap %q", err, tc.want)
			}
			for _, s := range sentinels {
				if s != tc.want && errors.Is(err, s) { //nolint:errorlint // compares sentinel identities, not wrapped errors
					t.Fatalf("error %q also wraps %q", err, s)
				}
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("error %q does not mention %q", err, tc.message)
			}
		})
	}
}

func TestCanonicalizeNilInput(t *testing.T) {
	if _, err := Canonicalize(nil); !errors.Is(err, ErrInvalidJSON) {
		t.Fatalf("Canonicalize(nil) error = %v, want ErrInvalidJSON", err)
	}
}

func TestCanonicalizeDeepNesting(t *testing.T) {
	ok := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	if _, err := Canonicalize([]byte(ok)); err != nil {
		t.Fatalf("depth 10000: %v", err)
	}
	deep := strings.Repeat("[", 10001) + strings.Repeat("]", 10001)
	if _, err := Canonicalize([]byte(deep)); !errors.Is(err, ErrInvalidJSON) {
		t.Fatalf("depth 10001: error = %v, want ErrInvalidJSON", err)
	}
}
