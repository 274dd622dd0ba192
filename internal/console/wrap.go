package console

import (
	"context"
	"net/http"

	"github.com/countersign/countersign/internal/ownerauth"
)

// WrapAPI lets the console's session call the owner REST API (next, the
// gateway at /v1/). For every request:
//
//   - the Cookie, SessionKeyHeader and CSRF headers are removed before
//     next, so neither half of a session ever reaches the gateway, gRPC
//     metadata or a log but as the Authorization below;
//   - a request with an Authorization header is otherwise passed on
//     untouched: the owner-token and JWT API is unchanged;
//   - a request with the session cookie (the cookie half), one well-formed
//     SessionKeyHeader (the key half the page keeps) and no Authorization
//     header is passed on as "Authorization: Bearer css_….…", the whole
//     secret, which ownerauth looks up in owner_sessions (an unknown,
//     expired or signed-out session gets the API's normal 401). Before
//     that, a method other than GET, HEAD and OPTIONS must carry
//     X-Countersign-CSRF equal to the session's CSRF token and must not
//     come cross-site (Origin, Sec-Fetch-Site): otherwise 403
//     {"error":"csrf"} and next is never called;
//   - the cookie without the key half is no session: the request goes on
//     with no credential and gets the API's 401. Browsers send the cookie
//     to every port of its host, so a page of another localhost port (the
//     agent's) has it; the key half lives in the console origin's
//     localStorage, which no other origin can read.
//
// Every response, whoever the caller, carries the console's security
// headers (Content-Security-Policy, nosniff, no framing, no referrer) and
// Cache-Control: no-store.
//
// A request on a session is bound to it: its context ends when the session
// expires, and it re-reads the session every Options.Recheck, ending when
// the session is signed out, revoked through its owner token, or cannot be
// read (fail closed). So a watch stream outlives its session's expiry by
// nothing, and a sign-out by at most Recheck (30s by default). The
// ResponseWriter is passed on as it is, so flushing (http.Flusher,
// http.ResponseController) works for streams.
func (c *Console) WrapAPI(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Owner data (the approvals queue with agent text, a credential
		// secret shown once) is served to the browser here: no cache may
		// keep it, no other page may frame or sniff it. Set before next,
		// on every answer, the gateway's errors included.
		setSecurityHeaders(w.Header())
		w.Header().Set("Cache-Control", "no-store")
		secret, hasSession := session(r)
		_, hasAuthz := r.Header["Authorization"]
		csrf := r.Header.Values(CSRFHeader)
		r = r.Clone(r.Context())
		r.Header.Del("Cookie")
		r.Header.Del(SessionKeyHeader)
		r.Header.Del(CSRFHeader)
		if hasAuthz || !hasSession {
			next.ServeHTTP(w, r)
			return
		}
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodOptions:
		default:
			if c.crossSite(r) || !ownerauthCSRF(secret, csrf) {
				writeJSON(w, http.StatusForbidden, errorBody{Error: "csrf"})
				return
			}
		}
		r.Header.Set("Authorization", "Bearer "+secret)
		ctx, stop := c.bind(r.Context(), secret)
		defer func() { _ = stop() }()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// bind is ctx ended when the session ends (see WrapAPI). A session that
// does not resolve now is passed on unbound: the API refuses it.
func (c *Console) bind(ctx context.Context, secret string) (context.Context, func() error) {
	s, err := c.o.Auth.Session(ctx, secret)
	if err != nil {
		return ctx, func() error { return nil }
	}
	return ownerauth.Bind(ctx, s.ExpiresAt, c.o.Now, c.o.Recheck, func(ctx context.Context) error {
		_, err := c.o.Auth.Session(ctx, secret)
		return err
	})
}

// ownerauthCSRF checks the one CSRF header against the session's token.
func ownerauthCSRF(secret string, vals []string) bool {
	return len(vals) == 1 && ownerauth.CheckCSRF(secret, vals[0])
}
