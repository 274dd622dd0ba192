package rail

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxJSONDepth is the nesting CheckStrictJSON allows when StrictJSON does
// not say.
const MaxJSONDepth = 64

// StrictJSON is what CheckStrictJSON requires beyond its fixed rules. The
// zero value accepts any one JSON value nested at most MaxJSONDepth deep,
// counting names equal up to case as one.
type StrictJSON struct {
	// Object requires the top level to be a JSON object.
	Object bool
	// MaxDepth bounds how many objects and arrays nest; 0 is MaxJSONDepth.
	MaxDepth int
	// ExactNames counts two names as one member only when they are equal
	// byte for byte. For a reader known to match names exactly; any Go
	// reader, which matches struct fields without regard to case, is not.
	ExactNames bool
}

// JSONFault is what CheckStrictJSON found wrong.
type JSONFault int

// The faults, one per way a body fails CheckStrictJSON.
const (
	JSONNotUTF8       JSONFault = iota + 1 // the body is not valid UTF-8
	JSONSyntax                             // the decoder refused the body (Err says why)
	JSONTruncated                          // the body ends inside, or before, its value
	JSONTrailing                           // data follows the one value
	JSONNotObject                          // StrictJSON.Object, and the value is not an object
	JSONTooDeep                            // nested deeper than StrictJSON.MaxDepth
	JSONTwice                              // a member sent twice in one object (Path, Name, Prev)
	JSONLoneSurrogate                      // a \u escape of half a surrogate pair (Err is ErrLoneSurrogate)
)

// JSONError is CheckStrictJSON's refusal.
type JSONError struct {
	Fault JSONFault
	// Path names the member of a JSONTwice, dotted from the top
	// (params.arguments.amount; an array's elements are a[]), ending in
	// Name. It is empty for the other faults, which are the body's.
	Path string
	// Name and Prev are a JSONTwice member's name as sent the second and
	// the first time: they differ when the two differ only in case.
	Name, Prev string
	Depth      int   // the bound exceeded, for JSONTooDeep
	Err        error // the decoder's error, or ErrLoneSurrogate
}

// Error reads as a sentence about the body, for a caller that names no
// field (CheckAnswerJSON); most faults read as Detail does.
func (e *JSONError) Error() string {
	switch e.Fault {
	case JSONTrailing:
		return "the body has data after its JSON object"
	case JSONNotObject:
		return "the body is not a JSON object"
	case JSONTwice:
		if e.Name != e.Prev {
			return fmt.Sprintf("the body has member %q twice in one object, as %q and %q: readers that ignore case read them as one", e.Name, e.Prev, e.Name)
		}
		return fmt.Sprintf("the body has member %q twice in one object", e.Name)
	case JSONLoneSurrogate:
		return e.Err.Error()
	}
	return "the body is " + e.Detail()
}

func (e *JSONError) Unwrap() error { return e.Err }

// Field is what a request parser names in its refusal: the member's path
// for a member sent twice, "body" otherwise.
func (e *JSONError) Field() string {
	if e.Fault == JSONTwice {
		return e.Path
	}
	return "body"
}

// Detail says what is wrong at Field, to follow the field's name.
func (e *JSONError) Detail() string {
	switch e.Fault {
	case JSONNotUTF8:
		return "not valid UTF-8"
	case JSONSyntax:
		return fmt.Sprintf("not JSON: %v", e.Err)
	case JSONTruncated:
		return "truncated JSON"
	case JSONTrailing:
		return "data after the JSON object"
	case JSONNotObject:
		return "must be a JSON object"
	case JSONTooDeep:
		return fmt.Sprintf("nested deeper than %d", e.Depth)
	case JSONTwice:
		if e.Name != e.Prev {
			return fmt.Sprintf("sent twice in one object (as %q and %q: servers that ignore case read them as one)", e.Prev, e.Name)
		}
		return "sent twice in one object"
	case JSONLoneSurrogate:
		return e.Err.Error()
	}
	return fmt.Sprintf("refused (fault %d)", e.Fault)
}

// CheckStrictJSON accepts exactly one JSON value in valid UTF-8, nested at
// most opts.MaxDepth deep, with no member twice in any object and no lone
// surrogate escape; it refuses with a *JSONError. Readers disagree on such
// a body: Go keeps the last of two members and matches struct fields
// without regard to case, others keep the first or match exactly, so
// {"amount":5000,"AMOUNT":100} is 100 to Go and 5000 to an agent's SDK,
// and PHP fails on a lone surrogate that Go reads as U+FFFD. Two names
// count as one when they fold alike (foldName), unless opts.ExactNames.
func CheckStrictJSON(body []byte, opts StrictJSON) error {
	maxDepth := opts.MaxDepth
	if maxDepth <= 0 {
		maxDepth = MaxJSONDepth
	}
	if !utf8.Valid(body) {
		return &JSONError{Fault: JSONNotUTF8}
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var stack []*jsonFrame
	started := false
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			if !started || len(stack) > 0 {
				return &JSONError{Fault: JSONTruncated}
			}
			if err := CheckEscapes(body); err != nil {
				return &JSONError{Fault: JSONLoneSurrogate, Err: err}
			}
			return nil
		}
		if err != nil {
			return &JSONError{Fault: JSONSyntax, Err: err}
		}
		if started && len(stack) == 0 {
			return &JSONError{Fault: JSONTrailing}
		}
		if !started && opts.Object && tok != json.Delim('{') {
			return &JSONError{Fault: JSONNotObject}
		}
		started = true
		var top *jsonFrame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.obj && top.wantKey {
			if key, ok := tok.(string); ok {
				as := key
				if !opts.ExactNames {
					as = foldName(key)
				}
				if prev, dup := top.keys[as]; dup {
					return &JSONError{Fault: JSONTwice, Path: top.memberPath(key), Name: key, Prev: prev}
				}
				top.keys[as], top.lastKey, top.wantKey = key, key, false
				continue
			}
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) >= maxDepth {
				return &JSONError{Fault: JSONTooDeep, Depth: maxDepth}
			}
			f := &jsonFrame{obj: tok == json.Delim('{'), wantKey: true, parent: top}
			if top != nil && top.obj {
				f.at = top.lastKey
			}
			if f.obj {
				f.keys = map[string]string{}
			}
			stack = append(stack, f)
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			top = nil
			if len(stack) > 0 {
				top = stack[len(stack)-1]
			}
		}
		if top != nil && top.obj {
			top.wantKey = true // a value (scalar or closed container) completed
		}
	}
}

// jsonFrame is an object or array CheckStrictJSON is inside. It keeps
// where it sits, not its path: a path built for every container copies
// its ancestors' names once for each container opened under them, so a
// body of 64 KiB (names of 32 KiB down one chain, then 10,000 empty
// arrays) cost 360 MB and a tenth of a second, before the request's
// credential was looked at (found by a review). The path is made only for
// the refusal that names it.
type jsonFrame struct {
	obj, wantKey bool
	parent       *jsonFrame
	at           string            // the name it is under in its parent object ("" in an array or at the top)
	keys         map[string]string // an object's names: as compared → as sent
	lastKey      string
}

// path names f dotted from the top: "" at the top, a[] for an element of
// the array a.
func (f *jsonFrame) path() string {
	if f.parent == nil {
		return ""
	}
	p := f.parent.path()
	switch {
	case !f.parent.obj:
		return p + "[]"
	case p == "":
		return f.at
	}
	return p + "." + f.at
}

// memberPath names the member name of the object f.
func (f *jsonFrame) memberPath(name string) string {
	if p := f.path(); p != "" {
		return p + "." + name
	}
	return name
}

// foldName maps s to one representative of its case-folding class: names
// fold alike exactly when strings.EqualFold says so, which is how
// encoding/json matches member names to fields (K and K, s and ſ included).
func foldName(s string) string {
	var b strings.Builder
	for _, r := range s {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}
