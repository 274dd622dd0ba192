package console

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/quota"
)

// oidcStateTTL is how long a sign-in at the issuer may take.
const oidcStateTTL = 10 * time.Minute

// oidcKeyName is the console_keys row the sign-in cookie is sealed with.
// It is in the ledger so every replica can open a cookie another sealed
// (the redirect back may reach any of them); it protects only the
// sign-in's state, nonce and PKCE verifier, which are worth nothing
// without the browser that started the sign-in.
const oidcKeyName = "oidc_state"

// maxDiscoveryBytes bounds a discovery document and a token response.
const maxDiscoveryBytes = 64 << 10

type oidcFlow struct {
	c        *Console
	clientID string
	secret   string
	client   *http.Client

	used *usedStates // the sign-ins whose callback has come

	mu       sync.Mutex
	endpoint oauth2.Endpoint // zero until discovered (or given)
	aead     cipher.AEAD     // nil until read from the ledger
}

func newOIDCFlow(c *Console, o OIDC) (*oidcFlow, error) {
	switch {
	case !c.o.Auth.OIDCEnabled():
		return nil, errors.New("console: OIDC sign-in needs the owner OIDC configuration (owner-issuer, owner-audience, owner-jwks-url or owner-jwks-file, an allowlist)")
	case o.ClientID == "":
		return nil, errors.New("console: OIDC sign-in needs owner-client-id")
	case c.origin == "":
		return nil, errors.New("console: OIDC sign-in needs console-url (the base of its redirect_uri)")
	case (o.AuthURL == "") != (o.TokenURL == ""):
		return nil, errors.New("console: set both the authorization and the token endpoint, or neither (discovery)")
	}
	for _, u := range []string{o.AuthURL, o.TokenURL} {
		if u != "" {
			if err := checkEndpoint(u, c.o.Auth.InAgentPod()); err != nil {
				return nil, err
			}
		}
	}
	f := &oidcFlow{c: c, clientID: o.ClientID, secret: o.ClientSecret, client: o.HTTPClient, used: newUsedStates(maxUsedStates),
		endpoint: oauth2.Endpoint{AuthURL: o.AuthURL, TokenURL: o.TokenURL}}
	if f.client == nil {
		f.client = defaultClient()
	}
	return f, nil
}

// checkEndpoint refuses an issuer endpoint that is not https (plain http
// only to a loopback host, and not even there in the agent's pod, inPod,
// whose loopback the agent shares: it could answer the token endpoint).
func checkEndpoint(raw string, inPod bool) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("console: OIDC endpoint %q is not an absolute URL", raw)
	}
	if u.Scheme == "https" {
		return nil
	}
	if inPod {
		return fmt.Errorf("console: OIDC endpoint %q must be https in the agent's pod: the agent shares its loopback", raw)
	}
	if u.Scheme == "http" && ownerauth.LoopbackHost(u.Hostname()) {
		return nil
	}
	return fmt.Errorf("console: OIDC endpoint %q must be https (plain http only to a loopback host)", raw)
}

func defaultClient() *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("the OIDC issuer's endpoints are not followed through redirects")
		},
		Transport: &http.Transport{Proxy: http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			TLSHandshakeTimeout: 5 * time.Second, ForceAttemptHTTP2: true, MaxIdleConns: 2, IdleConnTimeout: time.Minute},
	}
}

// config is the OAuth 2 client, its endpoints discovered on first use.
func (f *oidcFlow) config(ctx context.Context) (*oauth2.Config, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.endpoint.AuthURL == "" {
		ep, err := f.discover(ctx)
		if err != nil {
			return nil, err
		}
		f.endpoint = ep
	}
	ep := f.endpoint
	ep.AuthStyle = oauth2.AuthStyleInParams
	if f.secret != "" {
		ep.AuthStyle = oauth2.AuthStyleInHeader
	}
	return &oauth2.Config{ClientID: f.clientID, ClientSecret: f.secret, Endpoint: ep,
		RedirectURL: f.c.origin + "/console/oidc/callback", Scopes: f.c.o.Auth.OIDCScopes()}, nil
}

// discover reads <issuer>/.well-known/openid-configuration; its issuer
// must be the configured one exactly (OIDC Discovery §4.3).
func (f *oidcFlow) discover(ctx context.Context) (oauth2.Endpoint, error) {
	issuer := f.c.o.Auth.OIDCIssuer()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(issuer, "/")+"/.well-known/openid-configuration", nil)
	if err != nil {
		return oauth2.Endpoint{}, fmt.Errorf("console: OIDC discovery: %w", err)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return oauth2.Endpoint{}, fmt.Errorf("console: OIDC discovery: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return oauth2.Endpoint{}, fmt.Errorf("console: OIDC discovery: %s answered %s", req.URL.Redacted(), resp.Status)
	}
	var doc struct {
		Issuer   string `json:"issuer"`
		AuthURL  string `json:"authorization_endpoint"`
		TokenURL string `json:"token_endpoint"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxDiscoveryBytes)).Decode(&doc); err != nil {
		return oauth2.Endpoint{}, fmt.Errorf("console: OIDC discovery: %w", err)
	}
	if doc.Issuer != issuer {
		return oauth2.Endpoint{}, fmt.Errorf("console: OIDC discovery names issuer %q, not the configured %q", doc.Issuer, issuer)
	}
	for _, u := range []string{doc.AuthURL, doc.TokenURL} {
		if err := checkEndpoint(u, f.c.o.Auth.InAgentPod()); err != nil {
			return oauth2.Endpoint{}, err
		}
	}
	return oauth2.Endpoint{AuthURL: doc.AuthURL, TokenURL: doc.TokenURL}, nil
}

// sealer is the AES-GCM of the sign-in cookie, its key read (or first
// created) in the ledger.
func (f *oidcFlow) sealer(ctx context.Context) (cipher.AEAD, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.aead != nil {
		return f.aead, nil
	}
	candidate := make([]byte, 32)
	if _, err := rand.Read(candidate); err != nil {
		return nil, err
	}
	key, err := f.c.o.Store.ConsoleKey(ctx, oidcKeyName, candidate)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	if f.aead, err = cipher.NewGCM(block); err != nil {
		return nil, err
	}
	return f.aead, nil
}

// pending is a sign-in in progress, sealed into the OIDC cookie.
type pending struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	// Binding is the SignInBinding the page that started the sign-in
	// sent; the callback hands it back beside the key.
	Binding string `json:"b"`
	Expires int64  `json:"e"` // unix seconds
}

func (f *oidcFlow) seal(ctx context.Context, p pending) (string, error) {
	aead, err := f.sealer(ctx)
	if err != nil {
		return "", err
	}
	plain, err := json.Marshal(p)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(aead.Seal(nonce, nonce, plain, []byte(OIDCCookie))), nil
}

var errNoSignIn = errors.New("no OIDC sign-in is in progress in this browser, or it took longer than 10 minutes: start again")

func (f *oidcFlow) open(ctx context.Context, sealed string) (pending, error) {
	aead, err := f.sealer(ctx)
	if err != nil {
		return pending{}, err
	}
	raw, err := base64.RawURLEncoding.DecodeString(sealed)
	if err != nil || len(raw) < aead.NonceSize() {
		return pending{}, errNoSignIn
	}
	plain, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], []byte(OIDCCookie))
	if err != nil {
		return pending{}, errNoSignIn
	}
	var p pending
	if json.Unmarshal(plain, &p) != nil || p.State == "" || p.Nonce == "" || p.Verifier == "" || !ValidBinding(p.Binding) {
		return pending{}, errNoSignIn
	}
	if !f.c.o.Now().Before(time.Unix(p.Expires, 0)) {
		return pending{}, errNoSignIn
	}
	return p, nil
}

func randomString() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// oidcStart sends the browser to the issuer with a fresh state, nonce and
// PKCE challenge, keeping them in the sealed OIDC cookie with the binding
// (SignInBinding) of the console tab that started the sign-in. A start
// without one is refused: its key could be handed to no page.
func (c *Console) oidcStart(w http.ResponseWriter, r *http.Request) {
	f := c.oidc
	if f == nil {
		writeJSON(w, http.StatusNotFound, errorBody{Error: "oidc_disabled"})
		return
	}
	binding := r.URL.Query()[SignInBinding]
	if len(binding) != 1 || !ValidBinding(binding[0]) {
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "an OIDC sign-in starts from the console's sign-in page (/console/), which binds it to its tab"})
		return
	}
	cfg, err := f.config(r.Context())
	if err != nil {
		c.o.Log.Warn("console: OIDC", "err", err)
		writeJSON(w, http.StatusBadGateway, errorBody{Error: "the OIDC issuer could not be reached"})
		return
	}
	state, err1 := randomString()
	nonce, err2 := randomString()
	if err := errors.Join(err1, err2); err != nil {
		writeJSON(w, http.StatusInternalServerError, errorBody{Error: "internal"})
		return
	}
	p := pending{State: state, Nonce: nonce, Verifier: oauth2.GenerateVerifier(), Binding: binding[0], Expires: c.o.Now().Add(oidcStateTTL).Unix()}
	sealed, err := f.seal(r.Context(), p)
	if err != nil {
		c.unavailable(w, err)
		return
	}
	w.Header().Add("Set-Cookie", OIDCCookie+"="+sealed+"; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age="+fmt.Sprint(int(oidcStateTTL/time.Second)))
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, cfg.AuthCodeURL(state, oauth2.S256ChallengeOption(p.Verifier), oauth2.SetAuthURLParam("nonce", nonce)), http.StatusFound)
}

// oidcCallback finishes a sign-in: state, code exchange with the PKCE
// verifier, ID token, session.
func (c *Console) oidcCallback(w http.ResponseWriter, r *http.Request) {
	f := c.oidc
	if f == nil {
		writeJSON(w, http.StatusNotFound, errorBody{Error: "oidc_disabled"})
		return
	}
	// The sign-in is single-use whatever happens next: cleared in the
	// browser here, and claimed in this process (usedStates) below.
	clearCookie(w, OIDCCookie, "Lax")
	src := c.o.Peers.HTTPSource(r)
	fail := func(status int, msg string) {
		c.o.Failures.Note(src, "")
		writeJSON(w, status, errorBody{Error: msg})
	}
	// The source's failure block applies only to callbacks that do not
	// carry this browser's own sign-in (sealed cookie, matching state, not
	// yet used): the agent shares the owner's source address and could
	// otherwise keep every OIDC sign-in blocked by failing on purpose.
	notOurs := func(status int, msg string) {
		if err := c.o.Failures.Check(src, ""); err != nil {
			tooMany(w, err, "too many failed sign-ins from this address; retry later")
			return
		}
		fail(status, msg)
	}
	var sealed []string
	for _, ck := range r.Cookies() {
		if ck.Name == OIDCCookie {
			sealed = append(sealed, ck.Value)
		}
	}
	if len(sealed) != 1 {
		notOurs(http.StatusBadRequest, errNoSignIn.Error())
		return
	}
	p, err := f.open(r.Context(), sealed[0])
	if errors.Is(err, errNoSignIn) {
		notOurs(http.StatusBadRequest, err.Error())
		return
	}
	if err != nil {
		c.unavailable(w, err)
		return
	}
	q := r.URL.Query()
	if subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(p.State)) != 1 || len(q["state"]) != 1 {
		notOurs(http.StatusBadRequest, "the sign-in's state does not match this browser's: start again")
		return
	}
	if !f.used.claim(p.State, time.Unix(p.Expires, 0), c.o.Now()) {
		notOurs(http.StatusBadRequest, "this sign-in has already been used: start again")
		return
	}
	if e := q.Get("error"); e != "" {
		fail(http.StatusUnauthorized, "the OIDC issuer refused the sign-in: "+truncate(e))
		return
	}
	code := q.Get("code")
	if code == "" || len(q["code"]) != 1 || len(code) > 4096 {
		fail(http.StatusBadRequest, "the callback carries no authorization code")
		return
	}
	// Every exchange calls the issuer with the client secret, and a
	// sign-in to start one takes no credential: bound them per source.
	if ok, wait := c.o.OIDCExchanges.Allow(src); !ok {
		c.o.Log.Info("console: OIDC code exchange refused: too many from this source", "source", src)
		tooMany(w, &quota.ExhaustedError{Scope: "OIDC sign-ins from this source", RetryAfter: wait},
			"too many OIDC sign-ins from this address; retry later")
		return
	}
	cfg, err := f.config(r.Context())
	if err != nil {
		writeJSON(w, http.StatusBadGateway, errorBody{Error: "the OIDC issuer could not be reached"})
		return
	}
	tok, err := cfg.Exchange(context.WithValue(r.Context(), oauth2.HTTPClient, f.client), code, oauth2.VerifierOption(p.Verifier))
	if err != nil {
		c.o.Log.Info("console: OIDC code exchange refused", "err", err)
		fail(http.StatusUnauthorized, "the OIDC issuer refused the authorization code")
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		fail(http.StatusUnauthorized, "the OIDC issuer returned no ID token")
		return
	}
	o, err := c.o.Auth.VerifyIDToken(r.Context(), raw, f.clientID, p.Nonce)
	switch {
	case errors.Is(err, ownerauth.ErrNotAllowed):
		fail(http.StatusForbidden, reason(err))
		return
	case authFailure(err):
		fail(http.StatusUnauthorized, reason(err))
		return
	case err != nil:
		c.unavailable(w, err)
		return
	}
	// The key half goes to the page in the redirect's fragment: the browser
	// sends a fragment to no server and in no Referer, and keeps it for the
	// page of the console's origin, which removes it from the address bar
	// and history (history.replaceState) and stores the key only if the
	// binding beside it is its own tab's.
	c.open(w, r, o, c.o.Now().Add(c.o.TTL), func(secret ownerauth.SessionSecret, _ ownerauth.Session) {
		// Set by hand: http.Redirect would repeat the URL in an HTML body.
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Location", "/console/#"+SessionKeyFragment+secret.Key+"&"+SignInBinding+"="+p.Binding)
		w.WriteHeader(http.StatusSeeOther)
	})
}
