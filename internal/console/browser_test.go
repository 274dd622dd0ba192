package console_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/countersign/countersign/internal/console"
	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/testing/chromium"
)

// keyItem and bindingItem are where the page keeps a session's key half
// (localStorage) and its tab's OIDC sign-in binding (sessionStorage).
const (
	keyItem     = "countersign_session_key"
	bindingItem = "countersign_signin_binding"
)

// TestSignInFragmentFromAnotherPort: a page the agent serves on another
// localhost port is the console's site (cookies ignore ports: it can set
// the console's __Host- session cookie, and Chromium lets plain
// http://localhost do so) and can send the owner's tab to
// /console/#session_key=… with a key of its choosing. The page takes a key
// from the fragment only beside the binding of an OIDC sign-in this tab
// started, and never in place of a kept key the server accepts: the
// console stays in the owner's session, with the owner's key, and is
// never in the session the agent chose. An OIDC sign-in the owner starts
// in the tab still signs in.
func TestSignInFragmentFromAnotherPort(t *testing.T) {
	browser := chromium.Path(t)
	p := newProvider(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	// "localhost" is a secure context to Chromium: the Secure cookies are
	// kept over plain HTTP, and the agent's page of another port is the
	// same site.
	base := "http://localhost:" + port
	r := newRig(t, rigOptions{listener: ln,
		oidc: &ownerauth.Config{Issuer: p.srv.URL, Audience: "countersign-owner-api", JWKSURL: p.srv.URL + "/jwks", AllowedSubjects: []string{"alice"}},
		console: func(o *console.Options) {
			o.URL = base
			o.OIDC = &console.OIDC{ClientID: clientID}
		}})
	// The session the agent wants the owner to sit in: another owner's,
	// whose two halves the agent holds.
	_, malToken, _, err := ownerauth.Bootstrap(context.Background(), r.store, "mallory", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	mal, _ := r.signIn(malToken)

	agentUI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		q := req.URL.Query()
		if req.URL.Path == "/go.js" { // a script of the agent's own origin (no CSP there)
			w.Header().Set("Content-Type", "text/javascript")
			fmt.Fprintf(w, "location.href = %q;", q.Get("to"))
			return
		}
		if c := q.Get("toss"); c != "" {
			w.Header().Add("Set-Cookie", console.SessionCookie+"="+c+"; Path=/; Secure; HttpOnly; SameSite=Lax")
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><p>the agent's UI</p><script src="/go.js?%s"></script>`, url.Values{"to": {q.Get("to")}}.Encode())
	}))
	defer agentUI.Close()
	agentBase := strings.Replace(agentUI.URL, "127.0.0.1", "localhost", 1)

	ctx, cancel := chromium.Context(t, browser)
	defer cancel()
	run := func(what string, actions ...chromedp.Action) {
		t.Helper()
		c, stop := context.WithTimeout(ctx, 30*time.Second)
		defer stop()
		if err := chromedp.Run(c, actions...); err != nil {
			var page string
			_ = chromedp.Run(ctx, chromedp.Evaluate(`document.body ? document.body.innerText : ''`, &page))
			t.Fatalf("%s: %v\npage text:\n%s", what, err, page)
		}
	}
	// state is what the console tab holds once it has loaded: whether it
	// shows a session, its kept key, the owner and method the server says
	// that key (with the browser's cookie) signs in, what is left of the
	// fragment, and its tab's sign-in binding.
	type state struct {
		signedIn                       bool
		key, owner, method, hash, bind string
	}
	read := func(what string) state {
		t.Helper()
		var s state
		var who string
		var sess map[string]any
		run(what,
			chromedp.WaitVisible(`#who, #signin`, chromedp.ByQuery),
			chromedp.Evaluate(`document.querySelector('#who') ? 'yes' : ''`, &who),
			chromedp.Evaluate(`localStorage.getItem('`+keyItem+`') || ''`, &s.key),
			chromedp.Evaluate(`sessionStorage.getItem('`+bindingItem+`') || ''`, &s.bind),
			chromedp.Evaluate(`location.hash`, &s.hash),
			chromedp.Evaluate(`fetch('/console/api/session', {headers: {'X-Countersign-Session-Key': localStorage.getItem('`+keyItem+`') || ''}}).then(r => r.json())`,
				&sess, func(p *cdpruntime.EvaluateParams) *cdpruntime.EvaluateParams { return p.WithAwaitPromise(true) }))
		s.signedIn = who != ""
		s.owner, _ = sess["owner_id"].(string)
		s.method, _ = sess["method"].(string)
		return s
	}
	// visit has the agent's page (setting the session cookie to toss, if
	// any) send the tab to the console with fragment.
	visit := func(what, fragment, toss string) state {
		t.Helper()
		run(what, chromedp.Navigate(agentBase+"/?"+url.Values{"to": {base + "/console/#" + fragment}, "toss": {toss}}.Encode()))
		return read(what)
	}

	// signIn signs the owner in afresh with the owner token (signed out
	// first, so that the form shows) and returns what the console holds.
	signIn := func() state {
		t.Helper()
		run("sign in with the owner token",
			chromedp.Navigate(base+"/console/"),
			chromedp.WaitVisible(`#who, #signin`, chromedp.ByQuery),
			chromedp.Evaluate(`localStorage.removeItem('`+keyItem+`')`, nil),
			chromedp.Reload(),
			chromedp.WaitVisible(`#signin input[name=token]`, chromedp.ByQuery),
			chromedp.SendKeys(`#signin input[name=token]`, r.token, chromedp.ByQuery),
			chromedp.Click(`#signin button[type=submit]`, chromedp.ByQuery),
			chromedp.WaitVisible(`#who`, chromedp.ByQuery))
		own := read("the owner's console")
		if !own.signedIn || own.owner != r.ownerID || !ownerauth.ValidSessionKey(own.key) {
			t.Fatalf("after the owner's sign-in the console holds %+v, want the owner %s's session", own, r.ownerID)
		}
		return own
	}

	// A value as the page keeps one for its sign-in (64 hex digits), and
	// the binding (its SHA-256) the page sends to /console/oidc/start.
	tabValue := sha256Hex("this tab's own value")
	for _, tc := range []struct {
		name, fragment string
		keep           bool // the tab keeps tabValue, as if it had started a sign-in
	}{
		{name: "a made-up key", fragment: console.SessionKeyFragment + strings.Repeat("a", 52)},
		{name: "another owner's key", fragment: console.SessionKeyFragment + mal.key},
		{name: "another owner's key, the agent's binding",
			fragment: console.SessionKeyFragment + mal.key + "&binding=" + sha256Hex(sha256Hex("the agent's own value"))},
		{name: "another owner's key, this tab's binding, while the owner's key holds",
			fragment: console.SessionKeyFragment + mal.key + "&binding=" + sha256Hex(tabValue), keep: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			own := signIn()
			if tc.keep {
				run("keep a sign-in's value in this tab", chromedp.Evaluate(`sessionStorage.setItem('`+bindingItem+`', '`+tabValue+`')`, nil))
			}
			got := visit(tc.name, tc.fragment, "")
			if !got.signedIn || got.owner != r.ownerID || got.key != own.key {
				t.Errorf("the console after %s: signed in %v, owner %q, its key the owner's %v, the agent's %v; want the owner %s's session and key",
					tc.name, got.signedIn, got.owner, got.key == own.key, got.key == mal.key, r.ownerID)
			}
			if got.hash != "" && got.hash != "#/approvals" || got.bind != "" {
				t.Errorf("the console after %s left fragment %q and binding %q, want both gone", tc.name, got.hash, got.bind)
			}
		})
	}

	// The reviewer's probe: the agent's page also sets the session cookie to
	// its session's cookie half. That overwrites the owner's cookie half
	// (same name, host and path; ports do not count), so the owner's kept
	// key opens nothing in this browser any more (the agent can always sign
	// the owner's browser out so: any cookie will do), but the console must
	// not be in the agent's session, nor keep the agent's key.
	own := signIn()
	got := visit("the agent's session cookie and key", console.SessionKeyFragment+mal.key, mal.cookie)
	var jar []*network.Cookie
	run("read the cookie jar", chromedp.ActionFunc(func(ctx context.Context) error {
		var err error
		jar, err = network.GetCookies().WithURLs([]string{base + "/console/"}).Do(ctx)
		return err
	}))
	tossed := false
	for _, c := range jar {
		tossed = tossed || (c.Name == console.SessionCookie && c.Value == mal.cookie)
	}
	if !tossed {
		// What this checks is the browser's doing: if the other port can no
		// longer set the console's cookie, say so rather than pass a test
		// of nothing.
		t.Fatalf("the agent's page did not set the console's session cookie (jar %d cookies): the premise of this check changed", len(jar))
	}
	if got.signedIn || got.key == mal.key || got.owner != "" {
		t.Fatalf("after the agent set its session cookie and key the console is signed in %v, owner %q, its key the agent's %v; want signed out, and never the agent's session",
			got.signedIn, got.owner, got.key == mal.key)
	}

	// The owner signs in again, through the issuer, in this tab: the key of
	// its own sign-in is taken.
	run("sign in through the issuer",
		chromedp.WaitVisible(`#sso`, chromedp.ByQuery),
		chromedp.Click(`#sso`, chromedp.ByQuery),
		chromedp.WaitVisible(`#who`, chromedp.ByQuery))
	got = read("the console after the OIDC sign-in")
	if !got.signedIn || got.method != "oidc" || !strings.HasPrefix(got.owner, "oidc:") || got.key == own.key || got.key == mal.key ||
		got.hash != "#/approvals" || got.bind != "" {
		t.Fatalf("after the owner's OIDC sign-in the console holds %+v, want an oidc session with a new key, no fragment and no binding left", got)
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
