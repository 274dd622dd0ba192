package sik

import (
	"errors"
	"math"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

const testSIK SIK = "DPBJNX4N2J6BSDXUF5SSBJUQC63XNKV6"

func TestStamp(t *testing.T) {
	tests := []struct {
		name    string
		sik     SIK
		gen     uint32
		want    string
		wantErr error
	}{
		{name: "generation 0 is the SIK", sik: testSIK, gen: 0, want: string(testSIK)},
		{name: "generation 1", sik: testSIK, gen: 1, want: string(testSIK) + "-1"},
		{name: "generation 9", sik: testSIK, gen: 9, want: string(testSIK) + "-9"},
		{name: "generation 10", sik: testSIK, gen: 10, want: string(testSIK) + "-a"},
		{name: "generation 35", sik: testSIK, gen: 35, want: string(testSIK) + "-z"},
		{name: "generation 36", sik: testSIK, gen: 36, want: string(testSIK) + "-10"},
		{name: "generation 1296", sik: testSIK, gen: 1296, want: string(testSIK) + "-100"},
		{name: "max generation", sik: testSIK, gen: MaxGeneration, want: string(testSIK) + "-zzz"},
		{name: "max generation + 1", sik: testSIK, gen: MaxGeneration + 1, wantErr: ErrGenerationTooLarge},
		{name: "max uint32", sik: testSIK, gen: math.MaxUint32, wantErr: ErrGenerationTooLarge},
		{name: "empty SIK", sik: "", gen: 0, wantErr: ErrInvalidSIK},
		{name: "lower-case SIK", sik: SIK(strings.ToLower(string(testSIK))), gen: 1, wantErr: ErrInvalidSIK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Stamp(tc.sik, tc.gen)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Stamp error = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Stamp = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestHeaderStamp(t *testing.T) {
	tests := []struct {
		name       string
		rail       Rail
		kind       Kind
		wantHeader string
		wantErr    error
	}{
		{"stripe refund", RailStripe, KindRefund, "Idempotency-Key", nil},
		{"stripe payout", RailStripe, KindPayout, "Idempotency-Key", nil},
		{"stripe transfer", RailStripe, KindTransfer, "Idempotency-Key", nil},
		{"razorpay refund", RailRazorpay, KindRefund, "X-Refund-Idempotency", nil},
		{"razorpay payout", RailRazorpay, KindPayout, "X-Payout-Idempotency", nil},
		{"razorpay transfer", RailRazorpay, KindTransfer, "X-Transfer-Idempotency", nil},
		{"stripe unknown kind", RailStripe, "capture", "", ErrUnsupportedKind},
		{"razorpay unknown kind", RailRazorpay, "", "", ErrUnsupportedKind},
		{"unknown rail", "paypal", KindRefund, "", ErrUnknownRail},
		{"rail names are case-sensitive", "Stripe", KindRefund, "", ErrUnknownRail},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, gen := range []uint32{0, 1, MaxGeneration} {
				header, value, err := HeaderStamp(tc.rail, tc.kind, testSIK, gen)
				if tc.wantErr != nil {
					if !errors.Is(err, tc.wantErr) || header != "" || value != "" {
						t.Fatalf("HeaderStamp = %q, %q, %v; want error %v", header, value, err, tc.wantErr)
					}
					continue
				}
				if err != nil || header != tc.wantHeader {
					t.Fatalf("HeaderStamp header = %q, %v; want %q", header, err, tc.wantHeader)
				}
				if err := headerRules[header](value); err != nil {
					t.Fatalf("generation %d value %q breaks the %s rule: %v", gen, value, header, err)
				}
				sik, g, err := ParseStamp(value)
				if err != nil || sik != testSIK || g != gen {
					t.Fatalf("ParseStamp(%q) = %s, %d, %v; want %s, %d", value, sik, g, err, testSIK, gen)
				}
			}
			if tc.wantErr == nil {
				if _, _, err := HeaderStamp(tc.rail, tc.kind, testSIK, MaxGeneration+1); !errors.Is(err, ErrGenerationTooLarge) {
					t.Fatalf("HeaderStamp past MaxGeneration: err = %v", err)
				}
			}
		})
	}
}

func TestBodyStamp(t *testing.T) {
	tests := []struct {
		name      string
		rail      Rail
		wantField string
		wantErr   error
	}{
		{"stripe metadata", RailStripe, "metadata[countersign_sik]", nil},
		{"razorpay notes", RailRazorpay, "notes.countersign_sik", nil},
		{"unknown rail", "adyen", "", ErrUnknownRail},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			field, value, err := BodyStamp(tc.rail, testSIK, 7)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("BodyStamp error = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil || field != tc.wantField || value != string(testSIK)+"-7" {
				t.Fatalf("BodyStamp = %q, %q, %v", field, value, err)
			}
		})
	}
}

func TestParseStampRejects(t *testing.T) {
	s := string(testSIK)
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"short", s[:31]},
		{"lower-case SIK", strings.ToLower(s)},
		{"non-base32 SIK", "1" + s[1:]},
		{"separator without generation", s + "-"},
		{"generation zero", s + "-0"},
		{"leading zero", s + "-01"},
		{"upper-case generation", s + "-Z"},
		{"four digits", s + "-1000"},
		{"underscore separator", s + "_1"},
		{"space separator", s + " 1"},
		{"sign", s + "-+1"},
		{"trailing space", s + " "},
		{"punctuation", s + "-!"},
		{"non-ascii generation", s + "-é"},
		{"far too long", s + strings.Repeat("A", 300)},
		{"SIK plus base32 char", s + "A"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sik, gen, err := ParseStamp(tc.in)
			if !errors.Is(err, ErrInvalidStamp) {
				t.Fatalf("ParseStamp(%q) = %s, %d, %v; want ErrInvalidStamp", tc.in, sik, gen, err)
			}
		})
	}
}

// Exhaustive: every generation that fits round-trips, obeys every rail's
// rule, and has a stamp of its own.
func TestStampEveryGeneration(t *testing.T) {
	seen := make(map[string]uint32, MaxGeneration+1)
	for gen := uint32(0); gen <= MaxGeneration; gen++ {
		v, err := Stamp(testSIK, gen)
		if err != nil {
			t.Fatalf("Stamp(gen %d): %v", gen, err)
		}
		if err := checkAllRails(v); err != nil {
			t.Fatalf("gen %d stamp %q: %v", gen, v, err)
		}
		if prev, dup := seen[v]; dup {
			t.Fatalf("generations %d and %d share stamp %q", prev, gen, v)
		}
		seen[v] = gen
		sik, g, err := ParseStamp(v)
		if err != nil || sik != testSIK || g != gen {
			t.Fatalf("ParseStamp(%q) = %s, %d, %v; want gen %d", v, sik, g, err, gen)
		}
	}
}

func genSIK() *rapid.Generator[SIK] {
	return rapid.Custom(func(t *rapid.T) SIK {
		return SIK(rapid.StringMatching(`[A-Z2-7]{32}`).Draw(t, "sik"))
	})
}

func TestStampRoundTripProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		sik := genSIK().Draw(t, "sik")
		gen := rapid.Uint32Range(0, MaxGeneration).Draw(t, "gen")
		rail := rapid.SampledFrom([]Rail{RailStripe, RailRazorpay}).Draw(t, "rail")
		kind := rapid.SampledFrom([]Kind{KindRefund, KindPayout, KindTransfer}).Draw(t, "kind")
		header, value, err := HeaderStamp(rail, kind, sik, gen)
		if err != nil {
			t.Fatalf("HeaderStamp: %v", err)
		}
		if err := headerRules[header](value); err != nil {
			t.Fatalf("%s: %v", header, err)
		}
		if err := checkAllRails(value); err != nil {
			t.Fatal(err)
		}
		_, body, err := BodyStamp(rail, sik, gen)
		if err != nil || body != value {
			t.Fatalf("BodyStamp value %q, %v; header value %q", body, err, value)
		}
		gotSIK, gotGen, err := ParseStamp(value)
		if err != nil || gotSIK != sik || gotGen != gen {
			t.Fatalf("ParseStamp(%q) = %s, %d, %v", value, gotSIK, gotGen, err)
		}
	})
}

func TestStampOverflowProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		sik := genSIK().Draw(t, "sik")
		gen := rapid.Uint32Range(MaxGeneration+1, math.MaxUint32).Draw(t, "gen")
		if v, err := Stamp(sik, gen); !errors.Is(err, ErrGenerationTooLarge) {
			t.Fatalf("Stamp(gen %d) = %q, %v; want ErrGenerationTooLarge", gen, v, err)
		}
		if _, _, err := HeaderStamp(RailRazorpay, KindPayout, sik, gen); !errors.Is(err, ErrGenerationTooLarge) {
			t.Fatalf("HeaderStamp(gen %d): %v", gen, err)
		}
		if _, _, err := BodyStamp(RailStripe, sik, gen); !errors.Is(err, ErrGenerationTooLarge) {
			t.Fatalf("BodyStamp(gen %d): %v", gen, err)
		}
	})
}
