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
	"slices"
	"strconv"
	"strings"

	"github.com/countersign/countersign/internal/engine"
	"github.com/countersign/countersign/internal/rail"
)

// ErrBodyStamp means the body could not carry the stamp.
var ErrBodyStamp = errors.New("extproc: cannot stamp the request body")

// StampBody writes value at field into body. A field written like a form
// key ("metadata[countersign_sik]") is a form field; a dotted one is a JSON
// path ("notes.countersign_sik" for Razorpay,
// "params.arguments.metadata.countersign_sik" for an MCP tool call), whose
// missing objects are created. Whatever the caller put at that field is
// overwritten: stamps are Countersign's.
func StampBody(body []byte, field, value string) ([]byte, error) {
	switch {
	case field == "":
		return body, nil
	case strings.Contains(field, "["):
		return stampForm(body, field, value)
	case strings.Contains(field, "."):
		keys := strings.Split(field, ".")
		if slices.Contains(keys, "") {
			return nil, fmt.Errorf("%w: field %q has an empty key", ErrBodyStamp, field)
		}
		top := map[string]json.RawMessage{}
		if len(rail.TrimJSONSpace(body)) > 0 {
			// An empty body (a Razorpay full refund) becomes {"notes":{…}}.
			if err := decodeObject(body, &top); err != nil {
				return nil, fmt.Errorf("%w: body is not a JSON object", ErrBodyStamp)
			}
		}
		v, err := json.Marshal(value)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBodyStamp, err)
		}
		return setPath(top, keys, v)
	}
	return nil, fmt.Errorf("%w: unsupported field %q", ErrBodyStamp, field)
}

// OutgoingBody is the body an allowed request leaves with: body with ref's
// stamp written, and, for a full refund, the amount its intent holds
// (rail.Stamped.AmountField), so the rail moves what the gates valued and
// the ledger holds, not whatever is refundable when it arrives.
//
// An MCP tool call leaves with Countersign's JSON-RPC id (ref.CallID) in
// place of the agent's, so that its answer is bound to it: the server can
// confuse it with no request of the agent's, which may not carry such an
// id. [CallIDOf] is the agent's id, which its answer is given back.
func OutgoingBody(body []byte, ref engine.IntentRef) ([]byte, error) {
	out, err := StampBody(body, ref.BodyField, ref.BodyValue)
	if err == nil && ref.AmountField != "" {
		out, err = PinAmount(out, ref.BodyField, ref.AmountField, ref.Amount)
	}
	if err == nil && ref.CallID != "" {
		out, err = writeCallID(out, ref.CallID)
	}
	return out, err
}

// CallIDOf is the id of the JSON-RPC request in body, as sent: a string or
// an integer.
func CallIDOf(body []byte) (json.RawMessage, error) {
	top := map[string]json.RawMessage{}
	if err := decodeObject(body, &top); err != nil {
		return nil, fmt.Errorf("%w: body is not a JSON object", ErrBodyStamp)
	}
	id := bytes.TrimSpace(top["id"])
	if len(id) == 0 || (id[0] != '"' && id[0] != '-' && (id[0] < '0' || id[0] > '9')) {
		return nil, fmt.Errorf("%w: the JSON-RPC request has no string or integer id", ErrBodyStamp)
	}
	return append(json.RawMessage(nil), id...), nil
}

// writeCallID replaces the id of the JSON-RPC request in body with id.
func writeCallID(body []byte, id string) ([]byte, error) {
	if _, err := CallIDOf(body); err != nil {
		return nil, err
	}
	top := map[string]json.RawMessage{}
	if err := decodeObject(body, &top); err != nil {
		return nil, fmt.Errorf("%w: body is not a JSON object", ErrBodyStamp)
	}
	v, err := json.Marshal(id)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBodyStamp, err)
	}
	top["id"] = v
	out, err := json.Marshal(top)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBodyStamp, err)
	}
	return out, nil
}

// PinAmount writes amount, in minor units, at field into a body, in the
// body's media type: that of stampField, the body stamp's field
// (rail.BodyMediaType), or, with no stamp, JSON for a dotted path (an MCP
// tool's argument): a form field, or a JSON member whose value becomes that
// integer. It is how a full refund leaves for the amount its intent holds
// (rail.Stamped.AmountField).
func PinAmount(body []byte, stampField, field string, amount int64) ([]byte, error) {
	if field == "" || amount <= 0 {
		return nil, fmt.Errorf("%w: amount %d at %q", ErrBodyStamp, amount, field)
	}
	media := rail.BodyMediaType(stampField)
	if stampField == "" && strings.Contains(field, ".") {
		media = "application/json"
	}
	n := strconv.FormatInt(amount, 10)
	switch media {
	case "application/x-www-form-urlencoded":
		return stampForm(body, field, n)
	case "application/json":
		keys := strings.Split(field, ".")
		if slices.Contains(keys, "") {
			return nil, fmt.Errorf("%w: field %q has an empty key", ErrBodyStamp, field)
		}
		top := map[string]json.RawMessage{}
		if err := decodeObject(body, &top); err != nil {
			return nil, fmt.Errorf("%w: body is not a JSON object", ErrBodyStamp)
		}
		return setPath(top, keys, json.RawMessage(n))
	}
	return nil, fmt.Errorf("%w: no media type to write the amount at %q in", ErrBodyStamp, field)
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

// setPath writes the JSON value v at keys inside obj, keeping every other
// member's bytes (numbers are never re-spelled).
func setPath(obj map[string]json.RawMessage, keys []string, v json.RawMessage) ([]byte, error) {
	if len(keys) == 1 {
		obj[keys[0]] = v
		return json.Marshal(obj)
	}
	inner := map[string]json.RawMessage{}
	if raw, ok := obj[keys[0]]; ok && string(raw) != "null" {
		if err := decodeObject(raw, &inner); err != nil {
			return nil, fmt.Errorf("%w: %s is not an object", ErrBodyStamp, keys[0])
		}
	}
	b, err := setPath(inner, keys[1:], v)
	if err != nil {
		return nil, err
	}
	obj[keys[0]] = b
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBodyStamp, err)
	}
	return out, nil
}

func decodeObject(b []byte, into *map[string]json.RawMessage) error {
	if err := json.Unmarshal(b, into); err != nil {
		return err
	}
	if *into == nil {
		return errors.New("null")
	}
	return nil
}
