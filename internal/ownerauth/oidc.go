package ownerauth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

const (
	defaultLeeway        = 30 * time.Second
	defaultKeysMaxAge    = 10 * time.Minute
	defaultKeysMinReload = 30 * time.Second
	// maxJWTBytes bounds a presented JWT before it is parsed.
	maxJWTBytes = 16 << 10
	// maxSubjectBytes keeps "oidc:<tag>:<subject>" within the 128 bytes an
	// owner id may have in the ledger.
	maxSubjectBytes = 110
)

// asymmetric lists the algorithms an owner JWT may be signed with. HMAC is
// absent on purpose (the issuer's public key must never double as a shared
// secret), and so is "none".
var asymmetric = map[jose.SignatureAlgorithm]bool{
	jose.RS256: true, jose.RS384: true, jose.RS512: true,
	jose.PS256: true, jose.PS384: true, jose.PS512: true,
	jose.ES256: true, jose.ES384: true, jose.ES512: true,
	jose.EdDSA: true,
}

type verifier struct {
	issuer, audience, claim string
	groupsClaim             string
	allowedSubjects         map[string]bool
	allowedGroups           map[string]bool
	issuerTag               string
	leeway                  time.Duration
	algs                    []jose.SignatureAlgorithm
	keys                    *keySource
}

func newVerifier(cfg Config, now func() time.Time) (*verifier, error) {
	v := &verifier{issuer: cfg.Issuer, audience: cfg.Audience, claim: cfg.SubjectClaim,
		leeway: cfg.Leeway, algs: cfg.Algorithms}
	if v.claim == "" {
		v.claim = "sub"
	}
	v.groupsClaim = cfg.GroupsClaim
	if v.groupsClaim == "" {
		v.groupsClaim = DefaultGroupsClaim
	}
	v.allowedSubjects, v.allowedGroups = set(cfg.AllowedSubjects), set(cfg.AllowedGroups)
	if v.leeway == 0 {
		v.leeway = defaultLeeway
	}
	if len(v.algs) == 0 {
		for a := range asymmetric {
			v.algs = append(v.algs, a)
		}
	}
	sum := sha256.Sum256([]byte(cfg.Issuer))
	v.issuerTag = hex.EncodeToString(sum[:6])
	ks := &keySource{now: now, maxAge: cfg.KeysMaxAge, minReload: cfg.KeysMinReload}
	if ks.maxAge <= 0 {
		ks.maxAge = defaultKeysMaxAge
	}
	if ks.minReload <= 0 {
		ks.minReload = defaultKeysMinReload
	}
	if cfg.JWKSFile != "" {
		ks.load = fileLoader(cfg.JWKSFile)
		// Read now: a missing or unusable file is a configuration error.
		ks.mu.Lock()
		_, err := ks.reload(context.Background(), now())
		ks.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("owner-jwks-file %s: %w", cfg.JWKSFile, err)
		}
	} else {
		client := cfg.HTTPClient
		if client == nil {
			client = defaultHTTPClient()
		}
		ks.load = urlLoader(client, cfg.JWKSURL)
	}
	v.keys = ks
	return v, nil
}

// ownerID is the owner id of an OIDC subject of this issuer.
func (v *verifier) ownerID(subject string) string {
	return "oidc:" + v.issuerTag + ":" + subject
}

// verifyFor verifies raw as a JWT of the issuer for audience and returns
// the owner it names and all its claims.
func (v *verifier) verifyFor(ctx context.Context, raw string, now time.Time, audience string) (Owner, map[string]any, error) {
	if len(raw) > maxJWTBytes {
		return Owner{}, nil, fmt.Errorf("%w: JWT is larger than %d bytes", ErrUnauthenticated, maxJWTBytes)
	}
	// ParseSignedCompact refuses any "alg" outside v.algs, "none" included.
	jws, err := jose.ParseSignedCompact(raw, v.algs)
	if err != nil {
		return Owner{}, nil, fmt.Errorf("%w: not a JWT signed with an accepted algorithm", ErrUnauthenticated)
	}
	if len(jws.Signatures) != 1 {
		return Owner{}, nil, fmt.Errorf("%w: JWT must carry exactly one signature", ErrUnauthenticated)
	}
	hdr := jws.Signatures[0].Header
	keys, err := v.keys.candidates(ctx, hdr.KeyID)
	if err != nil {
		return Owner{}, nil, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	var payload []byte
	for _, k := range keys {
		// A key that names its algorithm signs with that one only.
		if k.Algorithm != "" && k.Algorithm != hdr.Algorithm {
			continue
		}
		if p, err := jws.Verify(k.Key); err == nil {
			payload = p
			break
		}
	}
	if payload == nil {
		return Owner{}, nil, fmt.Errorf("%w: JWT does not verify against the issuer's keys", ErrUnauthenticated)
	}
	// The registered claims this check needs; the subject claim is read
	// from the full set, as it may be email.
	var std struct {
		Issuer    string           `json:"iss"`
		Audience  jwt.Audience     `json:"aud"`
		Expiry    *jwt.NumericDate `json:"exp"`
		NotBefore *jwt.NumericDate `json:"nbf"`
		IssuedAt  *jwt.NumericDate `json:"iat"`
	}
	var all map[string]any
	if json.Unmarshal(payload, &std) != nil || json.Unmarshal(payload, &all) != nil {
		return Owner{}, nil, fmt.Errorf("%w: JWT claims are malformed", ErrUnauthenticated)
	}
	claims := jwt.Claims{Issuer: std.Issuer, Audience: std.Audience, Expiry: std.Expiry,
		NotBefore: std.NotBefore, IssuedAt: std.IssuedAt}
	if claims.Expiry == nil {
		return Owner{}, nil, fmt.Errorf("%w: JWT has no exp claim", ErrUnauthenticated)
	}
	err = claims.ValidateWithLeeway(jwt.Expected{
		Issuer: v.issuer, AnyAudience: jwt.Audience{audience}, Time: now,
	}, v.leeway)
	switch {
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return Owner{}, nil, fmt.Errorf("%w: JWT issuer is not the configured owner issuer", ErrUnauthenticated)
	case errors.Is(err, jwt.ErrInvalidAudience):
		return Owner{}, nil, fmt.Errorf("%w: JWT audience does not include the configured owner audience", ErrUnauthenticated)
	case errors.Is(err, jwt.ErrExpired):
		return Owner{}, nil, fmt.Errorf("%w: JWT expired", ErrUnauthenticated)
	case errors.Is(err, jwt.ErrNotValidYet), errors.Is(err, jwt.ErrIssuedInTheFuture):
		return Owner{}, nil, fmt.Errorf("%w: JWT is not valid yet", ErrUnauthenticated)
	case err != nil:
		return Owner{}, nil, fmt.Errorf("%w: JWT claims: %w", ErrUnauthenticated, err)
	}
	subject, ok := all[v.claim].(string)
	if !ok || !validSubject(subject) {
		return Owner{}, nil, fmt.Errorf("%w: JWT claim %q must be a printable string of 1 to %d bytes", ErrUnauthenticated, v.claim, maxSubjectBytes)
	}
	// An email names a person only once the issuer has verified it: with
	// an issuer where users set their own address, an unverified email
	// would let one person sign in as another owner (OIDC Core §5.1).
	if v.claim == "email" && all["email_verified"] != true {
		return Owner{}, nil, fmt.Errorf("%w: the owner subject claim is email, and this JWT's email_verified is not true", ErrUnauthenticated)
	}
	if !v.allowed(subject, all[v.groupsClaim]) {
		return Owner{}, nil, fmt.Errorf("%w: OIDC subject %q is not an owner of this deployment: it is not in owner-allowed-subjects, "+
			"and its %q claim names no group in owner-allowed-groups", ErrNotAllowed, subject, v.groupsClaim)
	}
	return Owner{ID: v.ownerID(subject), Subject: subject, Method: MethodOIDC}, all, nil
}

// allowed reports whether subject, or one of the groups its token lists,
// is on the allowlist. The groups claim is an array of strings or a single
// string; anything else (numbers, objects, a claim of another shape) lists
// no group. Matching is exact: no case folding, no prefixes.
func (v *verifier) allowed(subject string, groups any) bool {
	if v.allowedSubjects[subject] {
		return true
	}
	if len(v.allowedGroups) == 0 {
		return false
	}
	switch g := groups.(type) {
	case string:
		return v.allowedGroups[g]
	case []any:
		for _, e := range g {
			if s, ok := e.(string); ok && v.allowedGroups[s] {
				return true
			}
		}
	}
	return false
}

func set(vals []string) map[string]bool {
	out := make(map[string]bool, len(vals))
	for _, v := range vals {
		out[v] = true
	}
	return out
}

func validSubject(s string) bool {
	if s == "" || len(s) > maxSubjectBytes || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
