package console_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/countersign/countersign/internal/console"
	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/quota"
)

const clientID = "countersign-console"

// provider is an in-process OIDC issuer: discovery, an authorization
// endpoint that issues a code to whoever asks (the test plays the user),
// a token endpoint that checks the PKCE verifier against the challenge and
// issues each code once, and a JWKS with the key its ID tokens are signed
// with.
type provider struct {
	t   *testing.T
	srv *httptest.Server
	key *ecdsa.PrivateKey

	mu    sync.Mutex
	codes map[string]*grant
	// subject and nonceOverride shape the next ID tokens.
	subject       string
	nonceOverride string
	audience      string
	// exchanges counts the calls to the token endpoint.
	exchanges atomic.Int64
}

type grant struct {
	challenge, nonce, redirect string
	used                       bool
}

func newProvider(t *testing.T) *provider {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p := &provider{t: t, key: key, codes: map[string]*grant{}, subject: "alice", audience: clientID}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"issuer": p.srv.URL, "authorization_endpoint": p.srv.URL + "/authorize",
			"token_endpoint": p.srv.URL + "/token", "jwks_uri": p.srv.URL + "/jwks"})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &p.key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	})
	mux.HandleFunc("GET /authorize", p.authorize)
	mux.HandleFunc("POST /token", p.token)
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *provider) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("response_type") != "code" || q.Get("client_id") != clientID || q.Get("code_challenge_method") != "S256" ||
		q.Get("code_challenge") == "" || q.Get("nonce") == "" || q.Get("state") == "" || !strings.Contains(" "+q.Get("scope")+" ", " openid ") {
		http.Error(w, "bad authorization request: "+r.URL.RawQuery, http.StatusBadRequest)
		return
	}
	code := base64.RawURLEncoding.EncodeToString([]byte(q.Get("state")))[:20]
	p.mu.Lock()
	p.codes[code] = &grant{challenge: q.Get("code_challenge"), nonce: q.Get("nonce"), redirect: q.Get("redirect_uri")}
	p.mu.Unlock()
	http.Redirect(w, r, q.Get("redirect_uri")+"?"+url.Values{"code": {code}, "state": {q.Get("state")}}.Encode(), http.StatusFound)
}

func (p *provider) token(w http.ResponseWriter, r *http.Request) {
	p.exchanges.Add(1)
	_ = r.ParseForm()
	fail := func(msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": "invalid_grant", "error_description": msg})
	}
	p.mu.Lock()
	g := p.codes[r.Form.Get("code")]
	if g == nil || g.used {
		p.mu.Unlock()
		fail("unknown or used code")
		return
	}
	g.used = true
	subject, nonce, aud := p.subject, g.nonce, p.audience
	if p.nonceOverride != "" {
		nonce = p.nonceOverride
	}
	p.mu.Unlock()
	sum := sha256.Sum256([]byte(r.Form.Get("code_verifier")))
	switch {
	case r.Form.Get("grant_type") != "authorization_code" || r.Form.Get("client_id") != clientID:
		fail("bad client or grant type")
		return
	case r.Form.Get("redirect_uri") != g.redirect:
		fail("redirect_uri differs")
		return
	case base64.RawURLEncoding.EncodeToString(sum[:]) != g.challenge:
		fail("PKCE verifier does not match the challenge")
		return
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: p.key}, (&jose.SignerOptions{}).WithHeader("kid", "k1").WithType("JWT"))
	if err != nil {
		p.t.Error(err)
		return
	}
	now := time.Now()
	idToken, err := jwt.Signed(signer).Claims(map[string]any{"iss": p.srv.URL, "aud": aud, "sub": subject, "nonce": nonce,
		"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()}).Serialize()
	if err != nil {
		p.t.Error(err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": "at", "token_type": "Bearer", "expires_in": 300, "id_token": idToken})
}

// oidcRig is a rig whose console signs in through p.
func oidcRig(t *testing.T, p *provider) *rig {
	cfg := &ownerauth.Config{Issuer: p.srv.URL, Audience: "countersign-owner-api", JWKSURL: p.srv.URL + "/jwks",
		AllowedSubjects: []string{"alice"}}
	return newRig(t, rigOptions{oidc: cfg, console: func(o *console.Options) {
		o.URL = "http://127.0.0.1:8443"
		o.OIDC = &console.OIDC{ClientID: clientID}
	}})
}

// flow is one browser's sign-in up to the callback: the sealed cookie,
// the callback query the issuer redirected to, and the binding the page
// started it with.
type flow struct {
	cookie  string
	query   url.Values
	binding string
}

// newBinding is a binding as the page makes one: the hex SHA-256 of a
// random value it keeps.
func newBinding(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func (r *rig) startOIDC(t *testing.T, p *provider) flow {
	t.Helper()
	return r.startOIDCBound(t, p, newBinding(t))
}

func (r *rig) startOIDCBound(t *testing.T, p *provider, binding string) flow {
	t.Helper()
	x := r.do("GET", "/console/oidc/start?"+console.SignInBinding+"="+binding, "")
	if x.status != 302 {
		t.Fatalf("oidc start = %d %s", x.status, x.body)
	}
	checkSecurityHeaders(t, "oidc start", x.header)
	set := x.header.Get("Set-Cookie")
	name, rest, _ := strings.Cut(set, "=")
	value, attrs, _ := strings.Cut(rest, ";")
	if name != console.OIDCCookie || strings.TrimSpace(attrs) != "Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age=600" || value == "" {
		t.Fatalf("oidc cookie = %q", set)
	}
	loc, err := url.Parse(x.header.Get("Location"))
	if err != nil || !strings.HasPrefix(loc.String(), p.srv.URL+"/authorize?") {
		t.Fatalf("oidc start Location = %q", x.header.Get("Location"))
	}
	q := loc.Query()
	if q.Get("redirect_uri") != "http://127.0.0.1:8443/console/oidc/callback" || q.Get("scope") != "openid" || q.Get("client_id") != clientID {
		t.Fatalf("authorization request %v", q)
	}
	// The user signs in at the issuer, which redirects back.
	res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Get(loc.String())
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	back, err := url.Parse(res.Header.Get("Location"))
	if res.StatusCode != 302 || err != nil {
		t.Fatalf("issuer's authorization = %d %q", res.StatusCode, res.Header.Get("Location"))
	}
	return flow{cookie: console.OIDCCookie + "=" + value, query: back.Query(), binding: binding}
}

func (r *rig) callback(f flow) resp {
	return r.do("GET", "/console/oidc/callback?"+f.query.Encode(), "", "Cookie", f.cookie)
}

// TestOIDCSignIn runs the authorization code flow against the in-process
// issuer, and each way it must fail.
func TestOIDCSignIn(t *testing.T) {
	t.Run("success", func(t *testing.T) {
		p := newProvider(t)
		r := oidcRig(t, p)
		f := r.startOIDC(t, p)
		x := r.callback(f)
		// The key half goes to the page in the fragment (sent to no server,
		// in no Referer), and nowhere else in the answer; beside it, the
		// binding of the tab that started the sign-in.
		rest, ok := strings.CutPrefix(x.header.Get("Location"), "/console/#"+console.SessionKeyFragment)
		key, binding, _ := strings.Cut(rest, "&"+console.SignInBinding+"=")
		if x.status != 303 || !ok || !ownerauth.ValidSessionKey(key) || binding != f.binding || strings.Contains(x.body, key) {
			t.Fatalf("callback = %d %s (Location %q)", x.status, x.body, x.header.Get("Location"))
		}
		checkSecurityHeaders(t, "callback", x.header)
		var secret string
		clearedOIDC := false
		for _, c := range x.header.Values("Set-Cookie") {
			if m := sessionCookieRE.FindStringSubmatch(c); m != nil && m[2] == "28800" {
				secret = m[1]
			}
			clearedOIDC = clearedOIDC || c == console.OIDCCookie+"=; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age=0"
		}
		if secret == "" || !clearedOIDC {
			t.Fatalf("callback cookies = %q", x.header.Values("Set-Cookie"))
		}
		if strings.Contains(strings.Join(x.header.Values("Set-Cookie"), "\n"), key) {
			t.Fatalf("the key half is in a cookie: %q", x.header.Values("Set-Cookie"))
		}
		if got := r.do("GET", "/console/api/session", "", "Cookie", cookie(secret)); got.status != 401 {
			t.Fatalf("session with the cookie half alone = %d %s", got.status, got.body)
		}
		got := r.do("GET", "/console/api/session", "", sess{cookie: secret, key: key}.headers()...)
		m := got.json(t)
		if got.status != 200 || m["method"] != "oidc" || m["subject"] != "alice" || !strings.HasPrefix(m["owner_id"].(string), "oidc:") || m["oidc_enabled"] != true {
			t.Fatalf("session = %d %s", got.status, got.body)
		}
		if x := r.do("GET", "/console/api/session", ""); strings.TrimSpace(x.body) != `{"error":"signed_out","oidc_enabled":true}` {
			t.Errorf("signed out = %s", x.body)
		}
	})
	for _, tc := range []struct {
		name   string
		setup  func(p *provider)
		tamper func(t *testing.T, r *rig, p *provider, f flow) flow
		status int
		reason string
	}{
		{name: "wrong state", status: 400, reason: "state does not match", tamper: func(_ *testing.T, _ *rig, _ *provider, f flow) flow {
			f.query.Set("state", "forged")
			return f
		}},
		{name: "no cookie", status: 400, reason: "no OIDC sign-in is in progress", tamper: func(_ *testing.T, _ *rig, _ *provider, f flow) flow {
			f.cookie = "other=1"
			return f
		}},
		{name: "tampered cookie", status: 400, reason: "no OIDC sign-in is in progress", tamper: func(_ *testing.T, _ *rig, _ *provider, f flow) flow {
			f.cookie = f.cookie[:len(f.cookie)-2] + "AA"
			return f
		}},
		{name: "replayed sign-in", status: 400, reason: "already been used", tamper: func(t *testing.T, r *rig, _ *provider, f flow) flow {
			if x := r.callback(f); x.status != 303 {
				t.Fatalf("first callback = %d %s", x.status, x.body)
			}
			return f
		}},
		{name: "redeemed code in a new sign-in", status: 401, reason: "refused the authorization code", tamper: func(t *testing.T, r *rig, p *provider, f flow) flow {
			if x := r.callback(f); x.status != 303 {
				t.Fatalf("first callback = %d %s", x.status, x.body)
			}
			other := r.startOIDC(t, p)
			other.query.Set("code", f.query.Get("code"))
			return other
		}},
		{name: "PKCE mismatch", status: 401, reason: "refused the authorization code", tamper: func(t *testing.T, r *rig, p *provider, f flow) flow {
			// This browser's state and verifier, with the code another
			// sign-in's challenge was registered for.
			other := r.startOIDC(t, p)
			f.query.Set("code", other.query.Get("code"))
			return f
		}},
		{name: "bad nonce", status: 401, reason: "nonce", setup: func(p *provider) { p.nonceOverride = "replayed-nonce" }},
		{name: "subject not on the allowlist", status: 403, reason: `"mallory" is not an owner`, setup: func(p *provider) { p.subject = "mallory" }},
		{name: "ID token for another client", status: 401, reason: "audience", setup: func(p *provider) { p.audience = "another-client" }},
		{name: "issuer error", status: 401, reason: "refused the sign-in: access_denied", tamper: func(_ *testing.T, _ *rig, _ *provider, f flow) flow {
			f.query.Del("code")
			f.query.Set("error", "access_denied")
			return f
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProvider(t)
			r := oidcRig(t, p)
			if tc.setup != nil {
				tc.setup(p)
			}
			f := r.startOIDC(t, p)
			if tc.tamper != nil {
				f = tc.tamper(t, r, p, f)
			}
			x := r.callback(f)
			if x.status != tc.status || !strings.Contains(x.json(t)["error"].(string), tc.reason) {
				t.Fatalf("callback = %d %s, want %d with %q", x.status, x.body, tc.status, tc.reason)
			}
			for _, c := range x.header.Values("Set-Cookie") {
				if strings.HasPrefix(c, console.SessionCookie+"=css_") {
					t.Fatalf("a failed callback opened a session: %q", c)
				}
			}
		})
	}
}

// TestOIDCNeedsItsSettings: console.New refuses an OIDC sign-in it could
// not run.
func TestOIDCNeedsItsSettings(t *testing.T) {
	if _, err := console.Origin("http://console.example.com"); err == nil {
		t.Error("plain http console-url to a non-loopback host accepted")
	}
	for _, ok := range []string{"https://console.example.com", "http://localhost:8080", "http://127.0.0.1:8080/"} {
		if _, err := console.Origin(ok); err != nil {
			t.Errorf("console-url %q: %v", ok, err)
		}
	}
	for _, bad := range []string{"https://console.example.com/console", "https://u@console.example.com", "console.example.com", "ftp://x"} {
		if _, err := console.Origin(bad); err == nil {
			t.Errorf("console-url %q accepted", bad)
		}
	}
}

// TestOIDCCallbackSurvivesABlockedSource: the agent shares the owner's
// source address and can fail sign-ins on purpose until it is blocked; the
// owner's own callback (this browser's sealed sign-in, its state) still
// completes.
func TestOIDCCallbackSurvivesABlockedSource(t *testing.T) {
	p := newProvider(t)
	cfg := &ownerauth.Config{Issuer: p.srv.URL, Audience: "countersign-owner-api", JWKSURL: p.srv.URL + "/jwks",
		AllowedSubjects: []string{"alice"}}
	f := quota.NewFailures(quota.Options{Rate: 0.001, Burst: 3}, quota.Options{Rate: 0.001, Burst: 3})
	r := newRig(t, rigOptions{oidc: cfg, failures: f, console: func(o *console.Options) {
		o.URL = "http://127.0.0.1:8443"
		o.OIDC = &console.OIDC{ClientID: clientID}
	}})
	fl := r.startOIDC(t, p)
	for range 5 {
		r.do("POST", "/console/api/session", "x", "Content-Type", "application/json")
	}
	if x := r.do("POST", "/console/api/session", `{"token":"cso_`+strings.Repeat("b", 52)+`"}`, "Content-Type", "application/json"); x.status != 429 {
		t.Fatalf("the source is not blocked: %d %s", x.status, x.body)
	}
	if x := r.callback(fl); x.status != 303 {
		t.Fatalf("the owner's callback on a blocked source = %d %s, want 303", x.status, x.body)
	}
}

// blockedOIDCRig is an OIDC rig whose source (shared, as the agent's and
// the owner's are behind a port-forward) has been blocked by failed
// sign-ins; exchanges bounds its code exchanges (nil: the default).
func blockedOIDCRig(t *testing.T, p *provider, exchanges *quota.Limiter) *rig {
	t.Helper()
	cfg := &ownerauth.Config{Issuer: p.srv.URL, Audience: "countersign-owner-api", JWKSURL: p.srv.URL + "/jwks",
		AllowedSubjects: []string{"alice"}}
	f := quota.NewFailures(quota.Options{Rate: 0.001, Burst: 3}, quota.Options{Rate: 0.001, Burst: 3})
	r := newRig(t, rigOptions{oidc: cfg, failures: f, console: func(o *console.Options) {
		o.URL = "http://127.0.0.1:8443"
		o.OIDC = &console.OIDC{ClientID: clientID}
		o.OIDCExchanges = exchanges
	}})
	for range 3 {
		r.do("POST", "/console/api/session", "x", "Content-Type", "application/json")
	}
	if x := r.do("POST", "/console/api/session", `{"token":"cso_`+strings.Repeat("b", 52)+`"}`, "Content-Type", "application/json"); x.status != 429 {
		t.Fatalf("the source is not blocked: %d %s", x.status, x.body)
	}
	return r
}

// TestOIDCSignInIsSingleUse: the sealed cookie and state of one sign-in,
// replayed (the browser clears the cookie; a copy of it is still valid for
// ten minutes), reach the issuer's token endpoint once: every replay is
// refused before it, and counted against the source like any callback
// that is not this browser's own sign-in.
func TestOIDCSignInIsSingleUse(t *testing.T) {
	p := newProvider(t)
	r := oidcRig(t, p)
	f := r.startOIDC(t, p)
	if x := r.callback(f); x.status != 303 {
		t.Fatalf("first callback = %d %s", x.status, x.body)
	}
	for i := range 20 {
		f.query.Set("code", fmt.Sprintf("guess%d", i))
		x := r.callback(f)
		if x.status != 400 || !strings.Contains(x.json(t)["error"].(string), "already been used") {
			t.Fatalf("replay %d = %d %s, want 400 already used", i, x.status, x.body)
		}
	}
	if n := p.exchanges.Load(); n != 1 {
		t.Fatalf("one sign-in, replayed, made %d token exchanges; want 1", n)
	}
}

// TestOIDCCallbackHonoursTheSourceBlock: a callback that does not carry
// this browser's own sign-in (no cookie, another state, a used sign-in)
// is refused 429 from a blocked source, as every other sign-in attempt
// is; this browser's own still completes (TestOIDCCallbackSurvivesABlockedSource).
func TestOIDCCallbackHonoursTheSourceBlock(t *testing.T) {
	p := newProvider(t)
	r := blockedOIDCRig(t, p, nil)
	used := r.startOIDC(t, p)
	if x := r.callback(used); x.status != 303 {
		t.Fatalf("the owner's own callback on a blocked source = %d %s", x.status, x.body)
	}
	wrongState := r.startOIDC(t, p)
	wrongState.query.Set("state", "forged")
	for _, tc := range []struct {
		name string
		f    flow
	}{
		{"no cookie", flow{cookie: "other=1", query: url.Values{"state": {"x"}, "code": {"y"}}}},
		{"another state", wrongState},
		{"a used sign-in", used},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := r.callback(tc.f)
			if x.status != 429 || x.header.Get("Retry-After") == "" {
				t.Fatalf("= %d %s (Retry-After %q), want 429", x.status, x.body, x.header.Get("Retry-After"))
			}
		})
	}
	if n := p.exchanges.Load(); n != 1 {
		t.Fatalf("token exchanges = %d, want 1 (the owner's)", n)
	}
}

// TestOIDCExchangesAreBoundedPerSource: starting a sign-in takes no
// credential, so fresh sign-ins with made-up codes are what an agent can
// send without end; the code exchanges they cause are bounded per source,
// with Retry-After, and another source is not held to that bound.
func TestOIDCExchangesAreBoundedPerSource(t *testing.T) {
	p := newProvider(t)
	cfg := &ownerauth.Config{Issuer: p.srv.URL, Audience: "countersign-owner-api", JWKSURL: p.srv.URL + "/jwks",
		AllowedSubjects: []string{"alice"}}
	r := newRig(t, rigOptions{oidc: cfg, console: func(o *console.Options) {
		o.URL = "http://127.0.0.1:8443"
		o.OIDC = &console.OIDC{ClientID: clientID}
		o.Peers = quota.Peers{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
		o.OIDCExchanges = quota.NewLimiter(quota.Options{Rate: 1.0 / 60, Burst: 3, Now: o.Now})
	}})
	for i := range 3 {
		f := r.startOIDC(t, p)
		f.query.Set("code", fmt.Sprintf("made-up-%d", i))
		if x := r.callback(f); x.status != 401 {
			t.Fatalf("made-up code %d = %d %s, want the issuer's refusal", i, x.status, x.body)
		}
	}
	f := r.startOIDC(t, p)
	x := r.callback(f)
	if x.status != 429 || x.header.Get("Retry-After") != "60" || !strings.Contains(x.body, "too many OIDC sign-ins") {
		t.Fatalf("exchange past the bound = %d %s (Retry-After %q), want 429 after 60s", x.status, x.body, x.header.Get("Retry-After"))
	}
	if n := p.exchanges.Load(); n != 3 {
		t.Fatalf("token exchanges = %d, want 3", n)
	}
	other := r.startOIDC(t, p)
	if x := r.do("GET", "/console/oidc/callback?"+other.query.Encode(), "", "Cookie", other.cookie, "X-Forwarded-For", "203.0.113.9"); x.status != 303 {
		t.Fatalf("another source, through the trusted proxy = %d %s", x.status, x.body)
	}
	r.clock.Advance(time.Minute)
	if x := r.callback(r.startOIDC(t, p)); x.status != 303 {
		t.Fatalf("after the wait = %d %s", x.status, x.body)
	}
}

// TestOIDCSignInIsBoundToItsTab: the page takes a key from the callback's
// fragment only beside its own tab's binding (api.js), so the server
// starts no sign-in without a well-formed binding, and hands back, beside
// the key, the binding sealed in the sign-in's cookie: never one from the
// callback's URL, which whoever sends the browser there chooses.
func TestOIDCSignInIsBoundToItsTab(t *testing.T) {
	p := newProvider(t)
	r := oidcRig(t, p)
	for _, tc := range []struct{ name, query string }{
		{"no binding", ""},
		{"empty", "binding="},
		{"upper-case hex", "binding=" + strings.ToUpper(newBinding(t))},
		{"too short", "binding=" + newBinding(t)[:63]},
		{"too long", "binding=" + newBinding(t) + "0"},
		{"base64url", "binding=" + base64.RawURLEncoding.EncodeToString(make([]byte, 48))},
		{"twice", "binding=" + newBinding(t) + "&binding=" + newBinding(t)},
		{"another name", "Binding=" + newBinding(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := r.do("GET", "/console/oidc/start?"+tc.query, "")
			if x.status != 400 || x.header.Get("Location") != "" || len(x.header.Values("Set-Cookie")) != 0 ||
				!strings.Contains(x.json(t)["error"].(string), "starts from the console") {
				t.Fatalf("start with %s = %d %s (Location %q, Set-Cookie %q), want 400 and no sign-in",
					tc.name, x.status, x.body, x.header.Get("Location"), x.header.Values("Set-Cookie"))
			}
		})
	}
	// Two tabs' sign-ins, each finished with the other's binding planted in
	// the callback's URL: each callback hands back its own cookie's.
	x1, x2 := newBinding(t), newBinding(t)
	f1, f2 := r.startOIDCBound(t, p, x1), r.startOIDCBound(t, p, x2)
	f1.query.Set(console.SignInBinding, x2)
	f2.query.Set(console.SignInBinding, x1)
	for _, tc := range []struct {
		name string
		f    flow
		want string
	}{{"first tab", f1, x1}, {"second tab", f2, x2}} {
		x := r.callback(tc.f)
		loc := x.header.Get("Location")
		m := regexp.MustCompile(`^/console/#session_key=([a-z2-7]{52})&binding=([0-9a-f]{64})$`).FindStringSubmatch(loc)
		if x.status != 303 || m == nil || m[2] != tc.want {
			t.Errorf("%s: callback = %d, Location %q, want 303 with binding %s", tc.name, x.status, loc, tc.want)
		}
	}
}
