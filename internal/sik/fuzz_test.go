package sik

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"unicode/utf8"
)

func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `null`, `true`, `0`, `-0`, `1e+21`, `1e-7`, `333333333.33333329`,
		`{"b":1,"a":[1,2,{"d":null,"c":"x"}]}`,
		`{"\u20ac":"Euro","\r":"CR","\ufb33":"Dalet","1":"One","\ud83d\ude00":"Grin","\u0080":"C","\u00f6":"o"}`,
		`"\u0000\u001f\u007f\u2028\/"`,
		`{"a":1,"a":2}`, `"\ud800"`, `1e400`, "\"\xff\"", `[1,]`,
		` { "v" : 1 , "extra" : { } } `,
	} {
		f.Add([]byte(s))
	}
	sentinels := []error{ErrInvalidJSON, ErrInvalidUTF8, ErrDuplicateKey, ErrNotIJSON}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Canonicalize(in)
		if err != nil {
			n := 0
			for _, s := range sentinels {
				if errors.Is(err, s) {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("error %q wraps %d sentinels, want 1", err, n)
			}
			return
		}
		if !utf8.Valid(out) || !json.Valid(out) {
			t.Fatalf("output is not valid UTF-8 JSON: %q", out)
		}
		if !json.Valid(in) {
			t.Fatalf("accepted invalid JSON %q", in)
		}
		again, err := Canonicalize(out)
		if err != nil || string(again) != string(out) {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", in, out, again, err)
		}
		// Same meaning: both decode to the same value (keys are unique and
		// numbers round-trip through float64, so this is exact).
		var vin, vout any
		if err := json.Unmarshal(in, &vin); err != nil {
			t.Fatalf("Unmarshal input: %v", err)
		}
		if err := json.Unmarshal(out, &vout); err != nil {
			t.Fatalf("Unmarshal output: %v", err)
		}
		if !reflect.DeepEqual(vin, vout) {
			t.Fatalf("meaning changed: %q -> %q", in, out)
		}
	})
}

func FuzzParseStamp(f *testing.F) {
	for _, s := range []string{
		string(testSIK), string(testSIK) + "-1", string(testSIK) + "-zzz", string(testSIK) + "-0",
		string(testSIK) + "-1000", "", "-1", string(testSIK)[:31] + "-1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		sik, gen, err := ParseStamp(in)
		if err != nil {
			if !errors.Is(err, ErrInvalidStamp) {
				t.Fatalf("error %v does not wrap ErrInvalidStamp", err)
			}
			return
		}
		// Only Stamp's exact output parses: one stamp, one (SIK, generation).
		back, err := Stamp(sik, gen)
		if err != nil || back != in {
			t.Fatalf("ParseStamp(%q) = %s, %d but Stamp gives %q, %v", in, sik, gen, back, err)
		}
		if err := checkAllRails(in); err != nil {
			t.Fatalf("parsed stamp %q breaks a rail rule: %v", in, err)
		}
	})
}
