// Package sse splits a server-sent event stream into its lines, as the
// event stream format does: the MCP adapter readdresses an answer's events
// and the answer scrubber reads them, line by line, with one reading.
package sse

import "strings"

// Line is one line of an event stream and the terminator that ended it
// ("" for a last line the stream did not end).
type Line struct{ Text, End string }

// Lines splits an event stream at CRLF, LF or CR, as SSE does.
func Lines(b []byte) []Line {
	var out []Line
	s := string(b)
	for len(s) > 0 {
		i := strings.IndexAny(s, "\r\n")
		if i < 0 {
			out = append(out, Line{Text: s})
			break
		}
		end := s[i : i+1]
		if s[i] == '\r' && i+1 < len(s) && s[i+1] == '\n' {
			end = "\r\n"
		}
		out = append(out, Line{Text: s[:i], End: end})
		s = s[i+len(end):]
	}
	return out
}
