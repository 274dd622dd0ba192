package secrets

import (
	"bytes"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// The answer of Stripe's agent toolkit to list_payment_intents: the
// PaymentIntents JSON.stringify'd whole into a text item.
const piListText = `[{"id":"pi_1","object":"payment_intent","amount":2500,"client_secret":"pi_1_secret_abc","status":"requires_payment_method"}]`

var mcpListAnswer = `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":` + strconv.Quote(piListText) + `},{"type":"text","text":"kept"}]}}`

func TestScrubEventStream(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{": c\n\n", ": c\n\n"},
		{"data: {}\n\n", "data: {}\n\n"},
		{"data: {\"client_secret\":\"x\",\"a\":1}\n\n", "data: {\"a\":1}\n\n"},
		{"data:{\"client_secret\":\"x\"}\r\r", "data: {}\r\r"},
		{"\ufeffdata: \"pi_1_secret_x\"\n\n", "\ufeffdata: \"" + Redacted + "\"\n\n"},
		{"data: [1,\ndata: \"pi_1_secret_x\",\ndata: 2]\nid: 3\n\n", "data: [1,\"" + Redacted + "\",2]\nid: 3\n\n"},
		{"data\ndata: \"pi_1_secret_x\"\n\n", "data: \"" + Redacted + "\"\n\n"},
		// An event the stream did not end is scrubbed all the same.
		{"data: {}\n\nevent: x\ndata: \"pi_1_secret_x\"", "data: {}\n\nevent: x\ndata: \"" + Redacted + "\""},
		// A field that names client_secret but holds none is kept.
		{"event: client_secret\ndata: {}\n\n", "event: client_secret\ndata: {}\n\n"},
		{"retry: 1000\nevent: endpoint\ndata: \"/x\"\n\n", "retry: 1000\nevent: endpoint\ndata: \"/x\"\n\n"},
	} {
		got, _, err := ScrubEventStream([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("ScrubEventStream(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"data: x\n\n", "data: {}\nfoo: 1\n\n", "dataX: {}\n\n", "event: cs_test_1_secret_2\ndata: {}\n\n", "retry: seti_1_secret_2\n\n",
		": src_client_secret_1\n", "data: \"a\"\ndata: \"b\"\n\n", "data: \"\xc3\"\n\n"} {
		if out, _, err := ScrubEventStream([]byte(bad)); err == nil {
			t.Errorf("ScrubEventStream(%q) accepted: %q", bad, out)
		}
	}
}

// FuzzScrubEventStream: whatever the server streams, ScrubEventStream
// never panics; what it returns is the same events (by an independent
// reading of the SSE grammar) with the same fields, and data that decodes
// to the input's without any secret ScrubJSON removes; scrubbing it
// again finds nothing; an input without secrets comes back byte for byte.
func FuzzScrubEventStream(f *testing.F) {
	for _, s := range []string{"event: message\ndata: " + mcpListAnswer + "\n\n", ": c\r\nid: 1\r\ndata:\r\n\r\n", "data: [1,\ndata: {\"client_secret\":2}]\n\n",
		"\ufeffdata: \"pi_1_secret_x\"\r", "data: {}\n\ndata: \"x_secret_y\"", "retry: 5\n\n\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, n, err := ScrubEventStream(in)
		if err != nil {
			return
		}
		if n == 0 && !bytes.Equal(out, in) {
			t.Fatalf("%q changed to %q with nothing removed", in, out)
		}
		if !utf8.Valid(out) {
			t.Fatalf("%q became invalid UTF-8 %q", in, out)
		}
		if again, m, err := ScrubEventStream(out); err != nil || m != 0 || !bytes.Equal(again, out) {
			t.Fatalf("%q scrubbed to %q, which scrubs again to %q, %d, %v", in, out, again, m, err)
		}
		want, got := refEvents(in), refEvents(out)
		if len(want) != len(got) {
			t.Fatalf("%q (%d events) scrubbed to %q (%d events)", in, len(want), out, len(got))
		}
		for i := range want {
			if want[i].fields != got[i].fields {
				t.Fatalf("%q: event %d's fields %q became %q", in, i, want[i].fields, got[i].fields)
			}
			if want[i].data == "" || got[i].data == "" {
				if want[i].data != got[i].data {
					t.Fatalf("%q: event %d's data %q became %q", in, i, want[i].data, got[i].data)
				}
				continue
			}
			w, g := decode(t, []byte(want[i].data)), decode(t, []byte(got[i].data))
			dropSecrets(&w)
			if dropSecrets(&g) {
				t.Fatalf("%q keeps a secret in %q", in, out)
			}
			if !reflect.DeepEqual(w, g) {
				t.Fatalf("%q: event %d's data decodes to %#v, want %#v", in, i, g, w)
			}
		}
	})
}

// refEvent is an event as refEvents reads it: its lines other than data
// (in order, LF-joined) and its data.
type refEvent struct{ fields, data string }

var lineEnd = regexp.MustCompile(`\r\n|\r|\n`)

// refEvents reads an event stream as the SSE grammar has it, written apart
// from the scrubber's reading: one leading byte order mark skipped, lines
// split at CRLF, CR or LF, events ended by a blank line (the last event
// also by the stream's end), data fields' values (one leading space
// dropped) joined with LF.
func refEvents(b []byte) []refEvent {
	s := strings.TrimPrefix(string(b), "\ufeff")
	if s == "" {
		return nil
	}
	lines := lineEnd.Split(s, -1)
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1] // the stream ended with a line's end
	}
	var out []refEvent
	var fields, data []string
	hasData := false
	flush := func() {
		out = append(out, refEvent{fields: strings.Join(fields, "\n"), data: strings.Join(data, "\n")})
		fields, data, hasData = nil, nil, false
	}
	for _, ln := range lines {
		if ln == "" {
			flush()
			continue
		}
		if name, value, _ := strings.Cut(ln, ":"); name == "data" {
			data, hasData = append(data, strings.TrimPrefix(value, " ")), true
			continue
		}
		fields = append(fields, ln)
	}
	if len(fields) > 0 || hasData {
		flush()
	}
	return out
}
