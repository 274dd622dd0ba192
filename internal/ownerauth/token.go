package ownerauth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/ledger"
)

// TokenPrefix marks a static owner token. It differs from an agent
// credential's "csk_", so neither can be mistaken for the other: the agent
// path's credential.Hash refuses anything without "csk_", and Authenticate
// refuses "csk_" before any lookup.
const TokenPrefix = "cso_"

// tokenBytes is 256 bits, so the ledger can keep a plain SHA-256.
const tokenBytes = 32

var enc = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

var tokenLen = len(TokenPrefix) + enc.EncodedLen(tokenBytes)

var errMalformedToken = errors.New("malformed owner token")

// MintToken returns a new owner token secret and the hash the ledger keeps.
// Show the secret once; store only the hash.
func MintToken() (secret string, hash [32]byte, err error) {
	var b [tokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", hash, fmt.Errorf("ownerauth: random: %w", err)
	}
	secret = TokenPrefix + enc.EncodeToString(b[:])
	return secret, sha256.Sum256([]byte(secret)), nil
}

// HashToken checks the shape of a presented owner token and returns its
// hash; a malformed one never reaches the ledger.
func HashToken(secret string) ([32]byte, error) {
	if len(secret) != tokenLen || !strings.HasPrefix(secret, TokenPrefix) {
		return [32]byte{}, errMalformedToken
	}
	if _, err := enc.DecodeString(secret[len(TokenPrefix):]); err != nil {
		return [32]byte{}, errMalformedToken
	}
	return sha256.Sum256([]byte(secret)), nil
}

// TokenIssuer is the part of the ledger that stores owners and token hashes.
type TokenIssuer interface {
	CreateOwner(ctx context.Context, name string) (ledger.Owner, error)
	IssueOwnerToken(ctx context.Context, ownerID string, expiresAt time.Time, hash [32]byte) (ledger.OwnerToken, error)
}

// IssueToken mints a token for ownerID, stores its hash and returns the
// secret: the only time it exists outside the caller's hands.
func IssueToken(ctx context.Context, store TokenIssuer, ownerID string, expiresAt time.Time) (string, ledger.OwnerToken, error) {
	secret, hash, err := MintToken()
	if err != nil {
		return "", ledger.OwnerToken{}, err
	}
	tok, err := store.IssueOwnerToken(ctx, ownerID, expiresAt, hash)
	if err != nil {
		return "", ledger.OwnerToken{}, err
	}
	return secret, tok, nil
}

// Bootstrap creates an owner named name with a first token valid for ttl:
// what `countersign owner bootstrap` (or `countersign dev`) runs against the
// database directly, before any owner can call the API.
func Bootstrap(ctx context.Context, store TokenIssuer, name string, ttl time.Duration) (ledger.Owner, string, ledger.OwnerToken, error) {
	if ttl <= 0 {
		return ledger.Owner{}, "", ledger.OwnerToken{}, fmt.Errorf("ownerauth: bootstrap: token lifetime must be positive, got %s", ttl)
	}
	o, err := store.CreateOwner(ctx, name)
	if err != nil {
		return ledger.Owner{}, "", ledger.OwnerToken{}, err
	}
	secret, tok, err := IssueToken(ctx, store, o.ID, time.Now().Add(ttl))
	if err != nil {
		return ledger.Owner{}, "", ledger.OwnerToken{}, err
	}
	return o, secret, tok, nil
}
