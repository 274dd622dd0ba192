// Package sse splits a server-sent event stream into its lines and events,
// as the event stream format does: the MCP adapter readdresses an answer's
// events and the answer scrubber reads them, line by line, with one
// reading. Neither holds more of a stream than one event's lines: an
// answer of four million line breaks, held as a slice of lines, took
// 450 MiB to read (found by a review).
package sse

import (
	"fmt"
	"iter"
	"strings"
)

// Line is one line of an event stream and the terminator that ended it
// ("" for a last line the stream did not end).
type Line struct{ Text, End string }

// Lines yields the lines of an event stream, split at CRLF, LF or CR, as
// SSE does.
func Lines(b []byte) iter.Seq[Line] {
	return func(yield func(Line) bool) {
		s := string(b)
		for len(s) > 0 {
			i := strings.IndexAny(s, "\r\n")
			if i < 0 {
				yield(Line{Text: s})
				return
			}
			end := s[i : i+1]
			if s[i] == '\r' && i+1 < len(s) && s[i+1] == '\n' {
				end = "\r\n"
			}
			if !yield(Line{Text: s[:i], End: end}) {
				return
			}
			s = s[i+len(end):]
		}
	}
}

// MaxEventLines bounds the lines of one event Events reads. A server's
// event is a few lines (event, id, one data line of JSON); the bound keeps
// what one event holds in memory small whatever the stream.
const MaxEventLines = 4096

// ErrEventTooLong is Events' refusal of an event of more than
// MaxEventLines lines.
var ErrEventTooLong = fmt.Errorf("an event of the stream has more than %d lines", MaxEventLines)

// Event is an event's lines, its ending blank line excluded, and that blank
// line's terminator. End is "" for the lines after the stream's last blank
// line (an event the stream did not end; its last line may be unended).
// Lines is reused: it is valid until the next event is read.
type Event struct {
	Lines []Line
	End   string
}

// Events yields the events of a stream in order, then the lines after its
// last blank line, if any, as an event with no End. It stops with
// ErrEventTooLong at an event of more than MaxEventLines lines.
func Events(b []byte) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		var ev []Line
		for ln := range Lines(b) {
			if ln.Text == "" && ln.End != "" {
				if !yield(Event{Lines: ev, End: ln.End}, nil) {
					return
				}
				ev = ev[:0]
				continue
			}
			if len(ev) == MaxEventLines {
				yield(Event{}, ErrEventTooLong)
				return
			}
			ev = append(ev, ln)
		}
		if len(ev) > 0 {
			yield(Event{Lines: ev}, nil)
		}
	}
}
