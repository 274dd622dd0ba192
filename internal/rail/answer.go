package rail

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxAnswerDepth bounds JSON nesting in a rail's answer.
const maxAnswerDepth = 64

// AnswerEncoding returns an error naming the answer's content coding when
// it has one other than identity. Countersign asks the rail for identity,
// but a CDN, WAF or gateway on the way may compress anyway; an encoded
// body is bytes Countersign cannot read, so its status alone would decide,
// and a refusal that says "maybe applied" (Stripe's idempotency_error,
// Razorpay's GATEWAY_ERROR) would read as a definite rejection.
func AnswerEncoding(headers map[string]string) error {
	for k, v := range headers {
		if strings.EqualFold(k, "content-encoding") {
			if c := strings.TrimSpace(v); c != "" && !strings.EqualFold(c, "identity") {
				return fmt.Errorf("with its body in content coding %q, which Countersign does not read", v)
			}
		}
	}
	return nil
}

// CheckAnswerJSON accepts exactly one JSON object in valid UTF-8, nested at
// most maxAnswerDepth deep, with no member twice in any object, counting
// two names that differ only in case as twice, and no lone surrogate
// escape. Readers disagree on such a body: Go keeps the last of two
// members and matches struct fields without regard to case, others keep
// the first or match exactly, so {"amount":5000,"AMOUNT":100} is 100 to
// Go and 5000 to the agent's SDK. The request side refuses the same
// bodies (razorpay's and mcp's checkJSON).
func CheckAnswerJSON(body []byte) error {
	if !utf8.Valid(body) {
		return errors.New("the body is not valid UTF-8")
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	type frame struct {
		obj     bool
		wantKey bool
		keys    map[string]string // folded name → name as sent
	}
	var stack []*frame
	started := false
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			if !started || len(stack) > 0 {
				return errors.New("the body is truncated JSON")
			}
			return CheckEscapes(body)
		}
		if err != nil {
			return fmt.Errorf("the body is not JSON: %w", err)
		}
		if started && len(stack) == 0 {
			return errors.New("the body has data after its JSON object")
		}
		if !started && tok != json.Delim('{') {
			return errors.New("the body is not a JSON object")
		}
		started = true
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.obj && top.wantKey {
			if key, ok := tok.(string); ok {
				if prev, dup := top.keys[foldName(key)]; dup {
					if prev == key {
						return fmt.Errorf("the body has member %q twice in one object", key)
					}
					return fmt.Errorf("the body has member %q twice in one object, as %q and %q: readers that ignore case read them as one", key, prev, key)
				}
				top.keys[foldName(key)], top.wantKey = key, false
				continue
			}
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) >= maxAnswerDepth {
				return fmt.Errorf("the body is nested deeper than %d", maxAnswerDepth)
			}
			stack = append(stack, &frame{obj: tok == json.Delim('{'), wantKey: true, keys: map[string]string{}})
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

// DecodeAnswer decodes a rail's JSON answer into v (a pointer to a
// struct) only when CheckAnswerJSON accepts it and every member name that
// matches one of the struct's fields up to case matches it exactly:
// encoding/json would read "AMOUNT" as amount, which the rail's other
// readers (and the rail) do not. Fields whose type decodes itself
// (json.Unmarshaler, json.RawMessage) are not looked into.
func DecodeAnswer(body []byte, v any) error {
	if err := CheckAnswerJSON(body); err != nil {
		return err
	}
	var tree any
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if err := d.Decode(&tree); err != nil {
		return fmt.Errorf("the body is not JSON: %w", err) // unreachable after CheckAnswerJSON
	}
	if err := exactNames(tree, reflect.TypeOf(v), ""); err != nil {
		return err
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("the body does not read as expected: %w", err)
	}
	return nil
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// exactNames checks that the JSON value tree names t's fields exactly.
func exactNames(tree any, t reflect.Type, at string) error {
	for t.Kind() == reflect.Pointer {
		if t.Implements(unmarshalerType) {
			return nil
		}
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	switch t.Kind() {
	case reflect.Struct:
		o, ok := tree.(map[string]any)
		if !ok {
			return nil // a type mismatch is json.Unmarshal's to report
		}
		fields := map[string]reflect.Type{} // folded name → type, exact name kept below
		names := map[string]string{}
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			fields[foldName(name)], names[foldName(name)] = f.Type, name
		}
		for k, val := range o {
			want, known := names[foldName(k)]
			if !known {
				continue
			}
			if k != want {
				return fmt.Errorf("the body names member %s%q as %q", at, want, k)
			}
			if err := exactNames(val, fields[foldName(k)], at+want+"."); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		if a, ok := tree.([]any); ok {
			for _, e := range a {
				if err := exactNames(e, t.Elem(), at); err != nil {
					return err
				}
			}
		}
	case reflect.Map:
		if o, ok := tree.(map[string]any); ok {
			for k, e := range o {
				if err := exactNames(e, t.Elem(), at+k+"."); err != nil {
					return err
				}
			}
		}
	}
	return nil
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
