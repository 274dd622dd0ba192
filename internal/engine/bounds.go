package engine

import (
	"strings"
	"unicode/utf8"

	"github.com/countersign/countersign/internal/credential"
)

// What a request puts into its decision record, its log lines and its
// spans is bounded, whatever the agent sent: the request id it chose
// (x-request-id, through Envoy or the native API) is kept only if it looks
// like one, and the texts that quote its bytes (a parser's reason, the
// path, the host) are cut. Without it one refusal of a request with a
// 60 KiB amount wrote a 61 KB row, and a 1 MiB request id 1 MiB of WAL
// and 2 MiB of logs, within any limit on how many decisions an agent asks
// for.
const (
	// MaxHeaderBytes bounds a request's headers (names and values, the
	// credential's removed): every header of a money call is kept with its
	// attempt, in a ledger every agent shares and nothing prunes. An SDK's
	// call carries under 2 KiB; 60 junk headers of 8 KiB each through the
	// native API stored 481 KB an ALLOW, 11 MiB a second from one agent at
	// its decision rate (found by a review). A rail answer a native caller
	// reports is held to it too (api.DecisionServer.Commit).
	MaxHeaderBytes = 16 << 10
	// maxExtraBytes bounds a structured action's extra members (names and
	// values), which its intent keeps: a rail's members that make an
	// action what it is are a few short values (found by a review: 480 KiB
	// in one value were kept).
	maxExtraBytes     = 4 << 10
	maxRequestIDBytes = 128
	maxReasonBytes    = 1024
	maxPathBytes      = 2048
	maxHostBytes      = 255
	// requestIDChars are the bytes a kept request id may have.
	requestIDChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:+/=@-"
)

// requestIDOf is raw if it is a plausible request id (1 to 128 bytes of
// ASCII letters, digits and . _ : + / = @ -), and a fresh random one
// (cs_…, credential.NewID) otherwise.
func requestIDOf(raw string) string {
	if len(raw) >= 1 && len(raw) <= maxRequestIDBytes && strings.Trim(raw, requestIDChars) == "" {
		return raw
	}
	id, err := credential.NewID("cs")
	if err != nil {
		return "cs" // crypto/rand does not fail (Go 1.24+); a fixed id is still not the agent's
	}
	return id
}

// clip is s cut to at most n bytes on a character boundary, ending in "…"
// when it was cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const more = "…"
	cut := n - len(more)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more
}

// BoundedMethod is a request's method cut as its decision record cuts it,
// for whatever else quotes it (the ext_authz span).
func BoundedMethod(m string) string { return clip(m, maxHostBytes) }

// BoundedHost is a request's host cut as its decision record cuts it.
func BoundedHost(h string) string { return clip(h, maxHostBytes) }

// BoundedPath is a request's path without its query, cut as its decision
// record cuts it.
func BoundedPath(p string) string { return clip(pathOnly(p), maxPathBytes) }

// HeaderBytes is the size of headers (or of any map of strings: a
// structured action's extra), names and values.
func HeaderBytes(headers map[string]string) int {
	n := 0
	for k, v := range headers {
		n += len(k) + len(v)
	}
	return n
}
