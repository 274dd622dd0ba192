package console

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/quota"
)

// maxSignInBytes bounds a sign-in body: {"token":"cso_…"} is under 100.
const maxSignInBytes = 4 << 10

// sessionBody is the answer of GET and POST /console/api/session.
type sessionBody struct {
	OwnerID     string `json:"owner_id"`
	Method      string `json:"method"`
	Subject     string `json:"subject"`
	ExpireTime  string `json:"expire_time"`
	CSRFToken   string `json:"csrf_token"`
	OIDCEnabled bool   `json:"oidc_enabled"`
	// SessionKey is the session's key half, in the answer of a sign-in
	// only: the page keeps it and sends it back in SessionKeyHeader.
	SessionKey string `json:"session_key,omitempty"`
}

// body answers for the session whose whole secret is secret.
func (c *Console) body(secret string, s ownerauth.Session) sessionBody {
	return sessionBody{OwnerID: s.Owner.ID, Method: string(s.Method), Subject: s.Subject,
		ExpireTime: s.ExpiresAt.UTC().Format(time.RFC3339), CSRFToken: ownerauth.CSRFToken(secret),
		OIDCEnabled: c.oidc != nil}
}

func (c *Console) signedOut(w http.ResponseWriter) {
	enabled := c.oidc != nil
	writeJSON(w, http.StatusUnauthorized, errorBody{Error: "signed_out", OIDCEnabled: &enabled})
}

// getSession answers who the session (cookie and key halves) signs in, or
// signed_out: the cookie alone, which every port of the host is sent, is
// signed out, and learns nothing (not even the CSRF token).
func (c *Console) getSession(w http.ResponseWriter, r *http.Request) {
	secret, ok := session(r)
	if !ok {
		c.signedOut(w)
		return
	}
	s, err := c.o.Auth.Session(r.Context(), secret)
	switch {
	case authFailure(err):
		c.signedOut(w)
	case err != nil:
		c.unavailable(w, err)
	default:
		writeJSON(w, http.StatusOK, c.body(secret, s))
	}
}

// signIn opens a session with an owner token.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	if c.crossSite(r) {
		writeJSON(w, http.StatusForbidden, errorBody{Error: "csrf"})
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeJSON(w, http.StatusUnsupportedMediaType, errorBody{Error: "sign-in takes Content-Type: application/json"})
		return
	}
	src := c.o.Peers.HTTPSource(r)
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSignInBytes))
	if err != nil {
		c.o.Failures.Note(src, "")
		writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{Error: "sign-in body is larger than 4 KiB"})
		return
	}
	token, err := ParseSignIn(raw)
	if err != nil {
		c.o.Failures.Note(src, "")
		writeJSON(w, http.StatusBadRequest, errorBody{Error: err.Error()})
		return
	}
	id := credentialKey(token)
	if err := c.o.Failures.Check(src, id); err != nil {
		tooMany(w, err, "too many failed sign-ins from this address; retry later")
		return
	}
	o, tokenExpires, err := c.o.Auth.SignInToken(r.Context(), token)
	if authFailure(err) {
		c.o.Failures.Note(src, id)
		writeJSON(w, http.StatusUnauthorized, errorBody{Error: reason(err)})
		return
	}
	if err != nil {
		c.unavailable(w, err)
		return
	}
	c.o.Failures.AdmitFor(o.ID, id)
	expires := c.o.Now().Add(c.o.TTL)
	if tokenExpires.Before(expires) {
		expires = tokenExpires // a session never outlives its token
	}
	c.open(w, r, o, expires, func(secret ownerauth.SessionSecret, s ownerauth.Session) {
		b := c.body(secret.Whole(), s)
		b.SessionKey = secret.Key
		writeJSON(w, http.StatusOK, b)
	})
}

// open starts a session for o, sets its cookie (the cookie half) and calls
// done, which hands the key half to the page. An owner
// opens at most OwnerSignIns sessions and holds at most MaxSessions live
// ones (the oldest is signed out): each session is one more credential
// exempt from the source block, and an owner signing in without end must
// not be able to grow that set, or the ledger, without bound.
func (c *Console) open(w http.ResponseWriter, r *http.Request, o ownerauth.Owner, expires time.Time,
	done func(secret ownerauth.SessionSecret, s ownerauth.Session),
) {
	if ok, wait := c.o.OwnerSignIns.Allow(o.ID); !ok {
		c.o.Log.Info("console: sign-in refused: too many by this owner", "owner", o.ID, "subject", o.Subject)
		tooMany(w, &quota.ExhaustedError{Scope: "sign-ins by this owner", RetryAfter: wait}, "too many sign-ins by this owner; retry later")
		return
	}
	secret, row, err := ownerauth.StartSession(r.Context(), c.o.Store, o, expires)
	if err != nil {
		c.unavailable(w, err)
		return
	}
	// Without the trim the bound does not hold: fail closed. The new
	// session's secret is never sent, so its row is worth nothing, and the
	// next trim counts it among the oldest.
	signedOut, err := c.o.Store.TrimOwnerSessions(r.Context(), o.ID, row.ID, c.o.MaxSessions)
	if err != nil {
		c.unavailable(w, err)
		return
	}
	// The new secret is a credential that has authenticated: its calls are
	// exempt from the blocks on their source address, which the agent shares
	// (127.0.0.1 through a port-forward) and can exhaust on purpose. It is
	// remembered among o's own credentials, which no other owner can evict.
	// It is keyed by the whole secret, as the API's guard keys the
	// "Bearer css_….…" WrapAPI presents: the cookie half alone is another
	// credential, never exempt.
	c.o.Failures.AdmitFor(o.ID, credentialKey(secret.Whole()))
	maxAge := int((row.ExpiresAt.Sub(c.o.Now()) + time.Second/2) / time.Second)
	w.Header().Add("Set-Cookie", SessionCookie+"="+secret.Cookie+"; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age="+strconv.Itoa(max(maxAge, 1)))
	c.o.Log.Info("console: session opened", "session", row.ID, "owner", o.ID, "method", string(o.Method), "subject", o.Subject,
		"oldest_signed_out", signedOut)
	done(secret, ownerauth.Session{Owner: o, ID: row.ID, ExpiresAt: row.ExpiresAt})
}

// signOut revokes the session (both halves presented) and clears its
// cookie; the page forgets the key half.
func (c *Console) signOut(w http.ResponseWriter, r *http.Request) {
	secret, ok := session(r)
	if !ok {
		c.signedOut(w)
		return
	}
	if c.crossSite(r) || !ownerauth.CheckCSRF(secret, r.Header.Get(CSRFHeader)) {
		writeJSON(w, http.StatusForbidden, errorBody{Error: "csrf"})
		return
	}
	s, err := c.o.Auth.Session(r.Context(), secret)
	switch {
	case authFailure(err): // already unusable: clearing the cookie is all there is to do
	case err != nil:
		c.unavailable(w, err)
		return
	default:
		if err := c.o.Store.RevokeOwnerSession(r.Context(), s.ID); err != nil {
			c.unavailable(w, err)
			return
		}
		c.o.Log.Info("console: session signed out", "session", s.ID, "owner", s.Owner.ID)
	}
	clearCookie(w, SessionCookie, "Strict")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

func clearCookie(w http.ResponseWriter, name, sameSite string) {
	w.Header().Add("Set-Cookie", name+"=; Path=/; HttpOnly; Secure; SameSite="+sameSite+"; Max-Age=0")
}

// session is the whole secret of the request's session: its one session
// cookie (the cookie half) joined to its one SessionKeyHeader (the key
// half). Without both, well formed, there is no session.
func session(r *http.Request) (string, bool) {
	cookie, ok := sessionCookie(r)
	if !ok {
		return "", false
	}
	key, err := ParseSessionKey(r.Header.Values(SessionKeyHeader))
	if err != nil {
		return "", false
	}
	secret, err := ownerauth.JoinSession(cookie, key)
	return secret, err == nil
}

// sessionCookie is the value of the request's one session cookie: a
// session's cookie half. Two are refused (which one to believe is what an
// attacker would play with), and so is anything not shaped like a cookie
// half.
func sessionCookie(r *http.Request) (string, bool) {
	var vals []string
	for _, ck := range r.Cookies() {
		if ck.Name == SessionCookie {
			vals = append(vals, ck.Value)
		}
	}
	if len(vals) != 1 {
		return "", false
	}
	if !ownerauth.ValidSessionCookie(vals[0]) {
		return "", false
	}
	return vals[0], true
}

// crossSite reports whether the request did not come from a page of the
// console's own origin: a Sec-Fetch-Site other than same-origin, or an
// Origin other than the request's own (scheme://Host as this listener saw
// it) or the configured console URL's. A request with neither header (not
// from a browser that sends them) is judged by the CSRF token alone.
func (c *Console) crossSite(r *http.Request) bool {
	if v := r.Header.Values("Sec-Fetch-Site"); len(v) > 0 && (len(v) != 1 || v[0] != "same-origin") {
		return true
	}
	v := r.Header.Values("Origin")
	if len(v) == 0 {
		return false
	}
	if len(v) != 1 {
		return true
	}
	origin := strings.ToLower(v[0])
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return origin != strings.ToLower(scheme+"://"+r.Host) && (c.origin == "" || origin != c.origin)
}

// credentialKey names a presented credential in the failure counter
// without keeping it.
func credentialKey(secret string) string {
	sum := sha256.Sum256([]byte("Bearer " + secret))
	return "cred:" + hex.EncodeToString(sum[:8])
}

// tooMany answers 429 with msg, and Retry-After when err says how long.
func tooMany(w http.ResponseWriter, err error, msg string) {
	var ex *quota.ExhaustedError
	if errors.As(err, &ex) {
		w.Header().Set("Retry-After", strconv.FormatInt(quota.RetryAfterSeconds(ex.RetryAfter), 10))
	}
	writeJSON(w, http.StatusTooManyRequests, errorBody{Error: msg})
}

// reason is a refusal as the console shows it.
func reason(err error) string {
	if errors.Is(err, ownerauth.ErrAgentCredential) {
		return "an agent credential (csk_…) cannot sign in to the console: sign in with an owner token (cso_…)"
	}
	msg := err.Error()
	for _, p := range []string{ownerauth.ErrUnauthenticated.Error() + ": ", ownerauth.ErrNotAllowed.Error() + ": "} {
		msg = strings.TrimPrefix(msg, p)
	}
	return strings.TrimPrefix(msg, "ownerauth: ")
}
