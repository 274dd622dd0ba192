// Package credential mints and checks agent credentials. A credential is a
// random secret shown once to the owner and stored only as its SHA-256.
package credential

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
)

// Prefix marks a Countersign agent credential so that a leaked one is easy to
// recognise (and to scan for) and is never mistaken for a rail key.
const Prefix = "csk_"

// secretBytes is 256 bits: far above the 128-bit floor, and it lets the
// ledger store a plain SHA-256 instead of a slow password hash.
const secretBytes = 32

var enc = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Scope is what a credential may do.
type Scope string

// Scopes.
const (
	ScopePropose Scope = "propose" // may ask; every money-moving call is held
	ScopeExecute Scope = "execute" // may move money within its mandate
)

// Valid reports whether s is a known scope.
func (s Scope) Valid() bool { return s == ScopePropose || s == ScopeExecute }

// ErrMalformed means the presented string cannot be a Countersign credential.
var ErrMalformed = errors.New("credential: malformed")

// Generate returns a new secret and its hash.
func Generate() (secret string, hash [32]byte, err error) {
	var b [secretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", hash, fmt.Errorf("credential: random: %w", err)
	}
	secret = Prefix + enc.EncodeToString(b[:])
	return secret, sha256.Sum256([]byte(secret)), nil
}

// encodedLen is the length of a well-formed secret.
var encodedLen = len(Prefix) + enc.EncodedLen(secretBytes)

// Hash checks the shape of a presented secret and returns the hash the
// ledger stores. The shape check keeps garbage (and rail keys pasted by
// mistake) away from the database.
func Hash(secret string) ([32]byte, error) {
	if len(secret) != encodedLen || !strings.HasPrefix(secret, Prefix) {
		return [32]byte{}, ErrMalformed
	}
	if _, err := enc.DecodeString(secret[len(Prefix):]); err != nil {
		return [32]byte{}, ErrMalformed
	}
	return sha256.Sum256([]byte(secret)), nil
}

// NewID returns a random identifier "<prefix>_<20 base32 chars>" (100 bits).
func NewID(prefix string) (string, error) {
	var b [13]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("credential: random: %w", err)
	}
	return prefix + "_" + enc.EncodeToString(b[:])[:20], nil
}
