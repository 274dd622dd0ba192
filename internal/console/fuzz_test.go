package console_test

import (
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/console"
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
		// Accepting is stable: the token, re-encoded alone, parses to itself.
		if again, err := console.ParseSignIn([]byte(`{"token":"` + tok + `"}`)); err != nil && !strings.ContainsAny(tok, `"\`) || err == nil && again != tok {
			t.Fatalf("token %q does not parse back: %q %v", tok, again, err)
		}
	})
}
