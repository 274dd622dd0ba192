package rail

import (
	"fmt"
	"slices"
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
