package credential

import (
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
)

func TestGenerateHashRoundTrip(t *testing.T) {
	secret, hash, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, Prefix) {
		t.Fatalf("secret %q lacks prefix", secret)
	}
	got, err := Hash(secret)
	if err != nil {
		t.Fatalf("Hash(generated): %v", err)
	}
	if got != hash || got != sha256.Sum256([]byte(secret)) {
		t.Fatal("hash of generated secret differs")
	}
	other, _, _ := Generate()
	if other == secret {
		t.Fatal("two generated secrets are equal")
	}
}

func TestHashRejectsMalformed(t *testing.T) {
	good, _, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, in string }{
		{"empty", ""},
		{"rail key", "sk_test_4eC39HqLyjWDarjtT1zdp7dc"},
		{"wrong prefix", "csx_" + good[4:]},
		{"short", good[:len(good)-1]},
		{"long", good + "a"},
		{"bad alphabet", good[:len(good)-1] + "1"},
		{"upper case", strings.ToUpper(good)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Hash(tc.in); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Hash(%q) = %v, want ErrMalformed", tc.in, err)
			}
		})
	}
}

func TestNewID(t *testing.T) {
	id, err := NewID("agt")
	if err != nil {
		t.Fatal(err)
	}
	if len(id) != len("agt_")+20 || !strings.HasPrefix(id, "agt_") {
		t.Fatalf("id %q has the wrong shape", id)
	}
	for _, r := range id[4:] {
		if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyz234567", r) {
			t.Fatalf("id %q has %q outside the id alphabet", id, r)
		}
	}
}

func FuzzHash(f *testing.F) {
	good, _, _ := Generate()
	f.Add(good)
	f.Add("csk_")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := Hash(s)
		if err == nil && h != sha256.Sum256([]byte(s)) {
			t.Fatal("accepted secret hashed wrongly")
		}
	})
}
