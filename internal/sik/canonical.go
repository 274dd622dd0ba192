package sik

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// Errors returned by [Canonicalize], always wrapped with detail.
var (
	ErrInvalidUTF8  = errors.New("sik: input is not valid UTF-8")
	ErrInvalidJSON  = errors.New("sik: input is not valid JSON")
	ErrDuplicateKey = errors.New("sik: duplicate object key")
	// ErrNotIJSON covers valid JSON that RFC 8785 cannot canonicalise
	// because it is not I-JSON (RFC 7493): numbers outside IEEE 754 double
	// range and escaped lone surrogates.
	ErrNotIJSON = errors.New("sik: input is not I-JSON")
)

// Canonicalize returns the RFC 8785 (JCS) canonical form of a JSON text.
//
// It rejects non-UTF-8 input, invalid JSON, duplicate object keys (compared
// after unescaping, so "a" and "\u0061" collide), numbers beyond float64
// range and lone surrogate escapes. Every error wraps one of ErrInvalidUTF8,
// ErrInvalidJSON, ErrDuplicateKey or ErrNotIJSON.
func Canonicalize(input []byte) ([]byte, error) {
	// The UTF-8 and syntax checks run first so that callers get an offset
	// and a reason; jcs stops at the first problem without saying where.
	if len(input) == 0 {
		return nil, fmt.Errorf("%w: empty input", ErrInvalidJSON)
	}
	if off := invalidUTF8Offset(input); off >= 0 {
		return nil, fmt.Errorf("%w: invalid byte 0x%02x at offset %d", ErrInvalidUTF8, input[off], off)
	}
	if !json.Valid(input) {
		return nil, syntaxError(input)
	}
	if err := checkSurrogateEscapes(input); err != nil {
		return nil, err
	}
	out, err := jcs.Transform(input)
	if err != nil {
		return nil, classifyJCSError(err)
	}
	return out, nil
}

func invalidUTF8Offset(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return -1
}

func syntaxError(input []byte) error {
	var raw json.RawMessage
	err := json.Unmarshal(input, &raw)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("%w: at offset %d: %s", ErrInvalidJSON, se.Offset, se.Error())
	}
	return fmt.Errorf("%w: %w", ErrInvalidJSON, err)
}

// checkSurrogateEscapes rejects \u escapes that do not form a UTF-16
// surrogate pair. jcs rejects them too, but a lone high surrogate at the end
// of a document reaches it as "Unexpected EOF", indistinguishable from
// truncation. input is already known to be valid JSON, so a plain scan of
// string contents suffices.
func checkSurrogateEscapes(input []byte) error {
	inString := false
	pendingHigh := -1 // offset of an unpaired high surrogate escape
	for i := 0; i < len(input); i++ {
		c := input[i]
		if !inString {
			inString = c == '"'
			continue
		}
		if c != '\\' {
			if pendingHigh >= 0 {
				return loneSurrogate(input, pendingHigh)
			}
			inString = c != '"'
			continue
		}
		i++ // the escaped character
		if input[i] != 'u' {
			if pendingHigh >= 0 {
				return loneSurrogate(input, pendingHigh)
			}
			continue
		}
		u, _ := strconv.ParseUint(string(input[i+1:i+5]), 16, 16) // valid JSON: 4 hex digits
		start := i - 1
		i += 4
		switch {
		case u >= 0xD800 && u <= 0xDBFF:
			if pendingHigh >= 0 {
				return loneSurrogate(input, pendingHigh)
			}
			pendingHigh = start
		case u >= 0xDC00 && u <= 0xDFFF:
			if pendingHigh < 0 {
				return loneSurrogate(input, start)
			}
			pendingHigh = -1
		default:
			if pendingHigh >= 0 {
				return loneSurrogate(input, pendingHigh)
			}
		}
	}
	return nil
}

func loneSurrogate(input []byte, off int) error {
	return fmt.Errorf("%w: unpaired UTF-16 surrogate escape %s at offset %d", ErrNotIJSON, input[off:off+6], off)
}

// classifyJCSError maps the jcs message (jcs has no typed errors) onto our
// sentinels. Input that reaches jcs is valid UTF-8 JSON with paired
// surrogates, so only the duplicate-key and number-range checks should fire;
// anything unrecognised still fails closed as ErrInvalidJSON.
// TestCanonicalizeRejects pins each mapping, so a jcs upgrade that rewords
// its messages fails loudly instead of misfiling.
func classifyJCSError(err error) error {
	msg := err.Error()
	switch {
	case strings.HasPrefix(msg, "Duplicate key: "):
		return fmt.Errorf("%w: %s", ErrDuplicateKey, strings.TrimPrefix(msg, "Duplicate key: "))
	case strings.HasPrefix(msg, "Number out of range: "):
		return fmt.Errorf("%w: number outside IEEE 754 double range: %s", ErrNotIJSON, strings.TrimPrefix(msg, "Number out of range: "))
	default:
		return fmt.Errorf("%w: %s", ErrInvalidJSON, msg)
	}
}
