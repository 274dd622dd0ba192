package rail

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

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

// CheckAnswerJSON accepts exactly one JSON object under CheckStrictJSON's
// rules, names that differ only in case counting as one: Go reads a
// rail's answer without regard to case, the agent's SDK may not. The
// request side refuses the same bodies (razorpay's and mcp's checkJSON).
func CheckAnswerJSON(body []byte) error {
	return CheckStrictJSON(body, StrictJSON{Object: true, MaxDepth: MaxJSONDepth})
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
