// Package console is the server side of the owner browser console, served
// under /console/ on the HTTP listener: the embedded static files (web/),
// sign-in and sign-out, the OIDC authorization code flow, and the wrapper
// that lets the console's session cookie call the owner REST API (/v1/).
//
// The agent shares the pod and can reach this listener, and it chooses
// every byte it sends. So nothing here is a new way in: a session is opened
// only by an owner token (through ownerauth, as the API checks it) or an
// ID token of the configured issuer for an allowlisted subject; sign-in
// attempts are bounded per peer address (quota.Failures, shared with the
// owner API), and so are the OIDC code exchanges they cause; the sessions
// an owner opens are bounded in rate and in number, so that no owner can
// use them to crowd another out of the failure exemption; a session is an
// owner credential stored hashed in Postgres and refused once expired or
// signed out; a session is two halves, the HttpOnly cookie and a key only
// the console page holds (in its origin's localStorage, sent in a header),
// because every port of a host is sent the cookie (the agent's page on
// another port-forwarded localhost port included); and a session reaches
// the API only with both halves and, to change anything, after CSRF checks.
package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/quota"
)

//go:embed web
var webFiles embed.FS

// Names of the cookies and headers of the console's contract with its
// frontend (internal/console/web).
const (
	SessionCookie = "__Host-countersign_session"
	OIDCCookie    = "__Host-countersign_oidc"
	CSRFHeader    = "X-Countersign-CSRF"
	// SessionKeyHeader carries a session's key half (ownerauth.SessionPrefix):
	// the page keeps it in its origin's localStorage and sends it with every
	// request, because the cookie alone reaches every port of its host.
	SessionKeyHeader = "X-Countersign-Session-Key"
	// SessionKeyFragment starts the URL fragment that hands the key half to
	// the page after an OIDC sign-in ("/console/#session_key=…"): a fragment
	// is sent to no server and in no Referer, and the page removes it.
	SessionKeyFragment = "session_key="
	// SignInBinding names the binding of an OIDC sign-in to the browser tab
	// that started it: the query parameter of /console/oidc/start and the
	// member after the key in the callback's fragment
	// ("/console/#session_key=…&binding=…"). It is the lower-case hex
	// SHA-256 of a random value the page keeps in its sessionStorage; the
	// page takes a key from the fragment only with its own tab's binding,
	// so a page of another port cannot hand it a session of its choosing.
	SignInBinding = "binding"
)

// DefaultSessionTTL is a session's lifetime when Options.TTL is 0.
const DefaultSessionTTL = 8 * time.Hour

// DefaultRecheck is how often a request that stays open (a watch stream)
// re-reads its session, so that a sign-out ends it.
const DefaultRecheck = 30 * time.Second

// DefaultMaxSessions is how many live sessions one owner may hold when
// Options.MaxSessions is 0: a new one signs the oldest out.
const DefaultMaxSessions = 10

// The default bounds of Options.OwnerSignIns and Options.OIDCExchanges.
//
// An owner opens ten sessions at once, then one a minute (token or OIDC):
// a sign-in is cheap to repeat for whoever holds an owner token, and each
// one writes a session row and is one more credential the failure counter
// remembers.
//
// A source has twenty authorization codes redeemed at the issuer's token
// endpoint at once, then one every five seconds: starting a sign-in takes
// no credential, so without a bound anyone who reaches the listener could
// make Countersign call the issuer (with the client secret) at will.
const (
	ownerSignInRate, ownerSignInBurst   = 1.0 / 60, 10
	oidcExchangeRate, oidcExchangeBurst = 0.2, 20
)

// csp is the Content-Security-Policy of every /console/ response: the
// console runs its own files only and talks to its own origin only.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Store is the part of the ledger the console writes: sessions, and the
// key every replica seals the OIDC sign-in cookie with.
type Store interface {
	ownerauth.SessionIssuer
	// TrimOwnerSessions signs out an owner's oldest live sessions but
	// keepID so that keep remain (ledger.Store.TrimOwnerSessions).
	TrimOwnerSessions(ctx context.Context, ownerID, keepID string, keep int) (int64, error)
	ConsoleKey(ctx context.Context, name string, candidate []byte) ([]byte, error)
}

// OIDC configures the OIDC sign-in. The ID token is verified by the
// Authenticator's OIDC configuration (its issuer, keys and allowlist) with
// ClientID as the audience.
type OIDC struct {
	ClientID string
	// ClientSecret is for confidential clients; empty: a public client
	// (PKCE alone).
	ClientSecret string
	// AuthURL and TokenURL are the issuer's endpoints; when both are
	// empty they are discovered from <issuer>/.well-known/openid-configuration.
	AuthURL, TokenURL string
	// HTTPClient calls discovery and the token endpoint; nil: a client
	// with timeouts that follows no redirect off https.
	HTTPClient *http.Client
}

// Options configure a Console.
type Options struct {
	Auth  *ownerauth.Authenticator
	Store Store
	// TTL is a session's lifetime (DefaultSessionTTL when 0, at most
	// ownerauth.MaxSessionTTL); a token sign-in's session also ends when
	// its owner token does.
	TTL time.Duration
	// Peers names a sign-in's source; Failures counts failed sign-ins per
	// source and per presented credential (share the owner API guard's, so
	// that the two are one budget). Nil Failures: nothing is bounded.
	Peers    quota.Peers
	Failures *quota.Failures
	// OwnerSignIns limits the sessions opened per owner id; nil: ten at
	// once, then one a minute.
	OwnerSignIns *quota.Limiter
	// OIDCExchanges limits the authorization code exchanges per source
	// (Peers); nil: twenty at once, then one every five seconds.
	OIDCExchanges *quota.Limiter
	// MaxSessions is how many live sessions an owner may hold; opening
	// one more signs its oldest out (DefaultMaxSessions when 0).
	MaxSessions int
	// URL is the console's external base URL (scheme://host[:port]): the
	// origin its pages are served from behind a proxy, and the base of the
	// OIDC redirect_uri. Required with OIDC.
	URL string
	// OIDC turns on OIDC sign-in; nil: owner tokens only.
	OIDC *OIDC
	// Recheck is how often a long request re-reads its session
	// (DefaultRecheck when 0).
	Recheck time.Duration
	// Now is the clock; nil means time.Now. It must be the Authenticator's.
	Now func() time.Time
	Log *slog.Logger
}

// Console serves /console/ and wraps /v1/.
type Console struct {
	o      Options
	origin string // of o.URL; "" when not set
	assets fs.FS
	index  []byte
	oidc   *oidcFlow // nil: OIDC sign-in off
}

// New checks o and returns a console.
func New(o Options) (*Console, error) {
	if o.Auth == nil || o.Store == nil {
		return nil, errors.New("console: Auth and Store are required")
	}
	if o.TTL == 0 {
		o.TTL = DefaultSessionTTL
	}
	if o.TTL < time.Minute || o.TTL > ownerauth.MaxSessionTTL {
		return nil, fmt.Errorf("console: session lifetime must be between 1m and %s, got %s", ownerauth.MaxSessionTTL, o.TTL)
	}
	if o.Recheck <= 0 {
		o.Recheck = DefaultRecheck
	}
	if o.MaxSessions == 0 {
		o.MaxSessions = DefaultMaxSessions
	}
	if o.MaxSessions < 1 {
		return nil, fmt.Errorf("console: an owner's live sessions must be bounded by at least 1, got %d", o.MaxSessions)
	}
	if o.OwnerSignIns == nil {
		o.OwnerSignIns = quota.NewLimiter(quota.Options{Rate: ownerSignInRate, Burst: ownerSignInBurst})
	}
	if o.OIDCExchanges == nil {
		o.OIDCExchanges = quota.NewLimiter(quota.Options{Rate: oidcExchangeRate, Burst: oidcExchangeBurst})
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	c := &Console{o: o}
	if o.URL != "" {
		origin, err := Origin(o.URL)
		if err != nil {
			return nil, err
		}
		c.origin = origin
	}
	assets, err := fs.Sub(webFiles, "web/assets")
	if err != nil {
		return nil, err
	}
	c.assets = assets
	if c.index, err = webFiles.ReadFile("web/index.html"); err != nil {
		return nil, fmt.Errorf("console: embedded index.html: %w", err)
	}
	if o.OIDC != nil {
		if c.oidc, err = newOIDCFlow(c, *o.OIDC); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Origin is the origin (scheme://host[:port]) of a console URL, checked:
// https, or http to localhost or 127.0.0.1 only; no path beyond "/", no
// query, fragment or user.
func Origin(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("console-url: %w", err)
	}
	switch {
	case u.Host == "" || u.Opaque != "":
		return "", fmt.Errorf("console-url must be an absolute URL such as https://countersign.example.com, got %q", raw)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "" || (u.Path != "" && u.Path != "/"):
		return "", fmt.Errorf("console-url must be scheme://host[:port] only (no user, path, query or fragment), got %q", raw)
	case u.Scheme == "https":
	case u.Scheme == "http" && (u.Hostname() == "localhost" || u.Hostname() == "127.0.0.1"):
	default:
		return "", fmt.Errorf("console-url must be https (plain http only for localhost or 127.0.0.1), got %q", raw)
	}
	return strings.ToLower(u.Scheme + "://" + u.Host), nil
}

// Handler serves /console and everything under /console/.
func (c *Console) Handler() http.Handler {
	return http.HandlerFunc(c.serve)
}

func (c *Console) serve(w http.ResponseWriter, r *http.Request) {
	setSecurityHeaders(w.Header())
	p := r.URL.Path
	switch {
	case p == "/console":
		http.Redirect(w, r, "/console/", http.StatusMovedPermanently)
	case p == "/console/":
		if allow(w, r, http.MethodGet, http.MethodHead) {
			c.static(w, r, "index.html", c.index)
		}
	case p == "/console/assets/"+currenciesAsset:
		if allow(w, r, http.MethodGet, http.MethodHead) {
			c.static(w, r, currenciesAsset, currencies())
		}
	case strings.HasPrefix(p, "/console/assets/"):
		if allow(w, r, http.MethodGet, http.MethodHead) {
			c.asset(w, r, strings.TrimPrefix(p, "/console/assets/"))
		}
	case p == "/console/api/session":
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			c.getSession(w, r)
		case http.MethodPost:
			c.signIn(w, r)
		default:
			methodNotAllowed(w, "GET, HEAD, POST")
		}
	case p == "/console/api/signout":
		if allow(w, r, http.MethodPost) {
			c.signOut(w, r)
		}
	case p == "/console/oidc/start":
		if allow(w, r, http.MethodGet) {
			c.oidcStart(w, r)
		}
	case p == "/console/oidc/callback":
		if allow(w, r, http.MethodGet) {
			c.oidcCallback(w, r)
		}
	case strings.HasPrefix(p, "/console/api/"), strings.HasPrefix(p, "/console/oidc/"):
		writeJSON(w, http.StatusNotFound, errorBody{Error: "not_found"})
	default:
		http.NotFound(w, r)
	}
}

// setSecurityHeaders are on every /console/ response, error pages included.
func setSecurityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
}

// contentTypes are the types of the files the console may embed; a file
// of any other kind is not served.
var contentTypes = map[string]string{
	".html":  "text/html; charset=utf-8",
	".js":    "text/javascript; charset=utf-8",
	".mjs":   "text/javascript; charset=utf-8",
	".css":   "text/css; charset=utf-8",
	".json":  "application/json",
	".map":   "application/json",
	".svg":   "image/svg+xml",
	".png":   "image/png",
	".ico":   "image/x-icon",
	".webp":  "image/webp",
	".woff2": "font/woff2",
	".txt":   "text/plain; charset=utf-8",
}

func (c *Console) asset(w http.ResponseWriter, r *http.Request, name string) {
	if !fs.ValidPath(name) || name == "." {
		http.NotFound(w, r)
		return
	}
	b, err := fs.ReadFile(c.assets, name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	c.static(w, r, name, b)
}

func (c *Console) static(w http.ResponseWriter, r *http.Request, name string, b []byte) {
	ct, ok := contentTypes[path.Ext(name)]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", ct)
	// Revalidate every time: a new binary's files replace the old at once.
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Content-Length", fmt.Sprint(len(b)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b) //nolint:gosec // b is a file embedded in the binary, served with its fixed type and the CSP, never request data
	}
}

func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	methodNotAllowed(w, strings.Join(methods, ", "))
	return false
}

func methodNotAllowed(w http.ResponseWriter, allowed string) {
	w.Header().Set("Allow", allowed)
	writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: "method_not_allowed"})
}

type errorBody struct {
	Error       string `json:"error"`
	OIDCEnabled *bool  `json:"oidc_enabled,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"internal"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// unavailable answers a ledger failure: the caller may retry.
func (c *Console) unavailable(w http.ResponseWriter, err error) {
	c.o.Log.Warn("console: ledger unavailable", "err", err)
	writeJSON(w, http.StatusServiceUnavailable, errorBody{Error: "unavailable"})
}

// authFailure reports whether err refuses the caller (as opposed to a
// ledger failure, which says nothing about the credential).
func authFailure(err error) bool {
	return errors.Is(err, ownerauth.ErrUnauthenticated) || errors.Is(err, ownerauth.ErrAgentCredential) ||
		errors.Is(err, ownerauth.ErrNotAllowed)
}
