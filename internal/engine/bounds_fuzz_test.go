package engine

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzBoundedRequestParts: the request parts a span quotes (the agent's
// method, host and path) come out valid UTF-8 when they went in so, within
// the bounds the decision record keeps: what went in, or a prefix of it
// marked "…" as cut.
func FuzzBoundedRequestParts(f *testing.F) {
	f.Add("/v1/refunds/" + strings.Repeat("x", 3000))
	f.Add("héllo€\U0001F4B8/?q=1")
	f.Add(strings.Repeat("€", 1000))
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return // proto3 strings, validated before they get here
		}
		for _, c := range []struct {
			name      string
			got, from string
			max       int
		}{
			{"method", BoundedMethod(s), s, maxHostBytes},
			{"host", BoundedHost(s), s, maxHostBytes},
			{"path", BoundedPath(s), pathOnly(s), maxPathBytes},
		} {
			whole := c.got == c.from
			cut := strings.HasSuffix(c.got, "…") && strings.HasPrefix(c.from, strings.TrimSuffix(c.got, "…"))
			if !utf8.ValidString(c.got) || len(c.got) > c.max || (!whole && !cut) {
				t.Fatalf("%s of %q = %q (%d bytes, valid UTF-8 %v), want it whole or a valid prefix marked cut, at most %d bytes",
					c.name, s, c.got, len(c.got), utf8.ValidString(c.got), c.max)
			}
		}
	})
}
