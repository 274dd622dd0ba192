package rail

import "testing"

func TestKeyMemberKeyed(t *testing.T) {
	cases := []struct {
		name    string
		m       KeyMember
		v       string
		present bool
		want    string
		keyed   bool
	}{
		{"absent, no default", KeyMember{}, "", false, "", false},
		{"absent, default normalised", KeyMember{Default: "standard"}, "", false, "", false},
		{"explicit default normalised", KeyMember{Default: "false"}, "false", true, "", false},
		{"other value keyed", KeyMember{Default: "false"}, "true", true, "true", true},
		{"absent, default keyed", KeyMember{Default: "normal", KeyDefault: true}, "", false, "normal", true},
		{"explicit default keyed", KeyMember{Default: "normal", KeyDefault: true}, "normal", true, "normal", true},
		{"empty value", KeyMember{Default: "x"}, "", true, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, keyed := tc.m.Keyed(tc.v, tc.present)
			if got != tc.want || keyed != tc.keyed {
				t.Fatalf("Keyed(%q, %v) = %q, %v; want %q, %v", tc.v, tc.present, got, keyed, tc.want, tc.keyed)
			}
		})
	}
}

func TestOneOfAndMaxLen(t *testing.T) {
	if OneOf("a", "b")("b") != nil || OneOf("a", "b")("B") == nil {
		t.Fatal("OneOf is exact")
	}
	if MaxLen(3)("äöü") != nil || MaxLen(3)("abcd") == nil {
		t.Fatal("MaxLen counts characters")
	}
}
