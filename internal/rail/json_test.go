package rail

import (
	"encoding/json"
	"testing"
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
