package ownerauth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/ledger"
)

// SessionPrefix marks an owner console session secret. It differs from
// "cso_" (an owner token) and "csk_" (an agent credential), so none is
// mistaken for another.
//
// A session's secret is in two halves that the browser keeps apart:
//
//   - the cookie half, "css_" and 256 random bits (52 base32 characters),
//     in the console's HttpOnly cookie. Browsers do not separate cookies by
//     port, so every page of the same host (another port-forwarded
//     localhost port, which may be the agent's) is sent it;
//   - the key half, 52 base32 characters (256 random bits), given only to
//     the console page, which keeps it in its origin's localStorage
//     (origins, unlike cookies, include the port) and sends it in a header.
//
// The session is the whole, "css_<cookie>.<key>": what the console's
// wrapper presents to the owner API as "Authorization: Bearer css_….…",
// and the only form the ledger knows (by its SHA-256). Either half alone is
// worth nothing. A secret of the earlier one-part form ("css_" and 52
// characters: sessions opened before the key half existed) is refused as
// malformed: its owner signs in again.
const SessionPrefix = "css_"

// SessionJoin separates the two halves of a whole session secret.
const SessionJoin = "."

// MaxSessionTTL is the longest a console session may live.
const MaxSessionTTL = 24 * time.Hour

var (
	sessionCookieLen = len(SessionPrefix) + enc.EncodedLen(tokenBytes)
	sessionKeyLen    = enc.EncodedLen(tokenBytes)
	sessionLen       = sessionCookieLen + len(SessionJoin) + sessionKeyLen
)

var (
	errMalformedSession = errors.New("malformed console session")
	errHalfSession      = errors.New("console session without its key half (a session opened before sessions had two halves " +
		"is no longer accepted: sign in to the console again)")
)

// SessionStore is the part of the ledger that resolves console sessions.
// An Authenticator accepts sessions when its TokenStore is one too (the
// ledger is both); otherwise a session is refused as unknown.
type SessionStore interface {
	LookupOwnerSession(ctx context.Context, hash [32]byte) (ledger.OwnerSession, error)
}

// SessionIssuer is the part of the ledger that stores and revokes sessions.
type SessionIssuer interface {
	CreateOwnerSession(ctx context.Context, ownerID, subject, method string, expiresAt time.Time, hash [32]byte) (ledger.OwnerSession, error)
	RevokeOwnerSession(ctx context.Context, id string) error
}

// Session is a live console session and the owner it acts for.
type Session struct {
	Owner
	// ID is the session row ("oss_…"), never the secret.
	ID        string
	ExpiresAt time.Time
}

// SessionSecret is a session's secret in its two halves (see
// SessionPrefix). It has no String method, so that printing one by
// mistake does not print the whole.
type SessionSecret struct {
	// Cookie is the cookie half: "css_" and 52 base32 characters.
	Cookie string
	// Key is the key half: 52 base32 characters.
	Key string
}

// Whole is the session secret the owner API takes and the ledger knows
// (by its hash): Cookie, ".", Key.
func (s SessionSecret) Whole() string { return s.Cookie + SessionJoin + s.Key }

// MintSession returns a new session secret (two halves of 256 random bits
// each) and the hash of its whole, which the ledger keeps.
func MintSession() (SessionSecret, [32]byte, error) {
	var c, k [tokenBytes]byte
	if _, err := rand.Read(c[:]); err != nil {
		return SessionSecret{}, [32]byte{}, fmt.Errorf("ownerauth: random: %w", err)
	}
	if _, err := rand.Read(k[:]); err != nil {
		return SessionSecret{}, [32]byte{}, fmt.Errorf("ownerauth: random: %w", err)
	}
	s := SessionSecret{Cookie: SessionPrefix + enc.EncodeToString(c[:]), Key: enc.EncodeToString(k[:])}
	return s, sha256.Sum256([]byte(s.Whole())), nil
}

// canonical32 reports whether s is the one base32 spelling of 32 bytes:
// lower case, no padding, and no stray bits in its last character (which
// a lenient decoder ignores, giving one value several spellings).
func canonical32(s string) bool {
	if len(s) != sessionKeyLen {
		return false
	}
	b, err := enc.DecodeString(s)
	return err == nil && len(b) == tokenBytes && enc.EncodeToString(b) == s
}

// ValidSessionCookie reports whether v is shaped like a cookie half.
func ValidSessionCookie(v string) bool {
	return len(v) == sessionCookieLen && strings.HasPrefix(v, SessionPrefix) && canonical32(v[len(SessionPrefix):])
}

// ValidSessionKey reports whether v is shaped like a key half.
func ValidSessionKey(v string) bool { return canonical32(v) }

// JoinSession is the whole session secret of a cookie half and a key
// half, each checked for its exact shape.
func JoinSession(cookie, key string) (string, error) {
	if !ValidSessionCookie(cookie) || !ValidSessionKey(key) {
		return "", errMalformedSession
	}
	return cookie + SessionJoin + key, nil
}

// HashSession checks the shape of a presented whole session secret and
// returns its hash; a malformed one never reaches the ledger. The cookie
// half alone, or a secret of the earlier one-part form, is refused and
// says so.
func HashSession(secret string) ([32]byte, error) {
	if len(secret) != sessionLen {
		if ValidSessionCookie(secret) {
			return [32]byte{}, errHalfSession
		}
		return [32]byte{}, errMalformedSession
	}
	cookie, key := secret[:sessionCookieLen], secret[sessionCookieLen+len(SessionJoin):]
	if secret[sessionCookieLen:sessionCookieLen+len(SessionJoin)] != SessionJoin || !ValidSessionCookie(cookie) || !ValidSessionKey(key) {
		return [32]byte{}, errMalformedSession
	}
	return sha256.Sum256([]byte(secret)), nil
}

// csrfLabel separates the CSRF token from any other value derived from a
// session secret.
const csrfLabel = "countersign console csrf v1"

// CSRFToken is the session's CSRF token: an HMAC-SHA256 keyed by the whole
// session secret. Only the holder of both halves can compute it (the
// console answers it only to a request that carries both), every replica
// derives the same one, and nothing about it is stored.
func CSRFToken(secret string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(csrfLabel))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// CheckCSRF reports, in constant time, whether presented is secret's CSRF
// token.
func CheckCSRF(secret, presented string) bool {
	return subtle.ConstantTimeCompare([]byte(CSRFToken(secret)), []byte(presented)) == 1
}

// StartSession mints a session for o valid until expiresAt, stores the
// hash of its whole secret and returns the secret: the only time it exists
// outside the browser.
func StartSession(ctx context.Context, store SessionIssuer, o Owner, expiresAt time.Time) (SessionSecret, ledger.OwnerSession, error) {
	if o.ID == "" || o.Subject == "" || (o.Method != MethodToken && o.Method != MethodOIDC) {
		return SessionSecret{}, ledger.OwnerSession{}, errors.New("ownerauth: a session needs an owner authenticated by token or OIDC")
	}
	secret, hash, err := MintSession()
	if err != nil {
		return SessionSecret{}, ledger.OwnerSession{}, err
	}
	sess, err := store.CreateOwnerSession(ctx, o.ID, o.Subject, string(o.Method), expiresAt, hash)
	if err != nil {
		return SessionSecret{}, ledger.OwnerSession{}, err
	}
	return secret, sess, nil
}

// Session resolves a session secret. It is refused (ErrUnauthenticated)
// when unknown, revoked or expired, when the owner token it was opened
// with has since been revoked or has expired (a session never outlives its
// credential), and when it was opened through OIDC and its subject is no
// longer admitted (oidcSession). A ledger failure is returned as it is.
func (a *Authenticator) Session(ctx context.Context, secret string) (Session, error) {
	s, _, err := a.session(ctx, secret)
	return s, err
}

// session is Session, with when it stops authenticating: its own expiry or
// its owner token's, whichever is first.
func (a *Authenticator) session(ctx context.Context, secret string) (Session, time.Time, error) {
	if a.sessions == nil {
		return Session{}, time.Time{}, fmt.Errorf("%w: console sessions are not enabled", ErrUnauthenticated)
	}
	hash, err := HashSession(secret)
	if err != nil {
		return Session{}, time.Time{}, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	s, err := a.sessions.LookupOwnerSession(ctx, hash)
	if errors.Is(err, ledger.ErrNotFound) {
		return Session{}, time.Time{}, fmt.Errorf("%w: unknown console session", ErrUnauthenticated)
	}
	if err != nil {
		return Session{}, time.Time{}, err
	}
	now := a.now()
	switch {
	case s.RevokedAt != nil:
		err = fmt.Errorf("%w: console session %s is signed out", ErrUnauthenticated, s.ID)
	case !now.Before(s.ExpiresAt):
		err = fmt.Errorf("%w: console session %s expired", ErrUnauthenticated, s.ID)
	case s.Method == string(MethodToken) && s.TokenExpiresAt == nil:
		err = fmt.Errorf("%w: console session %s names no owner token", ErrUnauthenticated, s.ID)
	case s.TokenRevokedAt != nil:
		err = fmt.Errorf("%w: the owner token console session %s was opened with is revoked", ErrUnauthenticated, s.ID)
	case s.TokenExpiresAt != nil && !now.Before(*s.TokenExpiresAt):
		err = fmt.Errorf("%w: the owner token console session %s was opened with expired", ErrUnauthenticated, s.ID)
	case s.Method == string(MethodOIDC):
		err = a.oidcSession(s)
	case s.Method != string(MethodToken):
		err = fmt.Errorf("%w: console session %s has an unknown method", ErrUnauthenticated, s.ID)
	}
	if err != nil {
		return Session{}, time.Time{}, err
	}
	until := s.ExpiresAt
	if s.TokenExpiresAt != nil && s.TokenExpiresAt.Before(until) {
		until = *s.TokenExpiresAt
	}
	return Session{Owner: Owner{ID: s.OwnerID, Subject: s.Subject, Method: Method(s.Method)}, ID: s.ID, ExpiresAt: s.ExpiresAt}, until, nil
}

// oidcSession admits a session opened through OIDC only while its subject
// would be admitted now: OIDC is on, with the issuer the session's owner id
// was derived from, and the subject is in owner-allowed-subjects. A JWT is
// checked against the allowlist on every call; without this, a session
// (up to 24 hours) outlived the subject's removal from the allowlist, a
// change of issuer, and OIDC being turned off. Group membership is not
// stored with a session, so it cannot be checked again: a session is
// opened only for a subject on the subject allowlist (VerifyIDToken).
func (a *Authenticator) oidcSession(s ledger.OwnerSession) error {
	switch {
	case a.oidc == nil:
		return fmt.Errorf("%w: console session %s was opened through OIDC, which is now off", ErrUnauthenticated, s.ID)
	case s.OwnerID != a.oidc.ownerID(s.Subject):
		return fmt.Errorf("%w: console session %s was opened with another OIDC issuer", ErrUnauthenticated, s.ID)
	case !a.oidc.allowedSubjects[s.Subject]:
		return fmt.Errorf("%w: the OIDC subject of console session %s is no longer in owner-allowed-subjects", ErrUnauthenticated, s.ID)
	}
	return nil
}

// SignInToken authenticates a static owner token presented to the
// console's sign-in and returns its owner and the token's expiry. Only an
// owner token opens a session: an agent credential is refused as one
// (ErrAgentCredential), and a session secret or a JWT is refused
// (ErrUnauthenticated), so a session cannot extend itself.
func (a *Authenticator) SignInToken(ctx context.Context, token string) (Owner, time.Time, error) {
	switch {
	case strings.HasPrefix(token, credential.Prefix):
		return Owner{}, time.Time{}, ErrAgentCredential
	case strings.HasPrefix(token, SessionPrefix):
		return Owner{}, time.Time{}, fmt.Errorf("%w: a console session cannot open another; sign in with an owner token (cso_…)", ErrUnauthenticated)
	case !strings.HasPrefix(token, TokenPrefix):
		return Owner{}, time.Time{}, fmt.Errorf("%w: not an owner token (cso_…)", ErrUnauthenticated)
	}
	o, tok, err := a.tokenOwner(ctx, token)
	if err != nil {
		return Owner{}, time.Time{}, err
	}
	return o, tok.ExpiresAt, nil
}

// OIDCEnabled reports whether an issuer is configured.
func (a *Authenticator) OIDCEnabled() bool { return a.oidc != nil }

// OIDCIssuer is the configured issuer ("" when OIDC is off).
func (a *Authenticator) OIDCIssuer() string {
	if a.oidc == nil {
		return ""
	}
	return a.oidc.issuer
}

// OIDCScopes are the scopes an authorization request asks for: openid,
// and what the owner allowlist's claims need (email for an email subject
// claim, groups for a group allowlist). profile is never asked for: no
// profile claim may name an owner (Config.Validate).
func (a *Authenticator) OIDCScopes() []string {
	scopes := []string{"openid"}
	if a.oidc == nil {
		return scopes
	}
	if a.oidc.claim == "email" {
		scopes = append(scopes, "email")
	}
	if len(a.oidc.allowedGroups) > 0 {
		scopes = append(scopes, "groups")
	}
	return scopes
}

// ErrNonce means an ID token's nonce is missing or is not the one the
// sign-in sent.
var ErrNonce = fmt.Errorf("%w: ID token nonce does not match this sign-in", ErrUnauthenticated)

// VerifyIDToken verifies an ID token returned to the console's OIDC
// sign-in with the owner JWT checks (signature against the issuer's JWKS,
// iss, exp, nbf, the subject claim and the owner allowlist) and those of
// OIDC Core §3.1.3.7: aud includes clientID, azp (when present, and
// required with several audiences) is clientID, and nonce is nonce. The
// subject must be in owner-allowed-subjects itself (ErrNotAllowed
// otherwise): the session it opens is checked against that list on every
// use, and the groups are not kept.
func (a *Authenticator) VerifyIDToken(ctx context.Context, raw, clientID, nonce string) (Owner, error) {
	if a.oidc == nil {
		return Owner{}, fmt.Errorf("%w: OIDC is not configured", ErrUnauthenticated)
	}
	if clientID == "" || nonce == "" {
		return Owner{}, fmt.Errorf("%w: ID token check needs a client id and a nonce", ErrUnauthenticated)
	}
	o, claims, err := a.oidc.verifyFor(ctx, raw, a.now(), clientID)
	if err != nil {
		return Owner{}, err
	}
	got, _ := claims["nonce"].(string)
	if subtle.ConstantTimeCompare([]byte(got), []byte(nonce)) != 1 {
		return Owner{}, ErrNonce
	}
	azp, hasAZP := claims["azp"].(string)
	multi := false
	if l, ok := claims["aud"].([]any); ok && len(l) > 1 {
		multi = true
	}
	if (hasAZP || multi) && azp != clientID {
		return Owner{}, fmt.Errorf("%w: ID token azp is not this client", ErrUnauthenticated)
	}
	// A session is checked against the subject allowlist on every use
	// (oidcSession); the groups that admitted a subject are not stored, so
	// a subject admitted only through a group gets no session.
	if !a.oidc.allowedSubjects[o.Subject] {
		return Owner{}, fmt.Errorf("%w: OIDC subject %q is an owner through owner-allowed-groups only; a console session needs the "+
			"subject in owner-allowed-subjects (a session cannot check group membership again; the owner API takes the JWT itself)",
			ErrNotAllowed, o.Subject)
	}
	return o, nil
}
