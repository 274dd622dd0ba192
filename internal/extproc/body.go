// Package extproc speaks Envoy's external processing protocol
// (envoy.service.ext_proc.v3): it writes the body stamp into an allowed
// request and commits the rail's answer before Envoy forwards it to the
// agent.
package extproc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// ErrBodyStamp means the body could not carry the stamp.
var ErrBodyStamp = errors.New("extproc: cannot stamp the request body")

// StampBody writes value at field into body. A field written like a form
// key ("metadata[countersign_sik]") is a form field; a dotted one
// ("notes.countersign_sik") is a JSON path of two levels. Whatever the
// caller put at that field is overwritten: stamps are Countersign's.
func StampBody(body []byte, field, value string) ([]byte, error) {
	switch {
	case field == "":
		return body, nil
	case strings.Contains(field, "["):
		return stampForm(body, field, value)
	case strings.Count(field, ".") == 1:
		obj, key, _ := strings.Cut(field, ".")
		return stampJSON(body, obj, key, value)
	}
	return nil, fmt.Errorf("%w: unsupported field %q", ErrBodyStamp, field)
}

func stampForm(body []byte, field, value string) ([]byte, error) {
	vals, err := url.ParseQuery(string(body))
	if err != nil {
		return nil, fmt.Errorf("%w: form: %w", ErrBodyStamp, err)
	}
	vals.Set(field, value)
	// Encode sorts the keys; the rail compares parameters, not bytes, and a
	// sorted body is the same for every attempt under one stamp.
	return []byte(vals.Encode()), nil
}

func stampJSON(body []byte, obj, key, value string) ([]byte, error) {
	top := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(body)) > 0 {
		// An empty body (a Razorpay full refund) becomes {"notes":{…}}.
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.UseNumber()
		if err := dec.Decode(&top); err != nil || top == nil {
			return nil, fmt.Errorf("%w: body is not a JSON object", ErrBodyStamp)
		}
	}
	inner := map[string]any{}
	if raw, ok := top[obj]; ok && string(raw) != "null" {
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		if err := d.Decode(&inner); err != nil {
			return nil, fmt.Errorf("%w: %s is not an object", ErrBodyStamp, obj)
		}
	}
	inner[key] = value
	b, err := json.Marshal(inner)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBodyStamp, err)
	}
	top[obj] = b
	out, err := json.Marshal(top)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBodyStamp, err)
	}
	return out, nil
}
