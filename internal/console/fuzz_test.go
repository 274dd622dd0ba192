package console_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/console"
	"github.com/countersign/countersign/internal/ownerauth"
)

// FuzzParseSignIn: whatever the body, the parser answers without
// panicking, and a token it accepts is printable ASCII within bounds and
// parses back to itself.
func FuzzParseSignIn(f *testing.F) {
	for _, s := range []string{`{"token":"cso_abc"}`, `{"token":"a","token":"b"}`, `{"Token":"x"}`, `{}`, `[]`, `"x"`,
		`{"token":"\u0000"}`, `{"token":"x"} `, `{"token":"x"}{}`, `{"token":null}`, "\xff", `{"token":"` + strings.Repeat("a", 300) + `"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, err := console.ParseSignIn(b)
		if err != nil {
			if tok != "" {
				t.Fatalf("a refusal returned a token %q", tok)
			}
			return
		}
		if tok == "" || len(tok) > 256 {
			t.Fatalf("accepted token of %d bytes", len(tok))
		}
		for i := 0; i < len(tok); i++ {
			if tok[i] <= 0x20 || tok[i] >= 0x7f {
				t.Fatalf("accepted token with byte %#x", tok[i])
			}
		}
		// Accepting is stable: the token, encoded alone as JSON, parses to
		// itself (a token holding a quote or a backslash is escaped: pasted
		// in raw, "\\\"" read back as "\"").
		body, err := json.Marshal(map[string]string{"token": tok})
		if err != nil {
			t.Fatal(err)
		}
		if again, err := console.ParseSignIn(body); err != nil || again != tok {
			t.Fatalf("token %q does not parse back from %s: %q %v", tok, body, again, err)
		}
	})
}

// FuzzParseSessionKey: whatever the values of X-Countersign-Session-Key,
// the parser answers without panicking, and accepts only one value that
// is a key half exactly (52 characters of lower-case base32, one
// spelling), returned unchanged.
func FuzzParseSessionKey(f *testing.F) {
	m, _, err := ownerauth.MintSession()
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{m.Key, m.Cookie, m.Whole(), "", " " + m.Key, strings.ToUpper(m.Key), m.Key[:51] + "b", m.Key + "\x00", m.Key + "," + m.Key} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, v string, twice bool) {
		vals := []string{v}
		if twice {
			vals = append(vals, v)
		}
		key, err := console.ParseSessionKey(vals)
		if err != nil {
			if key != "" {
				t.Fatalf("a refusal returned %q", key)
			}
			return
		}
		if twice || key != v || len(key) != 52 || !ownerauth.ValidSessionKey(key) {
			t.Fatalf("accepted %q (twice %v) as %q", v, twice, key)
		}
		for i := 0; i < len(key); i++ {
			if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyz234567", rune(key[i])) {
				t.Fatalf("accepted key with byte %#x", key[i])
			}
		}
	})
}
