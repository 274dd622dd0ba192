package secrets

import (
	"bytes"
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/countersign/countersign/internal/sse"
)

// An MCP server answers a POST (and its GET stream) with JSON or with a
// text/event-stream; a read's answer in either reaches the agent only
// without client secrets (scrub.go). The agent is read as the adversary:
// it sees the stream's bytes, not only the events a client dispatches, so
// every line is read, and one that could hide a secret from this reading
// withholds the answer.

// Why an event stream cannot be scrubbed. The messages name the place,
// never the content (they reach the agent).
var (
	errStreamNotUTF8      = errors.New("its event stream is not UTF-8")
	errStreamField        = errors.New("its event stream has a line of a field other than data, event, id or retry")
	errStreamDataJSON     = errors.New("an event of its event stream carries data that is not JSON")
	errStreamFieldHeld    = errors.New("its event stream carries a client secret outside an event's data")
	errStreamEventTooLong = errors.New("an event of its event stream has too many lines")
)

// ScrubEventStream returns the event stream body with ScrubJSON applied
// to the data of each of its events, and how many secrets it removed. The
// stream is read as the server-sent events grammar has it (lines end at
// CRLF, LF or CR; a blank line ends an event; "data" lines, their one
// leading space dropped, are joined with LF; one leading byte order mark
// is skipped), strictly: every line is a comment or a data, event, id or
// retry field; an event's data is empty or one JSON value, whatever the
// event's type (dispatched or not, a last event the stream did not end
// included); and no comment or other field holds a client secret. An
// event whose data lost a secret is written with the scrubbed JSON as its
// data, at the place of its first data line; every other line keeps its
// bytes. With nothing removed, body itself is returned.
func ScrubEventStream(body []byte) ([]byte, int, error) {
	if !utf8.Valid(body) {
		return nil, 0, errStreamNotUTF8
	}
	rest := body
	var out bytes.Buffer
	out.Grow(len(body))
	if bom := "\ufeff"; bytes.HasPrefix(rest, []byte(bom)) {
		out.WriteString(bom)
		rest = rest[len(bom):]
	}
	removed := 0
	// The lines after the last blank one come last, with no End: an event
	// the stream did not end, which a client does not dispatch; its bytes
	// reach the agent all the same.
	for ev, err := range sse.Events(rest) {
		if err != nil {
			return nil, 0, errStreamEventTooLong
		}
		n, err := scrubEvent(&out, ev.Lines)
		if err != nil {
			return nil, 0, err
		}
		removed += n
		out.WriteString(ev.End)
	}
	if removed == 0 {
		return body, 0, nil
	}
	return out.Bytes(), removed, nil
}

// scrubEvent writes to out the lines of one event (its ending blank line
// excluded), its data scrubbed, and returns how many secrets it removed.
func scrubEvent(out *bytes.Buffer, lines []sse.Line) (int, error) {
	var data []string
	first, hasData := -1, false
	for i, ln := range lines {
		if strings.HasPrefix(ln.Text, ":") { // a comment
			if clientSecretRE.MatchString(ln.Text) {
				return 0, errStreamFieldHeld
			}
			continue
		}
		name, value, _ := strings.Cut(ln.Text, ":")
		value = strings.TrimPrefix(value, " ")
		switch name {
		case "data":
			data, hasData = append(data, value), true
			if first < 0 {
				first = i
			}
		case "event", "id", "retry":
			if clientSecretRE.MatchString(value) {
				return 0, errStreamFieldHeld
			}
		default:
			return 0, errStreamField
		}
	}
	var scrubbed []byte
	n := 0
	if joined := strings.Join(data, "\n"); hasData && joined != "" {
		// Empty data is no value (an MCP server primes a resumable stream
		// with an event of an id and empty data).
		var err error
		if scrubbed, n, err = ScrubJSON([]byte(joined)); err != nil {
			return 0, errStreamDataJSON
		}
	}
	for i, ln := range lines {
		if name, _, _ := strings.Cut(ln.Text, ":"); n == 0 || name != "data" {
			out.WriteString(ln.Text)
			out.WriteString(ln.End)
			continue
		}
		if i != first {
			continue // the event's other data lines: written with its first
		}
		// ScrubJSON, having removed something, writes no space
		// between tokens: one line. Should it keep a line break (LF, from
		// the joining), each line is a data line of its own.
		sep := ln.End
		if sep == "" {
			sep = "\n"
		}
		out.WriteString("data: " + strings.ReplaceAll(string(scrubbed), "\n", sep+"data: ") + ln.End)
	}
	return n, nil
}
