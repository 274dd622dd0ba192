package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/console"
	"github.com/countersign/countersign/internal/credential"
	"github.com/countersign/countersign/internal/money"
	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/quota"
)

const wantCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"font-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func checkSecurityHeaders(t *testing.T, what string, h http.Header) {
	t.Helper()
	for k, want := range map[string]string{"Content-Security-Policy": wantCSP, "X-Content-Type-Options": "nosniff",
		"Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY"} {
		if got := h.Values(k); len(got) != 1 || got[0] != want {
			t.Errorf("%s: %s = %q, want %q", what, k, got, want)
		}
	}
}

// TestStaticFilesAndHeaders: every /console/ response, files and errors
// alike, carries the CSP and the other security headers, and each file its
// right type.
func TestStaticFilesAndHeaders(t *testing.T) {
	r := newRig(t, rigOptions{})
	se, _ := r.signIn(r.token)
	for _, tc := range []struct {
		name, method, path string
		headers            []string
		status             int
		contentType        string
		location           string
	}{
		{name: "index", method: "GET", path: "/console/", status: 200, contentType: "text/html; charset=utf-8"},
		{name: "index head", method: "HEAD", path: "/console/", status: 200, contentType: "text/html; charset=utf-8"},
		{name: "script", method: "GET", path: "/console/assets/console.js", status: 200, contentType: "text/javascript; charset=utf-8"},
		{name: "style", method: "GET", path: "/console/assets/console.css", status: 200, contentType: "text/css; charset=utf-8"},
		{name: "bare prefix redirects", method: "GET", path: "/console", status: 301, location: "/console/"},
		{name: "unknown asset", method: "GET", path: "/console/assets/missing.js", status: 404},
		{name: "asset directory", method: "GET", path: "/console/assets/", status: 404},
		{name: "index by name", method: "GET", path: "/console/index.html", status: 404},
		{name: "unknown page", method: "GET", path: "/console/settings", status: 404},
		{name: "unknown api", method: "GET", path: "/console/api/nope", status: 404, contentType: "application/json"},
		{name: "post to a file", method: "POST", path: "/console/assets/console.js", status: 405, contentType: "application/json"},
		{name: "session signed out", method: "GET", path: "/console/api/session", status: 401, contentType: "application/json"},
		{name: "session", method: "GET", path: "/console/api/session", headers: se.headers(), status: 200, contentType: "application/json"},
		{name: "session, cookie half alone", method: "GET", path: "/console/api/session", headers: []string{"Cookie", cookie(se.cookie)}, status: 401, contentType: "application/json"},
		{name: "sign-in refused", method: "POST", path: "/console/api/session", status: 415, contentType: "application/json"},
		{name: "signout without csrf", method: "POST", path: "/console/api/signout", headers: se.headers(), status: 403, contentType: "application/json"},
		{name: "oidc off", method: "GET", path: "/console/oidc/start", status: 404, contentType: "application/json"},
		{name: "currency table", method: "GET", path: "/console/assets/currencies.json", status: 200, contentType: "application/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := r.do(tc.method, tc.path, "", tc.headers...)
			if x.status != tc.status {
				t.Fatalf("%s %s = %d %s, want %d", tc.method, tc.path, x.status, x.body, tc.status)
			}
			checkSecurityHeaders(t, tc.path, x.header)
			if tc.contentType != "" && x.header.Get("Content-Type") != tc.contentType {
				t.Errorf("Content-Type = %q, want %q", x.header.Get("Content-Type"), tc.contentType)
			}
			if tc.location != "" && x.header.Get("Location") != tc.location {
				t.Errorf("Location = %q, want %q", x.header.Get("Location"), tc.location)
			}
		})
	}
	// The index is the embedded file, and names no other origin.
	x := r.do("GET", "/console/", "")
	if !strings.Contains(x.body, "/console/assets/console.js") || strings.Contains(x.body, "//") && strings.Contains(x.body, "http") {
		t.Errorf("index.html: %s", x.body)
	}
}

// The page's currency table is internal/money's, every entry of it.
func TestCurrencyTableIsTheMoneyPackages(t *testing.T) {
	r := newRig(t, rigOptions{})
	x := r.do("GET", "/console/assets/currencies.json", "")
	var got struct {
		ISO4217 map[string]int `json:"iso4217"`
		Stripe  map[string]int `json:"stripe"`
	}
	if err := json.Unmarshal([]byte(x.body), &got); err != nil {
		t.Fatalf("currencies.json: %v: %s", err, x.body)
	}
	iso, departures := money.Exponents()
	if !maps.Equal(got.ISO4217, iso) || !maps.Equal(got.Stripe, departures["stripe"]) || got.ISO4217["JPY"] != 0 || got.ISO4217["KWD"] != 3 || got.Stripe["ISK"] != 2 {
		t.Fatalf("currencies.json = %s, want internal/money's tables", x.body)
	}
}

// TestSignInWithOwnerToken: the cookie's attributes exactly, and the
// session JSON on POST and then GET.
func TestSignInWithOwnerToken(t *testing.T) {
	r := newRig(t, rigOptions{})
	x := r.do("POST", "/console/api/session", `{"token":"`+r.token+`"}`, "Content-Type", "application/json; charset=utf-8",
		"Origin", r.srv.URL, "Sec-Fetch-Site", "same-origin")
	if x.status != 200 {
		t.Fatalf("sign-in = %d %s", x.status, x.body)
	}
	cookies := x.header.Values("Set-Cookie")
	if len(cookies) != 1 {
		t.Fatalf("Set-Cookie = %q", cookies)
	}
	m := sessionCookieRE.FindStringSubmatch(cookies[0])
	if m == nil || m[2] != "28800" {
		t.Fatalf("Set-Cookie = %q, want __Host-countersign_session=css_…; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=28800", cookies[0])
	}
	posted := x.json(t)
	// The sign-in answer alone carries the key half: only the page that
	// signed in gets it.
	wantKeys := []string{"owner_id", "method", "subject", "expire_time", "csrf_token", "oidc_enabled"}
	if len(posted) != len(wantKeys)+1 {
		t.Errorf("session body has members %v, want exactly %v and session_key", posted, wantKeys)
	}
	key, _ := posted["session_key"].(string)
	if !ownerauth.ValidSessionKey(key) || strings.Contains(cookies[0], key) {
		t.Fatalf("session_key = %q (cookie %q), want a key half that is not in the cookie", posted["session_key"], cookies[0])
	}
	se := sess{cookie: m[1], key: key}
	exp, err := time.Parse(time.RFC3339, posted["expire_time"].(string))
	if err != nil || exp.Sub(r.clock.Now()) > 8*time.Hour || exp.Sub(r.clock.Now()) < 8*time.Hour-2*time.Second {
		t.Errorf("expire_time = %v (%v), want 8h from now", posted["expire_time"], err)
	}
	if posted["owner_id"] != r.ownerID || posted["method"] != "token" || !strings.HasPrefix(posted["subject"].(string), "otk_") ||
		posted["csrf_token"] != ownerauth.CSRFToken(se.whole()) || posted["oidc_enabled"] != false {
		t.Errorf("session body = %v", posted)
	}
	got := r.do("GET", "/console/api/session", "", se.headers()...)
	if got.status != 200 {
		t.Fatalf("GET session = %d %s", got.status, got.body)
	}
	for _, k := range wantKeys {
		if got.json(t)[k] != posted[k] {
			t.Errorf("GET session %s = %v, POST said %v", k, got.json(t)[k], posted[k])
		}
	}
	if _, ok := got.json(t)["session_key"]; ok || len(got.json(t)) != len(wantKeys) {
		t.Errorf("GET session = %s, want exactly %v (the key half only in the sign-in answer)", got.body, wantKeys)
	}
	// A signed-out browser learns only that, and whether OIDC is offered.
	if x := r.do("GET", "/console/api/session", ""); x.status != 401 || strings.TrimSpace(x.body) != `{"error":"signed_out","oidc_enabled":false}` {
		t.Errorf("signed out = %d %s", x.status, x.body)
	}
	if x := r.do("GET", "/console/api/session", "", "Cookie", cookie("css_"+strings.Repeat("a", 52)), console.SessionKeyHeader, strings.Repeat("a", 52)); x.status != 401 {
		t.Errorf("unknown session = %d %s", x.status, x.body)
	}
}

// TestSignInRefusals: what the agent might send instead of an owner token.
func TestSignInRefusals(t *testing.T) {
	r := newRig(t, rigOptions{})
	agent, err := r.store.CreateAgent(context.Background(), r.ownerID, "agent")
	if err != nil {
		t.Fatal(err)
	}
	csk, hash, err := credential.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.IssueCredential(context.Background(), agent.ID, credential.ScopeExecute, time.Now().Add(time.Hour), hash); err != nil {
		t.Fatal(err)
	}
	session, _ := r.signIn(r.token)
	json := []string{"Content-Type", "application/json"}
	for _, tc := range []struct {
		name    string
		body    string
		headers []string
		status  int
		reason  string
	}{
		{"agent credential", `{"token":"` + csk + `"}`, json, 401, "agent credential (csk_…) cannot sign in"},
		{"unknown owner token", `{"token":"cso_` + strings.Repeat("a", 52) + `"}`, json, 401, "unknown owner token"},
		{"malformed owner token", `{"token":"cso_short"}`, json, 401, "malformed owner token"},
		{"session as token", `{"token":"` + session.whole() + `"}`, json, 401, "a console session cannot open another"},
		{"cookie half as token", `{"token":"` + session.cookie + `"}`, json, 401, "a console session cannot open another"},
		{"junk", `{"token":"hunter2"}`, json, 401, "not an owner token"},
		{"unknown member", `{"token":"` + r.token + `","admin":true}`, json, 400, `unknown member "admin"`},
		{"member in another case", `{"Token":"` + r.token + `"}`, json, 400, `unknown member "Token"`},
		{"duplicate member", `{"token":"x","token":"` + r.token + `"}`, json, 400, "appears twice"},
		{"not a string", `{"token":1}`, json, 400, "must be a string"},
		{"trailing data", `{"token":"` + r.token + `"}{}`, json, 400, "data after the object"},
		{"empty", `{}`, json, 400, `needs "token"`},
		{"form post", "token=" + r.token, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "application/json"},
		{"too large", `{"token":"` + strings.Repeat("a", 5000) + `"}`, json, 413, "larger than 4 KiB"},
		{"cross-origin", `{"token":"` + r.token + `"}`, append([]string{"Origin", "https://evil.example"}, json...), 403, "csrf"},
		{"null origin", `{"token":"` + r.token + `"}`, append([]string{"Origin", "null"}, json...), 403, "csrf"},
		{"cross-site fetch", `{"token":"` + r.token + `"}`, append([]string{"Sec-Fetch-Site", "cross-site"}, json...), 403, "csrf"},
		{"same-site fetch", `{"token":"` + r.token + `"}`, append([]string{"Sec-Fetch-Site", "same-site"}, json...), 403, "csrf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := r.do("POST", "/console/api/session", tc.body, tc.headers...)
			if x.status != tc.status || !strings.Contains(x.json(t)["error"].(string), tc.reason) {
				t.Fatalf("= %d %s, want %d with %q", x.status, x.body, tc.status, tc.reason)
			}
			if c := x.header.Get("Set-Cookie"); c != "" {
				t.Errorf("a refused sign-in set a cookie: %q", c)
			}
		})
	}
}

// TestSignInAttemptsAreBounded: a caller grinding tokens is held to the
// failure budget of its peer address, which it cannot choose (a forged
// X-Forwarded-For changes nothing), and then even a right token it has
// never used before waits.
func TestSignInAttemptsAreBounded(t *testing.T) {
	failures := quota.NewFailures(quota.Options{Rate: 0.001, Burst: 3}, quota.Options{Rate: 0.001, Burst: 3})
	r := newRig(t, rigOptions{failures: failures})
	for i := range 3 {
		x := r.do("POST", "/console/api/session", `{"token":"cso_`+strings.Repeat(string(rune('a'+i)), 52)+`"}`,
			"Content-Type", "application/json", "X-Forwarded-For", "203.0.113."+string(rune('1'+i)))
		if x.status != 401 {
			t.Fatalf("guess %d = %d %s", i, x.status, x.body)
		}
	}
	x := r.do("POST", "/console/api/session", `{"token":"`+r.token+`"}`, "Content-Type", "application/json", "X-Forwarded-For", "198.51.100.7")
	if x.status != 429 || x.header.Get("Retry-After") == "" {
		t.Fatalf("after the budget = %d %s (Retry-After %q), want 429", x.status, x.body, x.header.Get("Retry-After"))
	}
}

// TestSignOutRevokes: sign-out needs the CSRF token; then the session is
// revoked in the ledger and its cookie gets 401 on the console and the API.
func TestSignOutRevokes(t *testing.T) {
	r := newRig(t, rigOptions{})
	se, body := r.signIn(r.token)
	csrf := body["csrf_token"].(string)
	if x := r.do("POST", "/console/api/signout", "", se.headers(console.CSRFHeader, "wrong")...); x.status != 403 || !strings.Contains(x.body, `"csrf"`) {
		t.Fatalf("sign-out with a wrong CSRF token = %d %s", x.status, x.body)
	}
	if x := r.do("POST", "/console/api/signout", "", se.headers(console.CSRFHeader, csrf, "Origin", "https://evil.example")...); x.status != 403 {
		t.Fatalf("cross-origin sign-out = %d %s", x.status, x.body)
	}
	// The cookie half with the CSRF token (which only both halves are
	// answered) but not the key half signs nothing out.
	if x := r.do("POST", "/console/api/signout", "", "Cookie", cookie(se.cookie), console.CSRFHeader, csrf); x.status != 401 {
		t.Fatalf("sign-out with the cookie half alone = %d %s", x.status, x.body)
	}
	if x := r.do("GET", "/console/api/session", "", se.headers()...); x.status != 200 {
		t.Fatalf("refused sign-outs ended the session: %d %s", x.status, x.body)
	}
	x := r.do("POST", "/console/api/signout", "", se.headers(console.CSRFHeader, csrf)...)
	if x.status != 204 || x.header.Get("Set-Cookie") != "__Host-countersign_session=; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=0" {
		t.Fatalf("sign-out = %d %q", x.status, x.header.Get("Set-Cookie"))
	}
	if x := r.do("GET", "/console/api/session", "", se.headers()...); x.status != 401 {
		t.Errorf("session after sign-out = %d %s", x.status, x.body)
	}
	if _, err := r.auth.Authenticate(context.Background(), "Bearer "+se.whole()); err == nil {
		t.Error("the API still admits a signed-out session")
	}
}

// TestSessionExpires: a session past its expiry is refused, and so is one
// whose owner token has been revoked since.
func TestSessionExpires(t *testing.T) {
	r := newRig(t, rigOptions{})
	se, _ := r.signIn(r.token)
	r.clock.Advance(8*time.Hour - time.Second)
	if x := r.do("GET", "/console/api/session", "", se.headers()...); x.status != 200 {
		t.Fatalf("session just before expiry = %d %s", x.status, x.body)
	}
	r.clock.Advance(time.Second)
	if x := r.do("GET", "/console/api/session", "", se.headers()...); x.status != 401 {
		t.Fatalf("expired session = %d %s", x.status, x.body)
	}
	if _, err := r.auth.Authenticate(context.Background(), "Bearer "+se.whole()); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("the API on an expired session: %v", err)
	}

	r2 := newRig(t, rigOptions{})
	secret2, body := r2.signIn(r2.token)
	if err := r2.store.RevokeOwnerToken(context.Background(), body["subject"].(string)); err != nil {
		t.Fatal(err)
	}
	if x := r2.do("GET", "/console/api/session", "", secret2.headers()...); x.status != 401 {
		t.Errorf("session of a revoked owner token = %d %s", x.status, x.body)
	}
}

// TestSessionNeverOutlivesItsToken: a token that expires before the
// session lifetime caps the session.
func TestSessionNeverOutlivesItsToken(t *testing.T) {
	r := newRig(t, rigOptions{})
	_, token, _, err := ownerauth.Bootstrap(context.Background(), r.store, "brief", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	x := r.do("POST", "/console/api/session", `{"token":"`+token+`"}`, "Content-Type", "application/json")
	m := sessionCookieRE.FindStringSubmatch(x.header.Get("Set-Cookie"))
	if x.status != 200 || m == nil || m[2] == "28800" {
		t.Fatalf("sign-in with a 1h token = %d %q", x.status, x.header.Get("Set-Cookie"))
	}
	exp, _ := time.Parse(time.RFC3339, x.json(t)["expire_time"].(string))
	if exp.After(time.Now().Add(time.Hour + time.Second)) {
		t.Errorf("session expires %v, after its token", exp)
	}
}

// TestOneOwnerCannotEvictAnothersExemption: alice's token and session are
// exempt from the block her agent keeps on their shared source (127.0.0.1
// behind a port-forward). Bob, another owner, signing in again and again
// (each sign-in a new session, each remembered as authenticated) churns
// only his own remembered credentials: alice stays exempt.
func TestOneOwnerCannotEvictAnothersExemption(t *testing.T) {
	// A remembered set a few owners wide, so that a few dozen sign-ins
	// would have filled it (the server's holds 10,000).
	const maxKeys = 2 * quota.DefaultKnownPerOwner
	failures := quota.NewFailures(quota.Options{Rate: 0.001, Burst: 3}, quota.Options{Rate: 0.001, Burst: 3, MaxKeys: maxKeys})
	r := newRig(t, rigOptions{failures: failures, console: func(o *console.Options) {
		o.OwnerSignIns = quota.NewLimiter(quota.Options{}) // unbounded here: this is about what the set remembers
	}})
	_, bobToken, _, err := ownerauth.Bootstrap(context.Background(), r.store, "bob", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r.signIn(r.token)
	for range 2 * maxKeys {
		r.signIn(bobToken)
	}
	// Alice's agent fails until the source is blocked.
	for range 3 {
		r.do("POST", "/console/api/session", "x", "Content-Type", "application/json")
	}
	if x := r.do("POST", "/console/api/session", `{"token":"cso_`+strings.Repeat("b", 52)+`"}`, "Content-Type", "application/json"); x.status != 429 {
		t.Fatalf("the source is not blocked: %d %s", x.status, x.body)
	}
	if x := r.do("POST", "/console/api/session", fmt.Sprintf(`{"token":%q}`, r.token), "Content-Type", "application/json"); x.status != 200 {
		t.Fatalf("alice, after bob's %d sign-ins, on the source her agent blocks = %d %s", 2*maxKeys, x.status, x.body)
	}
}

// TestOwnerSignInsAreBounded: one owner opens at most OwnerSignIns
// sessions (429 with Retry-After past it), without holding back another.
func TestOwnerSignInsAreBounded(t *testing.T) {
	r := newRig(t, rigOptions{console: func(o *console.Options) {
		o.OwnerSignIns = quota.NewLimiter(quota.Options{Rate: 1.0 / 60, Burst: 3, Now: o.Now})
	}})
	_, bobToken, _, err := ownerauth.Bootstrap(context.Background(), r.store, "bob", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		r.signIn(r.token)
	}
	x := r.do("POST", "/console/api/session", fmt.Sprintf(`{"token":%q}`, r.token), "Content-Type", "application/json")
	if x.status != 429 || x.header.Get("Retry-After") != "60" || !strings.Contains(x.body, "too many sign-ins by this owner") {
		t.Fatalf("a fourth sign-in = %d %s (Retry-After %q), want 429 after 60s", x.status, x.body, x.header.Get("Retry-After"))
	}
	if c := x.header.Get("Set-Cookie"); c != "" {
		t.Fatalf("a refused sign-in set a cookie: %q", c)
	}
	r.signIn(bobToken)
	r.clock.Advance(time.Minute)
	r.signIn(r.token)
}

// TestOwnerSessionsAreBounded: an owner holds at most MaxSessions live
// sessions; each new one signs the oldest out, on the console and the API.
func TestOwnerSessionsAreBounded(t *testing.T) {
	r := newRig(t, rigOptions{console: func(o *console.Options) {
		o.MaxSessions = 3
		o.OwnerSignIns = quota.NewLimiter(quota.Options{})
	}})
	var secrets []sess
	for range 5 {
		s, _ := r.signIn(r.token)
		secrets = append(secrets, s)
	}
	for i, s := range secrets {
		want := 200
		if i < 2 {
			want = 401
		}
		if x := r.do("GET", "/console/api/session", "", s.headers()...); x.status != want {
			t.Errorf("session %d = %d %s, want %d", i, x.status, x.body, want)
		}
	}
	if _, err := r.auth.Authenticate(context.Background(), "Bearer "+secrets[0].whole()); err == nil || !strings.Contains(err.Error(), "signed out") {
		t.Errorf("the API on a session signed out by newer ones: %v", err)
	}
}
