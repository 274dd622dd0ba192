package sse

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestLines(t *testing.T) {
	for in, want := range map[string][]Line{
		"":                      nil,
		"data: x":               {{Text: "data: x"}},
		"data: x\n\n":           {{Text: "data: x", End: "\n"}, {Text: "", End: "\n"}},
		"a\r\nb\rc\n":           {{Text: "a", End: "\r\n"}, {Text: "b", End: "\r"}, {Text: "c", End: "\n"}},
		"a\n\r\n\r":             {{Text: "a", End: "\n"}, {Text: "", End: "\r\n"}, {Text: "", End: "\r"}},
		"\r\r\n":                {{Text: "", End: "\r"}, {Text: "", End: "\r\n"}},
		"\ufeffdata: 1\r\n\r\n": {{Text: "\ufeffdata: 1", End: "\r\n"}, {Text: "", End: "\r\n"}},
	} {
		if got := slices.Collect(Lines([]byte(in))); !reflect.DeepEqual(got, want) {
			t.Errorf("Lines(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzLines: whatever an MCP server sends, its lines put back together are
// the stream byte for byte; no line holds a line end; each ends in CRLF,
// LF or CR, but the last, which may end in nothing; and a CR ends a line
// on its own only when no LF follows it.
func FuzzLines(f *testing.F) {
	for _, s := range []string{"", "data: {}\n\n", "a\r\nb\rc\n", "\r\r\n\n", "x\r"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		lines := slices.Collect(Lines(in))
		var b strings.Builder
		for i, l := range lines {
			if strings.ContainsAny(l.Text, "\r\n") {
				t.Fatalf("%q: line %d holds a line end: %q", in, i, l.Text)
			}
			switch l.End {
			case "\r\n", "\n":
			case "\r":
				if rest := in[b.Len()+len(l.Text)+1:]; len(rest) > 0 && rest[0] == '\n' {
					t.Fatalf("%q: line %d ends at a CR an LF follows", in, i)
				}
			case "":
				if i != len(lines)-1 {
					t.Fatalf("%q: line %d of %d has no end", in, i, len(lines))
				}
			default:
				t.Fatalf("%q: line %d ends in %q", in, i, l.End)
			}
			b.WriteString(l.Text + l.End)
		}
		if b.String() != string(in) {
			t.Fatalf("%q split into %q, which is %q put back", in, lines, b.String())
		}
	})
}

// Events groups lines by the blank line that ends each event, the lines
// after the last one coming last with no End, and holds no more than one
// event's lines: an event longer than MaxEventLines stops the reading.
func TestEvents(t *testing.T) {
	type ev struct {
		lines []string
		end   string
	}
	read := func(in string) ([]ev, error) {
		var out []ev
		for e, err := range Events([]byte(in)) {
			if err != nil {
				return out, err
			}
			var ls []string
			for _, l := range e.Lines {
				ls = append(ls, l.Text+l.End)
			}
			out = append(out, ev{ls, e.End})
		}
		return out, nil
	}
	for in, want := range map[string][]ev{
		"":                                     nil,
		"\n\n":                                 {{nil, "\n"}, {nil, "\n"}},
		"event: m\ndata: 1\n\ndata: 2\r\n\r\n": {{[]string{"event: m\n", "data: 1\n"}, "\n"}, {[]string{"data: 2\r\n"}, "\r\n"}},
		"data: 1\n\ndata: 2\ndata: 3":          {{[]string{"data: 1\n"}, "\n"}, {[]string{"data: 2\n", "data: 3"}, ""}},
	} {
		got, err := read(in)
		if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("Events(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	// An event of MaxEventLines lines is read; one more line is refused,
	// after the events before it.
	long := "data: 0\n\n" + strings.Repeat(":\n", MaxEventLines)
	if got, err := read(long + "\n"); err != nil || len(got) != 2 || len(got[1].lines) != MaxEventLines {
		t.Fatalf("an event of %d lines: %d events, %v", MaxEventLines, len(got), err)
	}
	if got, err := read(long + ":\n\n"); !errors.Is(err, ErrEventTooLong) || len(got) != 1 {
		t.Fatalf("an event of %d lines: %d events, %v; want the first, then ErrEventTooLong", MaxEventLines+1, len(got), err)
	}
}
