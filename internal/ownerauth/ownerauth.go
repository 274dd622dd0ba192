// Package ownerauth authenticates callers of the owner API
// (countersign.v1.OwnerService). An owner presents either a static owner
// token ("Bearer cso_…", stored hashed in the ledger, for bootstrap and
// automation) or an OIDC JWT from the configured issuer ("Bearer <JWT>",
// verified against its JWKS), or a console session ("Bearer css_….…", the
// browser console's cookie half and the key half only the console page
// holds, joined into that header by internal/console and looked up hashed
// in the ledger's owner_sessions; see SessionPrefix). An agent credential
// ("csk_…") is refused before any lookup: an agent can never act as its
// owner.
//
// Owner ids: a token's owner id is its owners row ("own_…"). An OIDC owner
// has no row; its id is "oidc:<issuer tag>:<subject>", where the tag is the
// first 12 hex digits of the SHA-256 of the issuer, so that subjects of two
// issuers never meet if the operator switches issuer. Agents and mandates
// record that id as their owner_id.
package ownerauth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/ledger"
)

// Sentinel errors. Both mean "not an owner"; ErrAgentCredential says why, so
// that an agent misconfigured with the owner API's address is easy to spot.
var (
	// ErrUnauthenticated means no credential, or one that is malformed,
	// unknown, expired, revoked or does not verify.
	ErrUnauthenticated = errors.New("ownerauth: unauthenticated")
	// ErrAgentCredential means an agent credential was presented to the
	// owner API. It is never looked up.
	ErrAgentCredential = errors.New("ownerauth: an agent credential cannot call the owner API")
	// ErrNotAllowed means a JWT verified, but its subject is not an owner
	// of this deployment: neither its subject nor any of its groups is on
	// the allowlist.
	ErrNotAllowed = errors.New("ownerauth: not an allowed owner")
)

// DefaultGroupsClaim is the claim the allowed groups are looked up in.
const DefaultGroupsClaim = "groups"

// Method says how an owner authenticated.
type Method string

// Methods.
const (
	MethodToken Method = "token"
	MethodOIDC  Method = "oidc"
)

// Owner is an authenticated caller of the owner API.
type Owner struct {
	// ID scopes everything the owner may see and change: "own_…" for a
	// token owner, "oidc:<issuer tag>:<subject>" for an OIDC owner.
	ID string
	// Subject is who exactly called, for logs and audit: the token id
	// ("otk_…") or the OIDC subject claim.
	Subject string
	Method  Method
}

// TokenStore is the part of the ledger that resolves static owner tokens.
type TokenStore interface {
	LookupOwnerToken(ctx context.Context, hash [32]byte) (ledger.OwnerToken, error)
}

// Config configures OIDC. With Issuer empty OIDC is off and only static
// owner tokens are accepted.
type Config struct {
	// Issuer must equal the token's "iss" exactly.
	Issuer string
	// Audience must be among the token's "aud".
	Audience string
	// JWKSURL or JWKSFile (exactly one) holds the issuer's public keys.
	JWKSURL  string
	JWKSFile string
	// SubjectClaim names the claim that identifies the owner: "sub"
	// (the default) or "email", which needs email_verified. Validate refuses
	// any other (see subjectClaims).
	SubjectClaim string
	// AllowedSubjects are the subject claim values admitted as owners.
	AllowedSubjects []string
	// AllowedGroups admit a subject whose GroupsClaim lists one of them.
	// At least one of AllowedSubjects and AllowedGroups must be set when
	// OIDC is on.
	AllowedGroups []string
	// GroupsClaim names the top-level claim holding the subject's groups
	// (an array of strings, or one string); default "groups". Claim names
	// are matched whole (they may contain dots, as namespaced claims do).
	GroupsClaim string
	// Leeway tolerates clock skew on exp, nbf and iat; default 30s, at most 5m.
	Leeway time.Duration
	// Algorithms are the accepted signature algorithms; default RS256,
	// RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512 and EdDSA.
	// HMAC algorithms and "none" are never accepted.
	Algorithms []jose.SignatureAlgorithm
	// HTTPClient fetches JWKSURL; nil uses a client with timeouts.
	HTTPClient *http.Client
	// KeysMaxAge is how long fetched keys are used before they are fetched
	// again; default 10m. KeysMinReload is the least time between two
	// fetches, whatever tokens arrive; default 30s.
	KeysMaxAge, KeysMinReload time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// InAgentPod says this process runs in the agent's pod, whose loopback
	// the agent shares: plain http even to loopback may reach a listener
	// of the agent's, whose key set would make it an owner. The issuer and
	// JWKSURL must then be https, and the JWKS fetch follows redirects to
	// https only.
	InAgentPod bool
}

// Enabled reports whether any OIDC setting is present.
func (c Config) Enabled() bool {
	return c.Issuer != "" || c.Audience != "" || c.JWKSURL != "" || c.JWKSFile != ""
}

// subjectClaims are the claims that may name an owner ("" is the default,
// sub). The owner id is built from that claim alone, so it must name one
// user of the issuer and no one else: sub does (OIDC Core §2), and email
// does once the issuer has verified it (verifyFor insists on
// email_verified).
var subjectClaims = map[string]bool{"": true, "sub": true, "email": true}

// Validate checks c without loading anything, with messages that name the
// flag to fix.
func (c Config) Validate() error {
	if !c.Enabled() {
		if c.SubjectClaim != "" && c.SubjectClaim != "sub" {
			return errors.New("owner-subject-claim is set but OIDC is off: set owner-issuer, owner-audience and owner-jwks-url or owner-jwks-file")
		}
		if len(c.AllowedSubjects) > 0 || len(c.AllowedGroups) > 0 {
			return errors.New("owner-allowed-subjects or owner-allowed-groups is set but OIDC is off: set owner-issuer, owner-audience and owner-jwks-url or owner-jwks-file")
		}
		if c.GroupsClaim != "" && c.GroupsClaim != DefaultGroupsClaim {
			return errors.New("owner-groups-claim is set but OIDC is off: set owner-issuer, owner-audience and owner-jwks-url or owner-jwks-file")
		}
		return nil
	}
	var errs []error
	if c.Issuer == "" {
		errs = append(errs, errors.New("owner-issuer is required when OIDC is configured"))
	}
	if c.Audience == "" {
		errs = append(errs, errors.New("owner-audience is required when OIDC is configured"))
	}
	switch {
	case c.JWKSURL == "" && c.JWKSFile == "":
		errs = append(errs, errors.New("one of owner-jwks-url or owner-jwks-file is required when OIDC is configured"))
	case c.JWKSURL != "" && c.JWKSFile != "":
		errs = append(errs, errors.New("owner-jwks-url and owner-jwks-file are exclusive: set one"))
	case c.JWKSURL != "":
		if err := checkJWKSURL(c.JWKSURL); err != nil {
			errs = append(errs, err)
		} else if c.InAgentPod {
			errs = append(errs, CheckInAgentPodURL("owner-jwks-url", c.JWKSURL))
		}
	}
	if c.InAgentPod && c.Issuer != "" {
		// The issuer is compared, not fetched, here; but the console
		// discovers its endpoints at <issuer>/.well-known/openid-configuration.
		errs = append(errs, CheckInAgentPodURL("owner-issuer", c.Issuer))
	}
	if !subjectClaims[c.SubjectClaim] {
		errs = append(errs, fmt.Errorf("owner-subject-claim %q is refused: set sub (the default) or email. An owner is named by "+
			"the issuer's unique, stable id for the user (sub) or a verified email; other claims, such as preferred_username, "+
			"name or nickname, are neither unique nor stable (OIDC Core §5.7) and users often set them themselves, "+
			"so another user of the issuer could take the value and become that owner", c.SubjectClaim))
	}
	if len(c.AllowedSubjects) == 0 && len(c.AllowedGroups) == 0 {
		errs = append(errs, errors.New("OIDC owners need an allowlist: set owner-allowed-subjects and/or owner-allowed-groups "+
			"(the issuer signs tokens for everyone in its realm; an issuer alone would make each of them an owner)"))
	}
	for _, l := range []struct {
		flag string
		vals []string
	}{{"owner-allowed-subjects", c.AllowedSubjects}, {"owner-allowed-groups", c.AllowedGroups}} {
		for _, v := range l.vals {
			if !validSubject(v) {
				errs = append(errs, fmt.Errorf("%s: %q must be a printable string of 1 to %d bytes", l.flag, v, maxSubjectBytes))
			}
		}
	}
	if strings.TrimSpace(c.GroupsClaim) != c.GroupsClaim {
		errs = append(errs, fmt.Errorf("owner-groups-claim %q has surrounding spaces", c.GroupsClaim))
	}
	if len(c.AllowedGroups) == 0 && c.GroupsClaim != "" && c.GroupsClaim != DefaultGroupsClaim {
		errs = append(errs, errors.New("owner-groups-claim is set but owner-allowed-groups is empty: no group would be admitted"))
	}
	if c.Leeway < 0 || c.Leeway > 5*time.Minute {
		errs = append(errs, fmt.Errorf("owner JWT leeway must be between 0 and 5m, got %s", c.Leeway))
	}
	for _, a := range c.Algorithms {
		if !asymmetric[a] {
			errs = append(errs, fmt.Errorf("owner JWT algorithm %q is not an accepted asymmetric signature algorithm", a))
		}
	}
	return errors.Join(errs...)
}

// Authenticator turns an Authorization header into an Owner.
type Authenticator struct {
	tokens   TokenStore
	sessions SessionStore // nil: console sessions are refused
	oidc     *verifier    // nil when OIDC is off
	now      func() time.Time
	inPod    bool // Config.InAgentPod
}

// New returns an authenticator over tokens (the ledger) and, when cfg
// enables it, OIDC. A JWKS file is read now, so a bad file fails start-up; a
// JWKS URL is fetched on first use, so an issuer that is briefly down does
// not stop Countersign from starting (token owners still get in).
func New(cfg Config, tokens TokenStore) (*Authenticator, error) {
	if tokens == nil {
		return nil, errors.New("ownerauth: a token store is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	a := &Authenticator{tokens: tokens, now: now, inPod: cfg.InAgentPod}
	if ss, ok := tokens.(SessionStore); ok {
		a.sessions = ss
	}
	if cfg.InAgentPod && cfg.JWKSURL != "" {
		cfg.HTTPClient = httpsRedirectsOnly(cfg.HTTPClient)
	}
	if cfg.Enabled() {
		v, err := newVerifier(cfg, now)
		if err != nil {
			return nil, err
		}
		a.oidc = v
	}
	return a, nil
}

// InAgentPod reports Config.InAgentPod, for the console's issuer
// endpoints, which must then be https too.
func (a *Authenticator) InAgentPod() bool { return a.inPod }

// Authenticate resolves the value of an Authorization header. Errors match
// ErrUnauthenticated, ErrAgentCredential or ErrNotAllowed, except a ledger failure, which is
// returned as it is (ledger.ErrUnavailable: the caller may retry).
func (a *Authenticator) Authenticate(ctx context.Context, authorization string) (Owner, error) {
	o, _, err := a.authenticate(ctx, authorization)
	return o, err
}

// authenticate is Authenticate, with when the credential stops
// authenticating if nothing else changes (zero: not known).
func (a *Authenticator) authenticate(ctx context.Context, authorization string) (Owner, time.Time, error) {
	cred, err := bearer(authorization)
	if err != nil {
		return Owner{}, time.Time{}, err
	}
	switch {
	case strings.HasPrefix(cred, credential.Prefix):
		return Owner{}, time.Time{}, ErrAgentCredential
	case strings.HasPrefix(cred, TokenPrefix):
		o, tok, err := a.tokenOwner(ctx, cred)
		return o, tok.ExpiresAt, err
	case strings.HasPrefix(cred, SessionPrefix):
		s, until, err := a.session(ctx, cred)
		return s.Owner, until, err
	case a.oidc == nil:
		return Owner{}, time.Time{}, fmt.Errorf("%w: not an owner token, and OIDC is not configured", ErrUnauthenticated)
	default:
		o, claims, err := a.oidc.verifyFor(ctx, cred, a.now(), a.oidc.audience)
		if err != nil {
			return Owner{}, time.Time{}, err
		}
		var exp time.Time
		if f, ok := claims["exp"].(float64); ok { // verifyFor has required it
			exp = time.Unix(int64(f), 0)
		}
		return o, exp, nil
	}
}

// bearer extracts the credential of "Bearer <credential>". An agent
// credential sent any other way (bare, or as HTTP Basic the way Razorpay's
// SDK sends it) is still recognised and refused as one.
func bearer(authorization string) (string, error) {
	h := strings.TrimSpace(authorization)
	if h == "" {
		return "", fmt.Errorf("%w: no credential (send Authorization: Bearer <owner token or OIDC JWT>)", ErrUnauthenticated)
	}
	scheme, cred, ok := strings.Cut(h, " ")
	if !ok {
		if strings.HasPrefix(h, credential.Prefix) {
			return "", ErrAgentCredential
		}
		return "", fmt.Errorf("%w: the Authorization header must be Bearer <credential>", ErrUnauthenticated)
	}
	cred = strings.TrimSpace(cred)
	switch {
	case strings.EqualFold(scheme, "Bearer"):
		if cred == "" {
			return "", fmt.Errorf("%w: empty bearer credential", ErrUnauthenticated)
		}
		return cred, nil
	case strings.EqualFold(scheme, "Basic"):
		if raw, err := base64.StdEncoding.DecodeString(cred); err == nil {
			user, pass, _ := strings.Cut(string(raw), ":")
			if strings.HasPrefix(user, credential.Prefix) || strings.HasPrefix(pass, credential.Prefix) {
				return "", ErrAgentCredential
			}
		}
		return "", fmt.Errorf("%w: the owner API takes Bearer credentials, not Basic", ErrUnauthenticated)
	default:
		return "", fmt.Errorf("%w: unsupported authorization scheme", ErrUnauthenticated)
	}
}

func (a *Authenticator) tokenOwner(ctx context.Context, secret string) (Owner, ledger.OwnerToken, error) {
	hash, err := HashToken(secret)
	if err != nil {
		return Owner{}, ledger.OwnerToken{}, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	tok, err := a.tokens.LookupOwnerToken(ctx, hash)
	if errors.Is(err, ledger.ErrNotFound) {
		return Owner{}, ledger.OwnerToken{}, fmt.Errorf("%w: unknown owner token", ErrUnauthenticated)
	}
	if err != nil {
		return Owner{}, ledger.OwnerToken{}, err
	}
	switch {
	case tok.RevokedAt != nil:
		return Owner{}, ledger.OwnerToken{}, fmt.Errorf("%w: owner token %s is revoked", ErrUnauthenticated, tok.ID)
	case !a.now().Before(tok.ExpiresAt):
		return Owner{}, ledger.OwnerToken{}, fmt.Errorf("%w: owner token %s expired", ErrUnauthenticated, tok.ID)
	}
	return Owner{ID: tok.OwnerID, Subject: tok.ID, Method: MethodToken}, tok, nil
}
