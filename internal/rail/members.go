package rail

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// KeyMember is how a request member that changes what the rail does
// (DESIGN §3) enters the semantic key: by its effective value, the rail's
// documented Default when the member is absent. An explicit default is the
// same action as none and stays out of the key, unless KeyDefault keeps
// the effective value either way.
type KeyMember struct {
	Default    string
	KeyDefault bool
}

// Keyed returns the value m puts in the key for the member as sent
// (present false: absent), and false when it puts none.
func (m KeyMember) Keyed(v string, present bool) (string, bool) {
	if !present {
		v = m.Default
	}
	if v == "" || v == m.Default && !m.KeyDefault {
		return "", false
	}
	return v, true
}

// OneOf accepts exactly one of vs, case-sensitive.
func OneOf(vs ...string) func(string) error {
	return func(v string) error {
		if !slices.Contains(vs, v) {
			return fmt.Errorf("%q is not one of %s", v, strings.Join(vs, ", "))
		}
		return nil
	}
}

// MaxLen accepts at most n characters.
func MaxLen(n int) func(string) error {
	return func(v string) error {
		if utf8.RuneCountInString(v) > n {
			return fmt.Errorf("longer than %d characters", n)
		}
		return nil
	}
}

// MaxSafeInteger is the largest amount a form or query member may carry:
// 2^53-1, which a JavaScript or PHP reader holds exactly as Go does.
const MaxSafeInteger = 1<<53 - 1

// ParseUnsigned reads a form or query value of digits only — no sign,
// space or leading zero, at most MaxSafeInteger — so that every reader
// reads one number. kind completes "is not …" in its refusal ("a
// non-negative integer").
func ParseUnsigned(v, kind string) (int64, error) {
	if v == "" {
		return 0, errors.New("is empty")
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, fmt.Errorf("is not %s", kind)
		}
	}
	if len(v) > 1 && v[0] == '0' {
		return 0, errors.New("has a leading zero")
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n > MaxSafeInteger {
		return 0, fmt.Errorf("is out of range (at most %d)", int64(MaxSafeInteger))
	}
	return n, nil
}
