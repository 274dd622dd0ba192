package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/countersign/countersign/internal/rail"
)

const (
	// maxDepth bounds JSON nesting in a request body.
	maxDepth = 64
	// maxAmount is 2^53-1, the largest amount a SIK carries exactly (and
	// the largest integer a JavaScript MCP server reads exactly).
	maxAmount = 1<<53 - 1
)

func malformed(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", rail.ErrMalformed, field, fmt.Sprintf(format, args...))
}

// checkJSON accepts exactly one JSON value under rail.CheckStrictJSON's
// rules, names that differ only in case counting as one: Go's
// encoding/json matches struct fields without regard to case and keeps
// the last, so {"method":"ping","Method":"tools/call"} is a ping here and
// a tools/call at a Go server. A refusal names the member sent twice by
// its path (params.arguments.amount), or the body.
func checkJSON(body []byte) error {
	err := rail.CheckStrictJSON(body, rail.StrictJSON{MaxDepth: maxDepth})
	var e *rail.JSONError
	if !errors.As(err, &e) {
		return err
	}
	if e.Fault == rail.JSONTrailing {
		return malformed(e.Field(), "data after the JSON-RPC message")
	}
	return malformed(e.Field(), "%s", e.Detail())
}

// object is a JSON object by exact key. Keys are unique up to case when
// checkJSON passed, but a lookup by exact key still misses a member sent
// under another case alone ("Arguments"), which a Go server reads: the
// members of what is read are allowlisted by exact name (callKeys,
// otherKey), or looked up by any case.
type object map[string]json.RawMessage

// asObject decodes raw as an object; ok is false for any other JSON type.
func asObject(raw json.RawMessage) (object, bool) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return nil, false
	}
	var o object
	if json.Unmarshal(raw, &o) != nil {
		return nil, false
	}
	return o, true
}

// asString decodes raw as a JSON string.
func asString(raw json.RawMessage) (string, bool) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// minorUnits reads a JSON integer literal in [0, 2^53-1]: no sign,
// fraction, exponent or leading zero, not a string. A JavaScript server
// reads 1e3 or 10.0 as a number its schema may call an integer; a Go
// server may truncate 10.5; refusing leaves no room for two readings.
func minorUnits(raw json.RawMessage) (int64, error) {
	s := string(bytes.TrimSpace(raw))
	switch {
	case s == "":
		return 0, errors.New("is empty")
	case s == "null":
		return 0, errors.New("is null; omit it instead")
	case s[0] == '"':
		return 0, fmt.Errorf("%.40s is a string; send a JSON integer in minor units", s)
	case s[0] == '-':
		return 0, fmt.Errorf("%.40s is negative", s)
	case strings.ContainsAny(s, ".eE"):
		return 0, fmt.Errorf("%.40s is not an integer in minor units", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%.40s is not an integer in minor units", s)
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("%.40s has a leading zero", s)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n > maxAmount {
		return 0, fmt.Errorf("%.40s is out of range (at most %d)", s, int64(maxAmount))
	}
	return n, nil
}

// maxPlainID bounds the digits of a plain id.
const maxPlainID = 9

// plainID reports whether raw is an id that carries no text worth the
// name: an integer of at most maxPlainID digits, as the MCP SDKs number
// their requests, or a string of such digits. A money-moving call's id and
// progress token reach the server beside the arguments, valued by no gate
// and seen by no free-text policy: other text, or a longer number, would
// carry a card number there.
func plainID(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	if !validID(t) {
		return false
	}
	if s, isString := asString(t); isString {
		t = []byte(s)
	} else {
		t = bytes.TrimPrefix(t, []byte("-"))
	}
	if len(t) == 0 || len(t) > maxPlainID {
		return false
	}
	for _, c := range t {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// validID reports whether raw is a JSON-RPC id MCP allows: a string or an
// integer (not null, not a fraction).
func validID(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return false
	}
	if t[0] == '"' {
		_, ok := asString(t)
		return ok
	}
	if t[0] == '-' {
		t = t[1:]
	}
	if len(t) == 0 || len(t) > 1 && t[0] == '0' || len(t) > 19 {
		return false
	}
	for _, c := range t {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// WriteBodyStamp writes value at field, a dotted JSON path of any depth
// (params.arguments.metadata.countersign_sik), into the JSON object body,
// creating absent or null objects on the way and overwriting whatever was
// at the last key: stamps are Countersign's. Other members keep their
// bytes (the JSON-RPC id among them); member order may change. It is what
// ext_proc needs for an MCP body, whose stamp path is deeper than the two
// levels extproc.StampBody writes.
func WriteBodyStamp(body []byte, field, value string) ([]byte, error) {
	keys := strings.Split(field, ".")
	for _, k := range keys {
		if k == "" {
			return nil, fmt.Errorf("mcp: stamp path %q has an empty key", field)
		}
	}
	top, ok := asObject(body)
	if !ok {
		return nil, errors.New("mcp: body is not a JSON object")
	}
	out, err := setPath(top, keys, value, "")
	if err != nil {
		return nil, err
	}
	return out, nil
}

func setPath(o object, keys []string, value, at string) ([]byte, error) {
	k := keys[0]
	here := strings.TrimPrefix(at+"."+k, ".")
	if len(keys) == 1 {
		v, err := marshal(value)
		if err != nil {
			return nil, err
		}
		o[k] = v
	} else {
		inner := object{}
		if raw, ok := o[k]; ok && string(bytes.TrimSpace(raw)) != "null" {
			if inner, ok = asObject(raw); !ok {
				return nil, fmt.Errorf("mcp: %s is not an object", here)
			}
		}
		b, err := setPath(inner, keys[1:], value, here)
		if err != nil {
			return nil, err
		}
		o[k] = b
	}
	return marshal(o)
}

// marshal encodes v without escaping <, > and &, so that members written
// back keep their meaning and, where they were compact, their bytes.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
