package server

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/console"
	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/testing/wait"
)

var consoleCookieRE = regexp.MustCompile(`^__Host-countersign_session=(css_[a-z2-7]{52}); Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=\d+$`)

// consoleCall is one request to the server's HTTP listener; headers are
// name, value pairs.
func (h *allowHarness) consoleCall(t *testing.T, method, path, body string, headers ...string) (int, http.Header, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+h.httpAddr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, string(b)
}

// consoleSession is a console session as the browser holds it: the cookie
// half (the HttpOnly cookie), the key half (the page's localStorage) and
// the CSRF token the page was answered.
type consoleSession struct{ cookie, key, csrf string }

// headers are the Cookie and the key header the console page sends, then
// more.
func (c consoleSession) headers(more ...string) []string {
	return append([]string{"Cookie", console.SessionCookie + "=" + c.cookie, console.SessionKeyHeader, c.key}, more...)
}

// whole is the session secret the owner API takes.
func (c consoleSession) whole() string { return c.cookie + "." + c.key }

// consoleSignIn signs in with the harness owner's token.
func (h *allowHarness) consoleSignIn(t *testing.T) consoleSession {
	t.Helper()
	s, hdr, body := h.consoleCall(t, "POST", "/console/api/session", `{"token":"`+h.ownerToken+`"}`, "Content-Type", "application/json")
	m := consoleCookieRE.FindStringSubmatch(hdr.Get("Set-Cookie"))
	if s != 200 || m == nil {
		t.Fatalf("sign-in = %d %s (Set-Cookie %q)", s, body, hdr.Get("Set-Cookie"))
	}
	var sess map[string]any
	if err := json.Unmarshal([]byte(body), &sess); err != nil || sess["owner_id"] != h.ownerID {
		t.Fatalf("sign-in body %s", body)
	}
	key, _ := sess["session_key"].(string)
	if !ownerauth.ValidSessionKey(key) {
		t.Fatalf("sign-in body has no session key: %s", body)
	}
	return consoleSession{cookie: m[1], key: key, csrf: sess["csrf_token"].(string)}
}

func agentCount(t *testing.T, h *allowHarness) int {
	t.Helper()
	l, err := h.store.OwnerAgents(context.Background(), h.ownerID, "", 1000, true)
	if err != nil {
		t.Fatal(err)
	}
	return len(l)
}

// TestConsoleSessionCallsTheOwnerAPI is the console on the real listener:
// the cookie lists only its owner's agents, a change needs the CSRF token
// from the console's own origin, and a signed-out cookie gets 401.
func TestConsoleSessionCallsTheOwnerAPI(t *testing.T) {
	h := railHarness(t)
	ctx := context.Background()
	other, err := h.store.CreateOwner(ctx, "someone else")
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := h.store.CreateAgent(ctx, other.ID, "theirs")
	if err != nil {
		t.Fatal(err)
	}
	se := h.consoleSignIn(t)
	csrf := se.csrf

	s, hdr, body := h.consoleCall(t, "GET", "/console/", "")
	if s != 200 || !strings.HasPrefix(hdr.Get("Content-Security-Policy"), "default-src 'none'") || hdr.Get("X-Frame-Options") != "DENY" {
		t.Fatalf("GET /console/ = %d %v", s, hdr)
	}
	_ = body
	if s, _, body := h.consoleCall(t, "GET", "/v1/agents", "", se.headers()...); s != 200 || !strings.Contains(body, h.agentID) || strings.Contains(body, theirs.ID) {
		t.Fatalf("GET /v1/agents with the cookie = %d %s", s, body)
	}
	before := agentCount(t, h)
	create := `{"displayName":"made in the console"}`
	// Another token of the same shape: its first character changed (a
	// fixed "x" was the token itself whenever the token began with one).
	wrong := "x" + csrf[1:]
	if csrf[0] == 'x' {
		wrong = "y" + csrf[1:]
	}
	for _, tc := range []struct {
		name    string
		headers []string
	}{
		{"no CSRF header", se.headers("Content-Type", "application/json")},
		{"wrong CSRF token", se.headers("Content-Type", "application/json", console.CSRFHeader, wrong)},
		{"wrong Origin", se.headers("Content-Type", "application/json", console.CSRFHeader, csrf, "Origin", "http://evil.example")},
		{"cross-site", se.headers("Content-Type", "application/json", console.CSRFHeader, csrf, "Sec-Fetch-Site", "cross-site")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if s, _, body := h.consoleCall(t, "POST", "/v1/agents", create, tc.headers...); s != 403 || strings.TrimSpace(body) != `{"error":"csrf"}` {
				t.Fatalf("POST /v1/agents = %d %s, want 403 csrf", s, body)
			}
			if n := agentCount(t, h); n != before {
				t.Fatalf("a refused POST created an agent: %d → %d", before, n)
			}
		})
	}
	if s, _, body := h.consoleCall(t, "POST", "/v1/agents", create, se.headers("Content-Type", "application/json", console.CSRFHeader, csrf,
		"Origin", "http://"+h.httpAddr, "Sec-Fetch-Site", "same-origin")...); s != 200 || agentCount(t, h) != before+1 {
		t.Fatalf("POST /v1/agents with the CSRF token = %d %s", s, body)
	}
	// The owner-token API is unchanged.
	if s, _, body := h.consoleCall(t, "GET", "/v1/agents", "", "Authorization", "Bearer "+h.ownerToken); s != 200 || !strings.Contains(body, h.agentID) {
		t.Fatalf("GET /v1/agents with the owner token = %d %s", s, body)
	}
	// Sign out: the same cookie is refused everywhere.
	if s, _, body := h.consoleCall(t, "POST", "/console/api/signout", "", se.headers(console.CSRFHeader, csrf)...); s != 204 {
		t.Fatalf("sign-out = %d %s", s, body)
	}
	if s, _, body := h.consoleCall(t, "GET", "/v1/agents", "", se.headers()...); s != 401 {
		t.Fatalf("GET /v1/agents after sign-out = %d %s", s, body)
	}
	if s, _, _ := h.consoleCall(t, "GET", "/console/api/session", "", se.headers()...); s != 401 {
		t.Fatalf("session after sign-out = %d", s)
	}
	if s, _, _ := h.consoleCall(t, "GET", "/v1/agents", "", "Authorization", "Bearer "+se.whole()); s != 401 {
		t.Fatalf("the whole secret as a Bearer after sign-out = %d", s)
	}
}

// TestConsoleRefusesAgentCredential: the agent's own credential opens no
// session, as it opens no owner API call.
func TestConsoleRefusesAgentCredential(t *testing.T) {
	h := railHarness(t)
	s, hdr, body := h.consoleCall(t, "POST", "/console/api/session", `{"token":"`+h.secret+`"}`, "Content-Type", "application/json")
	if s != 401 || hdr.Get("Set-Cookie") != "" || !strings.Contains(body, "agent credential") {
		t.Fatalf("sign-in with csk_ = %d %s (Set-Cookie %q)", s, body, hdr.Get("Set-Cookie"))
	}
	// Nor does a made-up session secret reach anything.
	if s, _, _ := h.consoleCall(t, "GET", "/v1/agents", "", consoleSession{cookie: "css_" + strings.Repeat("a", 52), key: strings.Repeat("a", 52)}.headers()...); s != 401 {
		t.Fatalf("GET /v1/agents with an unknown session = %d", s)
	}
}

// TestConsoleWatchStreamsAndEndsWithSession: GET /v1/intents:watch with
// the session cookie streams transitions as they commit, and the stream
// ends when its session expires (the expiry is the request's deadline);
// the expired cookie then gets the API's 401.
func TestConsoleWatchStreamsAndEndsWithSession(t *testing.T) {
	h := railHarness(t)
	ctx := context.Background()
	authn, err := ownerauth.New(ownerauth.Config{}, h.store)
	if err != nil {
		t.Fatal(err)
	}
	owner, _, err := authn.SignInToken(ctx, h.ownerToken)
	if err != nil {
		t.Fatal(err)
	}
	const life = 3 * time.Second
	secret, _, err := ownerauth.StartSession(ctx, h.store, owner, time.Now().Add(life))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "http://"+h.httpAddr+"/v1/intents:watch", nil)
	req.Header.Set("Cookie", console.SessionCookie+"="+secret.Cookie)
	req.Header.Set(console.SessionKeyHeader, secret.Key)
	started := time.Now()
	lines := make(chan string, 64)
	status := make(chan int, 1)
	go func() {
		defer close(lines)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			status <- 0
			return
		}
		defer res.Body.Close()
		status <- res.StatusCode
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// The gateway sends its headers with the first message: decide until
	// one is streamed (the watch sees only what commits after it starts).
	var first string
	i := 0
	if !wait.Until(10*time.Second, func() bool {
		select {
		case first = <-lines:
			return true
		default:
		}
		i++
		h.decide(t, refund("pi_bench", 10, "watch "+strings.Repeat("x", i)))
		return false
	}) {
		t.Fatal("no transition streamed through the console wrapper within 10s")
	}
	if s := <-status; s != 200 || !strings.Contains(first, `"transition"`) {
		t.Fatalf("watch = %d, first line %s", s, first)
	}
	// The stream ends with its session, and not long after.
	if !wait.Until(life+10*time.Second, func() bool {
		for {
			select {
			case _, ok := <-lines:
				if !ok {
					return true
				}
			default:
				return false
			}
		}
	}) {
		t.Fatalf("the watch outlived its session (%s) by 10s", life)
	}
	if took := time.Since(started); took < life-time.Second {
		t.Errorf("the watch ended after %s, before its session's %s", took, life)
	}
	if s, _, body := h.consoleCall(t, "GET", "/v1/agents", "", consoleSession{cookie: secret.Cookie, key: secret.Key}.headers()...); s != 401 || !strings.Contains(body, "expired") {
		t.Fatalf("GET /v1/agents with the expired session = %d %s", s, body)
	}
}

// TestConsoleSessionSurvivesABlockedSource: the agent shares the owner's
// source address (127.0.0.1, through a port-forward) and can fail on purpose
// until that source is blocked. A session the owner opens is a credential
// that has authenticated, so its calls are not held to that block.
func TestConsoleSessionSurvivesABlockedSource(t *testing.T) {
	h := railHarness(t)
	// The owner's token has been used before (so its sign-in is exempt).
	if s, _, body := h.consoleCall(t, "GET", "/v1/agents", "", "Authorization", "Bearer "+h.ownerToken); s != 200 {
		t.Fatalf("owner token: %d %s", s, body)
	}
	// The agent fails until its (and the owner's) source is blocked.
	blocked := wait.Until(10*time.Second, func() bool {
		s, _, _ := h.consoleCall(t, "POST", "/console/api/session", `x`, "Content-Type", "application/json")
		s2, _, _ := h.consoleCall(t, "GET", "/v1/agents", "", "Authorization", "Bearer css_"+strings.Repeat("a", 52)+"."+strings.Repeat("a", 52))
		return s == 429 || s2 == 429
	})
	if !blocked {
		t.Fatal("the source never got blocked")
	}
	se := h.consoleSignIn(t)
	if s, _, body := h.consoleCall(t, "GET", "/v1/agents", "", se.headers()...); s != 200 {
		t.Fatalf("the owner's new session on a blocked source: %d %s, want 200", s, body)
	}
}

// TestConsoleCookieAloneIsNoSession: browsers send the session cookie to
// every port of its host, so a page the agent serves on another
// port-forwarded localhost port receives it. The cookie is only half a
// session: with it alone (as the cookie, or as a Bearer), GET
// /console/api/session is signed out and tells no CSRF token, and the
// owner REST API refuses reads and changes; with the key half the console
// page keeps, both answer. A session of the one-part form (a row from
// before the key half existed) is refused and says to sign in again.
func TestConsoleCookieAloneIsNoSession(t *testing.T) {
	h := railHarness(t)
	se := h.consoleSignIn(t)
	ck := console.SessionCookie + "=" + se.cookie
	before := agentCount(t, h)
	create := `{"displayName":"made with half a session"}`
	for _, tc := range []struct {
		name, method, path, body string
		headers                  []string
	}{
		{"session, cookie alone", "GET", "/console/api/session", "", []string{"Cookie", ck}},
		{"session, cookie alone, same-origin headers", "GET", "/console/api/session", "", []string{"Cookie", ck, "Sec-Fetch-Site", "same-origin", "Origin", "http://" + h.httpAddr}},
		{"session, cookie and a made-up key", "GET", "/console/api/session", "", []string{"Cookie", ck, console.SessionKeyHeader, strings.Repeat("a", 52)}},
		{"session, cookie half as a Bearer", "GET", "/console/api/session", "", []string{"Authorization", "Bearer " + se.cookie}},
		{"list agents, cookie alone", "GET", "/v1/agents", "", []string{"Cookie", ck}},
		{"list agents, cookie half as a Bearer", "GET", "/v1/agents", "", []string{"Authorization", "Bearer " + se.cookie}},
		{"list agents, cookie half as a Bearer with the cookie", "GET", "/v1/agents", "", []string{"Authorization", "Bearer " + se.cookie, "Cookie", ck}},
		{"list agents, key half as a Bearer", "GET", "/v1/agents", "", []string{"Authorization", "Bearer " + se.key}},
		{"list agents, cookie and a made-up key", "GET", "/v1/agents", "", []string{"Cookie", ck, console.SessionKeyHeader, strings.Repeat("a", 52)}},
		{"create an agent, cookie alone", "POST", "/v1/agents", create, []string{"Cookie", ck, "Content-Type", "application/json",
			"Origin", "http://" + h.httpAddr, "Sec-Fetch-Site", "same-origin"}},
		{"create an agent, cookie half as a Bearer", "POST", "/v1/agents", create, []string{"Authorization", "Bearer " + se.cookie, "Content-Type", "application/json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, body := h.consoleCall(t, tc.method, tc.path, tc.body, tc.headers...)
			if s != 401 || strings.Contains(body, "csrf_token") || strings.Contains(body, h.agentID) {
				t.Fatalf("%s %s = %d %s, want 401 and nothing of the owner's", tc.method, tc.path, s, body)
			}
			if n := agentCount(t, h); n != before {
				t.Fatalf("half a session created an agent: %d → %d", before, n)
			}
		})
	}
	// The refusal of the cookie half as a Bearer says what is missing.
	if s, _, body := h.consoleCall(t, "GET", "/v1/agents", "", "Authorization", "Bearer "+se.cookie); s != 401 || !strings.Contains(body, "without its key half") {
		t.Fatalf("GET /v1/agents with the cookie half as a Bearer = %d %s", s, body)
	}
	// Both halves: the console page's session works, and so does the whole
	// secret as a Bearer.
	s, _, body := h.consoleCall(t, "GET", "/console/api/session", "", se.headers()...)
	if s != 200 || !strings.Contains(body, `"csrf_token":"`+se.csrf+`"`) {
		t.Fatalf("session with both halves = %d %s", s, body)
	}
	if s, _, body := h.consoleCall(t, "GET", "/v1/agents", "", se.headers()...); s != 200 || !strings.Contains(body, h.agentID) {
		t.Fatalf("GET /v1/agents with both halves = %d %s", s, body)
	}
	if s, _, body := h.consoleCall(t, "GET", "/v1/agents", "", "Authorization", "Bearer "+se.whole()); s != 200 || !strings.Contains(body, h.agentID) {
		t.Fatalf("GET /v1/agents with the whole secret as a Bearer = %d %s", s, body)
	}
	if s, _, body := h.consoleCall(t, "POST", "/v1/agents", create, se.headers("Content-Type", "application/json", console.CSRFHeader, se.csrf)...); s != 200 || agentCount(t, h) != before+1 {
		t.Fatalf("POST /v1/agents with both halves = %d %s", s, body)
	}

	// A session row of the one-part form, as a ledger holds them from
	// before the upgrade: its secret opens nothing, as cookie or Bearer.
	ctx := context.Background()
	authn, err := ownerauth.New(ownerauth.Config{}, h.store)
	if err != nil {
		t.Fatal(err)
	}
	owner, _, err := authn.SignInToken(ctx, h.ownerToken)
	if err != nil {
		t.Fatal(err)
	}
	// The one-part form is "css_" and 52 base32 characters: a cookie half's shape.
	minted, _, err := ownerauth.MintSession()
	if err != nil {
		t.Fatal(err)
	}
	legacy := minted.Cookie
	if _, err := h.store.CreateOwnerSession(ctx, owner.ID, owner.Subject, string(owner.Method), time.Now().Add(time.Hour), sha256.Sum256([]byte(legacy))); err != nil {
		t.Fatal(err)
	}
	if s, _, body := h.consoleCall(t, "GET", "/console/api/session", "", "Cookie", console.SessionCookie+"="+legacy); s != 401 {
		t.Fatalf("a one-part session's cookie = %d %s", s, body)
	}
	if s, _, body := h.consoleCall(t, "GET", "/v1/agents", "", "Authorization", "Bearer "+legacy); s != 401 || !strings.Contains(body, "sign in to the console again") {
		t.Fatalf("a one-part session as a Bearer = %d %s, want 401 saying to sign in again", s, body)
	}
}
