package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/countersign/countersign/internal/ownerauth"
)

// maxTokenBytes bounds the token member; an owner token is 56 bytes.
const maxTokenBytes = 256

var errSignInShape = errors.New(`sign-in body must be the JSON object {"token":"cso_…"}`)

// ParseSignIn reads a sign-in body: exactly one JSON object with exactly
// one member, "token" (spelled exactly so, once), whose value is a string
// of printable ASCII of at most 256 bytes. Everything else is refused with
// a reason: another member, a duplicate, a value of another type, trailing
// data.
func ParseSignIn(b []byte) (string, error) {
	if !utf8.Valid(b) {
		return "", fmt.Errorf("%w: the body is not UTF-8", errSignInShape)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", errSignInShape
	}
	token, seen := "", false
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return "", errSignInShape
		}
		key, _ := k.(string)
		switch {
		case key != "token":
			return "", fmt.Errorf("%w: unknown member %q", errSignInShape, truncate(key))
		case seen:
			return "", fmt.Errorf("%w: member \"token\" appears twice", errSignInShape)
		}
		seen = true
		v, err := dec.Token()
		if err != nil {
			return "", errSignInShape
		}
		s, ok := v.(string)
		if !ok {
			return "", fmt.Errorf("%w: \"token\" must be a string", errSignInShape)
		}
		token = s
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return "", errSignInShape
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("%w: data after the object", errSignInShape)
	}
	switch {
	case !seen || token == "":
		return "", errors.New(`sign-in needs "token": an owner token (cso_…)`)
	case len(token) > maxTokenBytes:
		return "", fmt.Errorf("token is longer than %d bytes: not an owner token", maxTokenBytes)
	}
	for i := 0; i < len(token); i++ {
		if token[i] <= 0x20 || token[i] >= 0x7f {
			return "", errors.New("token must be printable ASCII without spaces: not an owner token")
		}
	}
	return token, nil
}

var errSessionKey = errors.New("console: " + SessionKeyHeader + " must be one session key half (52 base32 characters)")

// ParseSessionKey reads the values of SessionKeyHeader: exactly one, the
// exact shape of a session's key half (ownerauth.ValidSessionKey: 52
// characters of lower-case base32, canonical). Anything else, two headers
// or one with spaces, another case or another length, is refused.
func ParseSessionKey(vals []string) (string, error) {
	if len(vals) != 1 || !ownerauth.ValidSessionKey(vals[0]) {
		return "", errSessionKey
	}
	return vals[0], nil
}

// ValidBinding reports whether b is shaped as a sign-in's binding
// (SignInBinding): a SHA-256 in 64 lower-case hex digits.
func ValidBinding(b string) bool {
	if len(b) != 64 {
		return false
	}
	for i := 0; i < len(b); i++ {
		if (b[i] < '0' || b[i] > '9') && (b[i] < 'a' || b[i] > 'f') {
			return false
		}
	}
	return true
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
