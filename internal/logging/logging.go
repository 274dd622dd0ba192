// Package logging builds the process logger: log/slog to stderr, JSON by
// default, with secrets redacted whatever the caller passes.
package logging

import (
	"io"
	"log/slog"
	"strings"
)

// Redacted replaces the value of every sensitive attribute.
const Redacted = "[REDACTED]"

// sensitive names attribute keys whose values are never written, matched
// case-insensitively on the last path element of the key.
var sensitive = []string{"authorization", "cookie", "set-cookie", "credential", "secret", "password", "rail_key", "api_key", "token", "x-api-key"}

// IsSensitive reports whether an attribute (or header) of this name must be
// redacted.
func IsSensitive(key string) bool {
	k := strings.ToLower(key)
	for _, s := range sensitive {
		if k == s || strings.HasSuffix(k, "."+s) || strings.HasSuffix(k, "_"+s) {
			return true
		}
	}
	return false
}

// New returns a logger writing to w in format ("json" or "text") at level.
func New(w io.Writer, format, level string) *slog.Logger {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		lv = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lv, ReplaceAttr: redact}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

func redact(_ []string, a slog.Attr) slog.Attr {
	if IsSensitive(a.Key) {
		return slog.String(a.Key, Redacted)
	}
	return a
}
