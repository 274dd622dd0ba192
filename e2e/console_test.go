package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/jackc/pgx/v5"

	"github.com/countersign/countersign/internal/money"
	"github.com/countersign/countersign/internal/testing/chromium"
	"github.com/countersign/countersign/internal/testing/wait"
)

// TestConsoleInChromium drives the owner console in a real Chromium against
// the whole demo (countersign, the Envoy-contract egress and the mock rail,
// each a real process or listener): sign in; a held agent request appears
// without a reload; approving it lets the identical request through once
// (one rail effect in the mock rail's journal); a rejection blocks; an
// agent's <script> stays text; a cross-site form post approves nothing; the
// queue holds still while the owner's pointer is over it, also as the
// balances of the cards above it first load; an expired session is sent
// back to sign-in; a page of another localhost port is sent the session
// cookie but can do nothing with it, while the console keeps its session
// across a reload and in a new tab. Screenshots of the main views go to
// $COUNTERSIGN_SCREENSHOTS (default: a temporary directory, logged).
func TestConsoleInChromium(t *testing.T) {
	browser := chromium.Path(t)
	d := startDemo(t)
	out := d.p.out.String()
	ownerToken := mustFind(t, out, `--owner-token (\S+)`)
	ledgerURL := mustFind(t, out, `(?m)^\s+ledger\s+(\S+)`)
	_, port, _ := net.SplitHostPort(d.httpAddr)
	// "localhost" is a secure context to Chromium, so the console's Secure
	// cookies are kept over plain HTTP here, as they are over TLS in a
	// deployment.
	base := "http://localhost:" + port
	shots := screenshotDir(t)

	ctx, cancel := chromium.Context(t, browser)
	defer cancel()
	run := func(what string, within time.Duration, actions ...chromedp.Action) {
		t.Helper()
		c, stop := context.WithTimeout(ctx, within)
		defer stop()
		if err := chromedp.Run(c, actions...); err != nil {
			var page string
			_ = chromedp.Run(ctx, chromedp.Evaluate(`document.body ? document.body.innerText : ''`, &page))
			t.Fatalf("%s: %v\npage text:\n%s", what, err, page)
		}
	}
	shot := func(name string) {
		t.Helper()
		var png []byte
		run("screenshot "+name, 20*time.Second, chromedp.FullScreenshot(&png, 100))
		if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Sign in.
	run("open the console", 30*time.Second,
		chromedp.Navigate(base+"/console/"),
		chromedp.WaitVisible(`#signin`, chromedp.ByQuery))
	shot("signin")
	run("sign in with an agent credential", 20*time.Second,
		chromedp.SendKeys(`#signin input[name=token]`, d.stripeKey, chromedp.ByQuery),
		chromedp.Click(`#signin button[type=submit]`, chromedp.ByQuery),
		waitText(`#signin-error`, "not a valid owner token"))
	run("sign in with the owner token", 20*time.Second,
		chromedp.Evaluate(`document.querySelector('#signin input[name=token]').value = ''`, nil),
		// By keyboard: the token, then Enter.
		chromedp.SendKeys(`#signin input[name=token]`, ownerToken+kb.Enter, chromedp.ByQuery),
		chromedp.WaitVisible(`#approvals`, chromedp.ByQuery),
		waitText(`#live`, "live"))
	checkMoneyFormatting(t, ctx)
	cookie := sessionCookie(t, ctx)
	if !cookie.HTTPOnly || !cookie.Secure || cookie.SameSite != network.CookieSameSiteStrict {
		t.Fatalf("session cookie %s: HttpOnly=%v Secure=%v SameSite=%v, want all three strict", cookie.Name, cookie.HTTPOnly, cookie.Secure, cookie.SameSite)
	}
	sessionStaysWithItsOrigin(t, ctx, run, base, ownerToken)

	// An agent request is held and appears without a reload.
	holdLine := d.step(t, "HOLD", 0)
	payment := curlForm(t, holdLine).Get("payment_intent")
	effectsBefore := len(d.journal(t).EffectsOn(payment))
	if status, h, body := send(t, curlRequest(t, holdLine)); h.Get("X-Countersign-Verdict") != "HOLD" {
		t.Fatalf("the propose-only refund answered %d %q: %s", status, h.Get("X-Countersign-Verdict"), body)
	}
	held := pendingApprovals(t, base, ownerToken)
	if len(held) != 1 {
		t.Fatalf("pending approvals = %d, want 1", len(held))
	}
	card := fmt.Sprintf(`article.approval[data-approval-id=%q]`, held[0])
	run("the held request appears live", 30*time.Second,
		chromedp.WaitVisible(card, chromedp.ByQuery),
		waitText(card+` .amount`, " USD"),
		waitText(card+` .refundable`, "USD"),
		waitText(card+` .live-context`, "As of"))
	shot("approvals")

	// Approve it in the browser; the identical request then passes once.
	run("approve", 30*time.Second,
		chromedp.SendKeys(card+` textarea`, "customer called; refund agreed", chromedp.ByQuery),
		chromedp.Click(card+` button.approve`, chromedp.ByQuery),
		// A decided card stays, marked, while the owner is in the queue;
		// it leaves once the pointer and focus have left.
		leaveQueue(),
		chromedp.WaitNotPresent(card, chromedp.ByQuery))
	if status, h, body := send(t, curlRequest(t, holdLine)); status != http.StatusOK {
		t.Fatalf("the approved request answered %d %q: %s", status, h.Get("X-Countersign-Verdict"), body)
	}
	if status, h, _ := send(t, curlRequest(t, holdLine)); status != http.StatusOK || h.Get("X-Countersign-Replay") != "true" {
		t.Fatalf("the approved request again answered %d replay=%q, want the stored answer", status, h.Get("X-Countersign-Replay"))
	}
	if got := len(d.journal(t).EffectsOn(payment)) - effectsBefore; got != 1 {
		t.Fatalf("rail effects on %s after one approval and two requests = %d, want 1", payment, got)
	}

	// An agent's markup in the one free-text member it has (the distinct
	// reason, kept verbatim) is shown as text and never runs.
	const payload = `<img src=x onerror="document.title='pwned'"><script>document.title='pwned'</script>`
	// A different amount is a different request, so a new hold.
	hostile := func() *http.Request {
		form := curlForm(t, holdLine)
		form.Set("amount", fmt.Sprint(atoi(t, form.Get("amount"))-100))
		form.Set("metadata[note]", payload+"\nAmount 1.00 USD") // a label: shown with the approval it is approved with
		form.Set("reverse_transfer", "true")                    // a member of the key: shown among the card's facts
		r := curlRequest(t, holdLine)
		r.Body = io.NopCloser(strings.NewReader(form.Encode()))
		r.ContentLength = int64(len(form.Encode()))
		r.Header.Set("X-Countersign-Distinct", payload)
		return r
	}
	if status, h, body := send(t, hostile()); h.Get("X-Countersign-Verdict") != "HOLD" {
		t.Fatalf("the second refund answered %d %q: %s", status, h.Get("X-Countersign-Verdict"), body)
	}
	held = pendingApprovals(t, base, ownerToken)
	if len(held) != 1 {
		t.Fatalf("pending approvals = %d, want 1", len(held))
	}
	card = fmt.Sprintf(`article.approval[data-approval-id=%q]`, held[0])
	var canonical, label, title, facts, terms string
	var injected int
	run("the hostile request appears", 30*time.Second,
		chromedp.WaitVisible(card, chromedp.ByQuery),
		// Its live context loads after the card shows (in a box of fixed
		// height, so it moves nothing): wait for it, as the owner would.
		waitText(card+` .live-context`, "As of"),
		chromedp.Text(card+` dl.labels pre.label-value`, &label, chromedp.ByQuery),
		chromedp.Text(card+` dl.facts`, &facts, chromedp.ByQuery),
		chromedp.Text(card+` dl.terms`, &terms, chromedp.ByQuery),
		chromedp.Click(card+` summary`, chromedp.ByQuery),
		chromedp.Text(card+` pre.canonical`, &canonical, chromedp.ByQuery),
		chromedp.Evaluate(`document.title`, &title),
		chromedp.Evaluate(`document.querySelectorAll('#view img, #view script').length`, &injected))
	if !strings.Contains(canonical, "<script>") || !strings.Contains(canonical, "onerror") {
		t.Fatalf("the canonical request shown lacks the agent's text verbatim: %q", canonical)
	}
	// Verbatim, each line break marked, so lines the agent wrote cannot
	// pass for the card's own facts (found by a review).
	if want := payload + "\u23ce\nAmount 1.00 USD"; label != want {
		t.Fatalf("the label shown with the approval is %q, want the agent's metadata verbatim with its line break marked: %q", label, want)
	}
	// What changes the request beyond its amount and subject, and the
	// agent's reason to send it again, are on the card, not only in the
	// collapsed exact request (found by a review), after the card's own
	// facts and apart from them (a native caller names its members: found
	// by a review of the first version).
	if !strings.Contains(terms, "reverse_transfer\ntrue") && !strings.Contains(terms, "reverse_transfer\ttrue") || !strings.Contains(terms, "Sent again because") || !strings.Contains(terms, payload) {
		t.Fatalf("the card's terms lack reverse_transfer=true or the distinct reason: %q", terms)
	}
	if strings.Contains(facts, "reverse_transfer") || strings.Contains(facts, "Sent again because") {
		t.Fatalf("the request's members are among the card's own facts: %q", facts)
	}
	if title == "pwned" || injected != 0 {
		t.Fatalf("agent markup ran or became elements: title %q, %d img/script elements in the view", title, injected)
	}
	shot("approval-hostile")

	// A reason with a right-to-left override (which would make the rest of
	// the line read reversed on the owner's screen) is refused at the gate,
	// and the page writes any such character as a visible escape: tag
	// characters, variation selectors, the soft hyphen and Hangul fillers
	// too, which browsers draw as nothing (text after "T-77" the owner
	// would approve unseen), and every space but the plain one.
	bidi := curlRequest(t, holdLine)
	bidi.Header.Set("X-Countersign-Distinct", "second \u202eDSU 00.1 fo dnufer")
	if status, h, body := send(t, bidi); h.Get("X-Countersign-Verdict") != "BLOCK" || !strings.Contains(body, "U+202E") {
		t.Fatalf("a distinct reason with U+202E answered %d %q: %s", status, h.Get("X-Countersign-Verdict"), body)
	}
	var shown string
	run("invisible characters in the page", 10*time.Second, chromedp.Evaluate(`(async () => {
		const d = await import('/console/assets/dom.js');
		return d.h('p', {}, 'a\u202eb\u200bc\u2066d\u0007e\u{E0034}f\u{E0104}g\u00adh\u3164i\u00a0j\u2029k\ue000l').textContent;
	})()`, &shown, func(p *cdpruntime.EvaluateParams) *cdpruntime.EvaluateParams { return p.WithAwaitPromise(true) }))
	if shown != `a\u{202E}b\u{200B}c\u{2066}d\u{7}e\u{E0034}f\u{E0104}g\u{AD}h\u{3164}i\u{A0}j\u{2029}k\u{E000}l` {
		t.Fatalf("the page shows invisible characters as %q", shown)
	}

	// A cross-site page's form post cannot approve it: the session cookie
	// is SameSite=Strict and every state change needs the CSRF header.
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><form id=f method=POST action="%s/v1/approvals/%s:approve"><input name=note value=x></form><script>document.getElementById('f').submit()</script>`, base, held[0])
	}))
	defer attacker.Close()
	run("a cross-site form post", 30*time.Second,
		chromedp.Navigate(attacker.URL), // 127.0.0.1: another site than localhost
		chromedp.WaitReady(`body`, chromedp.ByQuery))
	if !wait.Until(10*time.Second, func() bool {
		var loc string
		_ = chromedp.Run(ctx, chromedp.Location(&loc))
		return strings.HasPrefix(loc, base)
	}) {
		t.Fatal("the cross-site form never posted")
	}
	if got := pendingApprovals(t, base, ownerToken); len(got) != 1 || got[0] != held[0] {
		t.Fatalf("after a cross-site form post, pending approvals = %v, want still [%s]", got, held[0])
	}

	// Reject it in the browser; the identical request is then blocked and
	// the rail never sees it.
	run("back to the console", 30*time.Second,
		chromedp.Navigate(base+"/console/#/approvals"),
		chromedp.WaitVisible(card, chromedp.ByQuery),
		waitText(card+` .live-context`, "As of"))
	run("reject without a reason", 20*time.Second,
		chromedp.Click(card+` button.reject`, chromedp.ByQuery),
		waitText(card+` [role=alert]`, "Say why"))
	run("reject", 30*time.Second,
		chromedp.SendKeys(card+` textarea`, "not a refund we owe", chromedp.ByQuery),
		chromedp.Click(card+` button.reject`, chromedp.ByQuery),
		leaveQueue(),
		chromedp.WaitNotPresent(card, chromedp.ByQuery))
	if state, note := approvalOf(t, base, ownerToken, held[0]); state != "APPROVAL_STATE_REJECTED" || note != "not a refund we owe" {
		t.Fatalf("the rejected approval is %s with note %q, want REJECTED with the note as typed", state, note)
	}
	if status, h, body := send(t, hostile()); h.Get("X-Countersign-Verdict") != "BLOCK" {
		t.Fatalf("the rejected request answered %d %q, want BLOCK: %s", status, h.Get("X-Countersign-Verdict"), body)
	}
	if got := len(d.journal(t).EffectsOn(payment)) - effectsBefore; got != 1 {
		t.Fatalf("rail effects on %s after the rejection = %d, want still 1", payment, got)
	}

	// Agents and credentials: create an agent, issue it a credential (the
	// secret is shown once), and revoke it; the revoked secret is refused.
	acceptDialogs(ctx)
	var secret string
	run("create an agent", 30*time.Second,
		chromedp.Navigate(base+"/console/#/agents"),
		chromedp.WaitVisible(`#create-agent`, chromedp.ByQuery),
		chromedp.SendKeys(`#create-agent input[name=displayName]`, "<b>refund bot</b>", chromedp.ByQuery),
		chromedp.Click(`#create-agent button[type=submit]`, chromedp.ByQuery),
		waitText(`#view h1`, "agt_"),
		waitText(`#view dl`, "<b>refund bot</b>"),
		chromedp.SetValue(`#issue-credential select[name=scope]`, "CREDENTIAL_SCOPE_EXECUTE", chromedp.ByQuery),
		chromedp.Click(`#issue-credential button[type=submit]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#new-secret`, chromedp.ByQuery),
		chromedp.Value(`#new-secret`, &secret, chromedp.ByQuery),
		waitText(`#secret-warning`, "only time"))
	if !regexp.MustCompile(`^csk_[a-z2-7]{20,}$`).MatchString(secret) {
		t.Fatalf("the issued secret shown is %q", secret)
	}
	shot("credential-issued")
	run("revoke the credential", 30*time.Second,
		waitText(`#credentials`, "active"), // the list is read again after the issue
		chromedp.Click(`#credentials button.danger`, chromedp.ByQuery),
		waitText(`#credentials`, "revoked"))
	revoked := curlRequest(t, holdLine)
	revoked.Header.Set("Authorization", "Bearer "+secret)
	if status, h, body := send(t, revoked); h.Get("X-Countersign-Verdict") != "BLOCK" || h.Get("X-Countersign-Reason") != "credential_revoked" {
		t.Fatalf("a request with the credential revoked in the console answered %d %q %q, want BLOCK credential_revoked: %s",
			status, h.Get("X-Countersign-Verdict"), h.Get("X-Countersign-Reason"), body)
	}

	// The main views, for the artifacts and the README; on each, every
	// control has a label.
	agentID := mustFind(t, out, `agent (\S+); mandates`)
	views := []struct{ name, hash, ready string }{
		{"agents", "#/agents", `#agents table`},
		{"agent", "#/agents/" + agentID, `#credentials table`},
		{"mandates", "#/mandates", `#mandates table`},
		{"intents", "#/intents", `#intents tbody tr[data-sik]`},
		{"audit", "#/audit", `#verify`},
		{"webhooks", "#/webhooks", `#dead-letters p, #dead-letters table`},
	}
	for _, v := range views {
		run("view "+v.name, 30*time.Second,
			chromedp.Navigate(base+"/console/"+v.hash),
			chromedp.WaitVisible(v.ready, chromedp.ByQuery))
		var unlabelled []string
		run("labels on "+v.name, 10*time.Second, chromedp.Evaluate(`[...document.querySelectorAll('input, select, textarea')]
			.filter(e => e.type !== 'hidden' && !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))
			.map(e => e.outerHTML)`, &unlabelled))
		if len(unlabelled) > 0 {
			t.Errorf("%s: controls without a label: %v", v.name, unlabelled)
		}
		shot(v.name)
	}
	run("a mandate with its usage", 30*time.Second,
		chromedp.Navigate(base+"/console/#/mandates"),
		chromedp.WaitVisible(`#mandates tbody tr[data-rail-account=acct_dev_stripe] a`, chromedp.ByQuery),
		chromedp.Click(`#mandates tbody tr[data-rail-account=acct_dev_stripe] a`, chromedp.ByQuery),
		chromedp.WaitVisible(`#mandate-yaml`, chromedp.ByQuery),
		// The one approved refund is spent against the budget and counted
		// in the window; the rejected and refused ones are neither.
		waitText(`#usage`, "25.00 USD spent"),
		waitText(`#usage`, "1 of 600 calls"))
	shot("mandate")
	run("an intent's timeline", 30*time.Second,
		chromedp.Navigate(base+"/console/#/intents?state=INTENT_STATE_APPLIED"),
		chromedp.WaitVisible(`#intents tbody tr[data-sik] a`, chromedp.ByQuery),
		chromedp.Click(`#intents tbody tr[data-sik] a`, chromedp.ByQuery),
		waitText(`#timeline`, "attempt started"),
		waitText(`#intent-state`, "applied"))
	shot("intent")
	run("verify the audit log", 60*time.Second,
		chromedp.Navigate(base+"/console/#/audit"),
		chromedp.WaitVisible(`#verify input`, chromedp.ByQuery),
		chromedp.SendKeys(`#verify input`, mustFind(t, out, `refunds up to \S+ USD each on (\S+),`), chromedp.ByQuery),
		chromedp.Click(`#verify button[type=submit]`, chromedp.ByQuery),
		waitText(`#verify-verdict`, "verifies"))
	shot("audit-verified")

	// Revoke a mandate in the console; the ledger has it revoked.
	run("revoke a mandate", 30*time.Second,
		chromedp.Navigate(base+"/console/#/mandates"),
		chromedp.WaitVisible(`#mandates tbody tr[data-rail-account=acct_dev_razorpay] a`, chromedp.ByQuery),
		chromedp.Click(`#mandates tbody tr[data-rail-account=acct_dev_razorpay] a`, chromedp.ByQuery),
		chromedp.WaitVisible(`#revoke-mandate`, chromedp.ByQuery),
		waitText(`#usage`, "As of"), // usage loads above the form and moves it
		chromedp.SendKeys(`#revoke-mandate input[name=reason]`, "demo over", chromedp.ByQuery),
		chromedp.Click(`#revoke-mandate button[type=submit]`, chromedp.ByQuery),
		waitText(`#view dl`, "revoked"),
		waitText(`#view dl`, "demo over"))

	// On a phone's width the queue still fits: nothing scrolls sideways.
	var overflow bool
	run("the approvals on a phone", 30*time.Second,
		chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile),
		chromedp.Navigate(base+"/console/#/intents"),
		chromedp.WaitVisible(`#intents tbody tr[data-sik]`, chromedp.ByQuery),
		chromedp.Evaluate(`document.documentElement.scrollWidth > window.innerWidth + 1`, &overflow))
	if overflow {
		t.Error("the intents view scrolls sideways at a phone's width")
	}
	shot("intents-phone")
	run("back to a laptop", 10*time.Second, chromedp.EmulateViewport(1280, 900))

	queueHoldsStill(t, run, holdLine, base, ownerToken)
	firstLoadHoldsStill(t, ctx, run, holdLine, base, ownerToken)

	// A flood of HOLDs costs the owner what is on screen: the page reads
	// the live context (a rail read each) of the cards it shows, not of all.
	var contextReads atomic.Int64
	chromedp.ListenTarget(ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok && regexp.MustCompile(`/v1/approvals/apr_[a-z0-9]+$`).MatchString(e.Request.URL) {
			contextReads.Add(1)
		}
	})
	run("network events", 10*time.Second, network.Enable())
	const flood = 40
	for i := range flood {
		form := curlForm(t, holdLine)
		form.Set("amount", fmt.Sprint(atoi(t, form.Get("amount"))-200-int64(i)))
		r := curlRequest(t, holdLine)
		r.Body, r.ContentLength = io.NopCloser(strings.NewReader(form.Encode())), int64(len(form.Encode()))
		if status, h, body := send(t, r); h.Get("X-Countersign-Verdict") != "HOLD" {
			t.Fatalf("flood request %d answered %d %q: %s", i, status, h.Get("X-Countersign-Verdict"), body)
		}
	}
	run("the flooded queue", 60*time.Second,
		chromedp.Navigate(base+"/console/#/approvals"),
		chromedp.WaitVisible(`#approvals article.approval:nth-of-type(40)`, chromedp.ByQuery),
		waitText(`#approvals article.approval:first-of-type .live-context`, "refundable"))
	if n := contextReads.Load(); n > 10 {
		t.Errorf("with %d approvals pending the page read %d live contexts; it should read those on screen only", flood, n)
	}

	// A session past its expiry is sent back to sign-in.
	expireSessions(t, ledgerURL)
	run("an expired session", 30*time.Second,
		chromedp.Navigate(base+"/console/#/agents"),
		chromedp.WaitVisible(`#signin`, chromedp.ByQuery))
	t.Logf("screenshots in %s", shots)
}

// sessionStaysWithItsOrigin: browsers send a cookie to every port of its
// host, so a page on another port-forwarded localhost port (the agent's own
// UI, a report it links to) is sent the console's session cookie. The
// cookie is half a session: presented by the agent to Countersign's
// listener, as the cookie or as a Bearer, it opens neither the console's
// session nor the owner API. The other half is in the console origin's
// localStorage, which that page cannot read; with it the console keeps
// working after a reload and in a new tab.
func sessionStaysWithItsOrigin(t *testing.T, ctx context.Context, run func(string, time.Duration, ...chromedp.Action), base, ownerToken string) {
	t.Helper()
	var mu sync.Mutex
	var got []string // the Cookie headers the agent's page was sent
	agentUI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Values("Cookie")...)
		mu.Unlock()
		switch r.URL.Path {
		case "/go": // sends the browser on to ?to=…
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<!doctype html><title>agent UI</title><script src="/go.js?%s"></script>`, r.URL.RawQuery)
		case "/go.js":
			w.Header().Set("Content-Type", "text/javascript")
			fmt.Fprintf(w, "location.href = %q;", r.URL.Query().Get("to"))
		default:
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<!doctype html><title>agent UI</title><p id=ui>the agent's own UI</p>`)
		}
	}))
	defer agentUI.Close()
	_, uiPort, _ := net.SplitHostPort(agentUI.Listener.Addr().String())
	var kept string
	run("the console's key in its own origin", 10*time.Second,
		chromedp.Evaluate(`localStorage.getItem('countersign_session_key') || ''`, &kept))
	var theirs string
	run("the agent's page on another localhost port", 30*time.Second,
		chromedp.Navigate("http://localhost:"+uiPort+"/"),
		chromedp.WaitVisible(`#ui`, chromedp.ByQuery),
		chromedp.Evaluate(`JSON.stringify(Object.assign({}, localStorage))`, &theirs))
	mu.Lock()
	m := regexp.MustCompile(`__Host-countersign_session=(css_[a-z2-7]+)`).FindStringSubmatch(strings.Join(got, "; "))
	mu.Unlock()
	if m == nil {
		// What this defends against is the browser's doing: if it no
		// longer sends the cookie across ports, say so rather than pass
		// a test of nothing.
		t.Fatalf("the page of localhost:%s was not sent the console's session cookie (Cookie: %q): the premise of this check changed", uiPort, got)
	}
	stolen := m[1]
	// The agent, in the pod, presents what its page was sent.
	for _, tc := range []struct{ name, method, path, header, value string }{
		{"the console's session, as the cookie", "GET", "/console/api/session", "Cookie", "__Host-countersign_session=" + stolen},
		{"the console's session, as a Bearer", "GET", "/console/api/session", "Authorization", "Bearer " + stolen},
		{"the owner API, as the cookie", "GET", "/v1/agents", "Cookie", "__Host-countersign_session=" + stolen},
		{"the owner API, as a Bearer", "GET", "/v1/agents", "Authorization", "Bearer " + stolen},
		{"an owner change, as a Bearer", "POST", "/v1/agents", "Authorization", "Bearer " + stolen},
	} {
		var body io.Reader
		if tc.method == "POST" {
			body = strings.NewReader(`{"displayName":"the agent's own"}`)
		}
		req, err := http.NewRequest(tc.method, base+tc.path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(tc.header, tc.value)
		req.Header.Set("Content-Type", "application/json")
		if status, _, body := send(t, req); status != http.StatusUnauthorized || strings.Contains(body, "csrf_token") {
			t.Errorf("the agent with the cookie its page was sent, %s: %s %s = %d %.200s, want 401", tc.name, tc.method, tc.path, status, body)
		}
	}
	// The other half: in the console origin's localStorage, in no cookie,
	// and out of the other port's reach.
	if !regexp.MustCompile(`^[a-z2-7]{52}$`).MatchString(kept) {
		t.Fatalf("the console's localStorage holds %q, want the session's key half", kept)
	}
	if strings.Contains(stolen, kept) || strings.Contains(theirs, kept) {
		t.Fatalf("the key half reached the other port: cookie %q, its page's localStorage %s", stolen, theirs)
	}
	// The agent's page sends the console's tab to /console/#session_key=…
	// with a key of its choosing: a made-up one, or that of another session
	// (the owner's own, here, opened by the agent with the owner token: a
	// session whose halves the agent holds). The console takes a key from
	// the fragment only after an OIDC sign-in this tab started, and never
	// in place of a key the server accepts: it keeps its own session.
	signIn, _ := http.NewRequest(http.MethodPost, base+"/console/api/session", strings.NewReader(`{"token":"`+ownerToken+`"}`))
	signIn.Header.Set("Content-Type", "application/json")
	status, _, body := send(t, signIn)
	var other struct {
		SessionKey string `json:"session_key"`
	}
	if err := json.Unmarshal([]byte(body), &other); status != http.StatusOK || err != nil || other.SessionKey == "" {
		t.Fatalf("another session for the agent: %d %s", status, body)
	}
	for _, tc := range []struct{ name, key string }{
		{"a made-up key", strings.Repeat("a", 52)},
		{"another session's key", other.SessionKey},
	} {
		var now string
		var signedIn bool
		run("the agent's page hands the console "+tc.name, 30*time.Second,
			chromedp.Navigate("http://localhost:"+uiPort+"/go?"+url.Values{"to": {base + "/console/#session_key=" + tc.key}}.Encode()),
			chromedp.WaitVisible(`#who, #signin`, chromedp.ByQuery),
			chromedp.Evaluate(`!!document.querySelector('#who')`, &signedIn),
			chromedp.Evaluate(`localStorage.getItem('countersign_session_key') || ''`, &now))
		if !signedIn || now != kept {
			t.Errorf("after the agent's page handed the console %s: signed in %v, its key its own %v, the agent's %v; want its own session and key",
				tc.name, signedIn, now == kept, now == tc.key)
		}
	}
	// The owner's console, reloaded, and in a new tab: still signed in.
	run("the console after a reload", 30*time.Second,
		chromedp.Navigate(base+"/console/#/approvals"),
		chromedp.Reload(),
		chromedp.WaitVisible(`#approvals`, chromedp.ByQuery),
		waitText(`#live`, "live"))
	tab, closeTab := chromedp.NewContext(ctx)
	defer closeTab()
	c, stop := context.WithTimeout(tab, 30*time.Second)
	defer stop()
	if err := chromedp.Run(c,
		chromedp.Navigate(base+"/console/#/agents"),
		chromedp.WaitVisible(`#agents table`, chromedp.ByQuery)); err != nil {
		t.Fatalf("the console in a new tab: %v", err)
	}
	// And the agents it lists are the owner's, as the owner token sees them.
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/agents", nil)
	req.Header.Set("Authorization", "Bearer "+ownerToken)
	if status, _, body := send(t, req); status != http.StatusOK || strings.Contains(body, "the agent's own") {
		t.Fatalf("after the agent's attempts the owner's agents are %d %s", status, body)
	}
}

// checkMoneyFormatting: the page writes minor units exactly as
// internal/money does (the refusals the agent reads), for zero-, two-,
// three- and four-decimal currencies, Stripe's departures, int64's ends and
// currencies with no minor unit.
func checkMoneyFormatting(t *testing.T, ctx context.Context) {
	t.Helper()
	cases := []struct {
		minor          int64
		currency, rail string
	}{
		{189900, "USD", ""}, {5000, "JPY", "RAIL_STRIPE"}, {5120, "KWD", ""}, {-5, "EUR", ""}, {1, "CLF", ""},
		{100, "ISK", "RAIL_STRIPE"}, {100, "ISK", ""}, {150, "MGA", "RAIL_STRIPE"}, {150, "MGA", ""},
		{12345, "XAU", ""}, {7, "", ""}, {math.MaxInt64, "USD", ""}, {math.MinInt64, "BHD", ""}, {0, "KRW", ""},
	}
	args, err := json.Marshal(func() [][3]string {
		var out [][3]string
		for _, c := range cases {
			out = append(out, [3]string{strconv.FormatInt(c.minor, 10), c.currency, c.rail})
		}
		return out
	}())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Run(c, chromedp.Evaluate(`(async () => {
		const m = await import('/console/assets/money.js');
		await m.loadCurrencies();
		return `+string(args)+`.map(([minor, currency, rail]) => m.format({amountMinor: minor, currency}, rail));
	})()`, &got, func(p *cdpruntime.EvaluateParams) *cdpruntime.EvaluateParams { return p.WithAwaitPromise(true) })); err != nil {
		t.Fatalf("format amounts in the page: %v", err)
	}
	for i, tc := range cases {
		rail := strings.ToLower(strings.TrimPrefix(tc.rail, "RAIL_"))
		if want := money.ForRail(rail).Format(tc.minor, tc.currency); i >= len(got) || got[i] != want {
			t.Errorf("the page writes %d %q (%s) as %q, internal/money as %q", tc.minor, tc.currency, tc.rail, at(got, i), want)
		}
	}
}

func at(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "<missing>"
}

// acceptDialogs answers every confirm() the page opens with OK, as the
// owner would on the console's "Revoke …?" questions.
func acceptDialogs(ctx context.Context) {
	chromedp.ListenTarget(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			go func() { _ = chromedp.Run(ctx, page.HandleJavaScriptDialog(true)) }()
		}
	})
}

// waitText waits until the element sel's text contains want.
func waitText(sel, want string) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		for {
			var got string
			err := chromedp.Run(ctx, chromedp.Text(sel, &got, chromedp.ByQuery, chromedp.AtLeast(0)))
			if err == nil && strings.Contains(got, want) {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s never contained %q (last: %q): %w", sel, want, got, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
}

func sessionCookie(t *testing.T, ctx context.Context) *network.Cookie {
	t.Helper()
	var cookies []*network.Cookie
	if err := chromedp.Run(ctx, chromedp.ActionFunc(func(ctx context.Context) error {
		var err error
		cookies, err = network.GetCookies().Do(ctx)
		return err
	})); err != nil {
		t.Fatal(err)
	}
	for _, c := range cookies {
		if c.Name == "__Host-countersign_session" {
			return c
		}
	}
	t.Fatalf("no session cookie among %d cookies", len(cookies))
	return nil
}

// pendingApprovals lists pending approval ids over the owner REST API with
// the owner token, as a script would, not through the browser.
func pendingApprovals(t *testing.T, base, token string) []string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/v1/approvals?state=APPROVAL_STATE_PENDING", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	status, _, body := send(t, req)
	if status != http.StatusOK {
		t.Fatalf("list approvals: %d %s", status, body)
	}
	var res struct {
		Approvals []struct {
			ApprovalID string `json:"approvalId"`
		} `json:"approvals"`
	}
	if err := json.Unmarshal([]byte(body), &res); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range res.Approvals {
		ids = append(ids, a.ApprovalID)
	}
	return ids
}

// approvalOf reads one approval's state and note over the owner REST API.
func approvalOf(t *testing.T, base, token, id string) (state, note string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/v1/approvals/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	status, _, body := send(t, req)
	if status != http.StatusOK {
		t.Fatalf("get approval %s: %d %s", id, status, body)
	}
	var res struct {
		Approval struct{ State, Note string } `json:"approval"`
	}
	if err := json.Unmarshal([]byte(body), &res); err != nil {
		t.Fatal(err)
	}
	return res.Approval.State, res.Approval.Note
}

// expireSessions moves every console session's life into the past, as the
// clock would after the session's lifetime. Sessions are immutable but for
// their revocation (a trigger), so this test, as the database's superuser,
// turns triggers off for its own connection only.
func expireSessions(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
		t.Fatal(err)
	}
	tag, err := conn.Exec(ctx, `UPDATE owner_sessions SET created_at = created_at - interval '1 day', expires_at = now() - interval '1 second'`)
	if err != nil {
		t.Fatal(err)
	}
	if tag.RowsAffected() == 0 {
		t.Fatal("no console session to expire")
	}
}

func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("COUNTERSIGN_SCREENSHOTS")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func mustFind(t *testing.T, s, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("output lacks %s:\n%s", re, s)
	}
	return m[1]
}

// queueHoldsStill: while the owner's pointer is over the approvals queue,
// nothing in it moves. An agent can open holds at will, and an approval
// decided elsewhere leaves the queue; either, applied at once, moves the
// card under the pointer, so the owner's click lands on another card's
// Approve button (each acts on its own card's fingerprint). So while the
// owner is in the queue a new hold is only counted, in a line of fixed
// height above the list, and a card that stopped waiting, or that the
// owner just approved (a double click must not approve the next card), is
// marked in place with its buttons disabled; the queue catches up once the
// pointer and focus have left it.
func queueHoldsStill(t *testing.T, run func(string, time.Duration, ...chromedp.Action), holdLine, base, ownerToken string) {
	hold := func(delta int64) string { t.Helper(); return holdRefund(t, holdLine, base, ownerToken, delta) }
	cardOf := func(id string) string { return fmt.Sprintf(`article.approval[data-approval-id=%q]`, id) }
	top := func(sel string, y *float64) chromedp.Action {
		return chromedp.Evaluate(fmt.Sprintf(`document.querySelector(%q).getBoundingClientRect().top`, sel), y)
	}

	run("the queue, empty", 30*time.Second,
		leaveQueue(),
		chromedp.Navigate(base+"/console/#/approvals"),
		waitText(`#live`, "live"),
		chromedp.WaitVisible(`#no-approvals`, chromedp.ByQuery))
	first := hold(300)
	second := hold(301)
	a, b := cardOf(first), cardOf(second)
	run("two held requests", 30*time.Second,
		chromedp.WaitVisible(a, chromedp.ByQuery),
		chromedp.WaitVisible(b, chromedp.ByQuery),
		// A card's live context loads once it is on screen (into a box of
		// fixed height; firstLoadHoldsStill tests that): let both load.
		waitText(a+` .live-context`, "As of"),
		chromedp.ScrollIntoView(b+` h2`, chromedp.ByQuery),
		waitText(b+` .live-context`, "As of"))

	// The owner points at the second card; the first is rejected through
	// the owner API, and a new hold arrives.
	var before float64
	run("point at the second card", 20*time.Second,
		hoverOver(b+` h2`),
		chromedp.Poll(fmt.Sprintf(`document.querySelector(%q).matches(':hover')`, b), nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Poll(`!((document.querySelector('#approvals-pending') || {}).textContent || '').includes('more')`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		top(b, &before))
	decideElsewhere(t, base, ownerToken, first, "reject", "decided in another console")
	third := hold(302)
	c := cardOf(third)
	run("both changes reach the page", 30*time.Second,
		chromedp.Poll(fmt.Sprintf(`(() => {
			const a = document.querySelector(%q), c = document.querySelector(%q);
			return (!a || a.classList.contains('stale')) && (!!c || ((document.querySelector('#approvals-pending') || {}).textContent || '').includes('1 more'));
		})()`, a, c), nil, chromedp.WithPollingTimeout(20*time.Second)))
	var held struct {
		Top                       float64
		First, Stale, Disabled    bool
		Third                     bool
		FirstSays, Line, ShowThem string
	}
	run("read the queue", 10*time.Second, chromedp.Evaluate(fmt.Sprintf(`(() => {
		const a = document.querySelector(%q), b = document.querySelector(%q), c = document.querySelector(%q);
		const line = document.querySelector('#approvals-pending');
		const show = line && line.querySelector('button');
		return {
			top: b.getBoundingClientRect().top,
			first: !!a, stale: !!a && a.classList.contains('stale'),
			disabled: !!a && [...a.querySelectorAll('button.approve, button.reject')].every(x => x.disabled),
			third: !!c,
			firstSays: a ? a.querySelector('.card-state').textContent : '',
			line: line ? line.textContent : '<no line above the queue>',
			showThem: show && getComputedStyle(show).visibility === 'visible' ? show.textContent : '',
		};
	})()`, a, b, c), &held))
	if held.Top != before {
		t.Errorf("with the pointer on the second card, the first decided elsewhere and a new hold arriving, the card moved from %.1f to %.1f px", before, held.Top)
	}
	if held.Third {
		t.Error("a new hold was inserted into the queue while the pointer was over it")
	}
	if !held.First || !held.Stale || !held.Disabled || !strings.Contains(held.FirstSays, "rejected elsewhere") {
		t.Errorf("the card rejected elsewhere: present %v, marked stale %v, buttons disabled %v, says %q; want it kept in place, marked, disabled and saying so",
			held.First, held.Stale, held.Disabled, held.FirstSays)
	}
	if !strings.Contains(held.Line, "1 more held request will appear") || held.ShowThem != "Show them" {
		t.Errorf("the line above the queue says %q with button %q, want the count of held requests waiting and Show them", held.Line, held.ShowThem)
	}
	run("leave the queue", 30*time.Second,
		leaveQueue(),
		chromedp.WaitVisible(c, chromedp.ByQuery),
		chromedp.WaitNotPresent(a, chromedp.ByQuery),
		chromedp.Poll(`!((document.querySelector('#approvals-pending') || {}).textContent || '').includes('more')`, nil, chromedp.WithPollingTimeout(10*time.Second)))

	// The owner approves the second card in the page: it stays, marked,
	// and the third does not move up under the pointer, so a second click
	// where the first landed meets a disabled button of the same card.
	var third0, third1 float64
	var x, y float64
	var under string
	run("approve the second card", 30*time.Second,
		chromedp.ScrollIntoView(c+` h2`, chromedp.ByQuery),
		waitText(c+` .live-context`, "As of"),
		chromedp.ScrollIntoView(b+` button.approve`, chromedp.ByQuery),
		top(c, &third0),
		chromedp.SendKeys(b+` textarea`, "agreed", chromedp.ByQuery),
		chromedp.Click(b+` button.approve`, chromedp.ByQuery),
		chromedp.Poll(fmt.Sprintf(`(() => { const b = document.querySelector(%q); return !b || b.classList.contains('stale'); })()`, b), nil, chromedp.WithPollingTimeout(20*time.Second)),
		top(c, &third1),
		chromedp.Evaluate(fmt.Sprintf(`(() => { const r = document.querySelector(%q).getBoundingClientRect(); return r.left + r.width / 2; })()`, b+` button.approve`), &x),
		chromedp.Evaluate(fmt.Sprintf(`(() => { const r = document.querySelector(%q).getBoundingClientRect(); return r.top + r.height / 2; })()`, b+` button.approve`), &y))
	run("what a second click would meet", 10*time.Second, chromedp.Evaluate(fmt.Sprintf(`(() => {
		const e = document.elementFromPoint(%f, %f);
		const card = e && e.closest('article.approval');
		return (card ? card.getAttribute('data-approval-id') : '') + (e && e.disabled ? ' disabled' : ' enabled') + ' ' + (card ? card.querySelector('.card-state').textContent : '');
	})()`, x, y), &under))
	if third1 != third0 {
		t.Errorf("after the owner approved the card above it, the next card moved from %.1f to %.1f px", third0, third1)
	}
	if want := second + " disabled Approved by you"; !strings.HasPrefix(under, want) {
		t.Errorf("a second click where the owner approved would meet %q, want %q…", under, want)
	}
	if state, _ := approvalOf(t, base, ownerToken, second); state != "APPROVAL_STATE_APPROVED" {
		t.Errorf("the approval approved in the page is %s", state)
	}
	run("leave the queue again", 30*time.Second,
		leaveQueue(),
		chromedp.WaitNotPresent(b, chromedp.ByQuery),
		chromedp.WaitVisible(c, chromedp.ByQuery))
	decideElsewhere(t, base, ownerToken, third, "reject", "test over")
}

// firstLoadHoldsStill: a card's live context (balance and budget, a rail
// read) loading for the first time does not move the cards below it. The
// read starts when the card comes on screen and answers when the rail does,
// so an agent that opens holds sorting above the card the owner is reading
// chooses when the cards above it load; were a card taller loaded than not,
// each load would move the owner's card, and its Approve button, under the
// pointer. Here the page's read of the upper card's context is held in the
// browser (the DevTools Fetch domain) until the pointer rests on the lower
// card, so the order is certain, not a race with the rail.
func firstLoadHoldsStill(t *testing.T, ctx context.Context, run func(string, time.Duration, ...chromedp.Action), holdLine, base, ownerToken string) {
	cardOf := func(id string) string { return fmt.Sprintf(`article.approval[data-approval-id=%q]`, id) }
	contextURL := regexp.MustCompile(`/v1/approvals/(apr_[a-z0-9]+)$`)
	// Every GET of an approval's context waits in the browser until the
	// test releases that approval; any other request goes on at once.
	var mu sync.Mutex
	paused := map[string][]fetch.RequestID{}
	released := map[string]bool{}
	all := false
	resume := func(id fetch.RequestID) {
		go func() { _ = chromedp.Run(ctx, fetch.ContinueRequest(id)) }()
	}
	chromedp.ListenTarget(ctx, func(ev any) {
		e, ok := ev.(*fetch.EventRequestPaused)
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		m := contextURL.FindStringSubmatch(e.Request.URL)
		if all || m == nil || e.Request.Method != http.MethodGet || released[m[1]] {
			resume(e.RequestID)
			return
		}
		paused[m[1]] = append(paused[m[1]], e.RequestID)
	})
	release := func(id string) {
		mu.Lock()
		defer mu.Unlock()
		released[id] = true
		for _, r := range paused[id] {
			resume(r)
		}
		delete(paused, id)
	}
	waiting := func(id string) bool {
		mu.Lock()
		defer mu.Unlock()
		return len(paused[id]) > 0
	}

	// A window tall enough for both cards unscrolled: Chromium's scroll
	// anchoring, which would hide a move above the screen, does not act at
	// the top of the page (nor does every browser have it).
	run("the queue, empty, on a tall window", 30*time.Second,
		leaveQueue(),
		chromedp.WaitVisible(`#no-approvals`, chromedp.ByQuery),
		chromedp.EmulateViewport(1280, 2000),
		chromedp.Evaluate(`window.scrollTo(0, 0), true`, nil),
		fetch.Enable().WithPatterns([]*fetch.RequestPattern{{URLPattern: "*/v1/approvals/apr_*", RequestStage: fetch.RequestStageRequest}}))
	first := holdRefund(t, holdLine, base, ownerToken, 304)
	second := holdRefund(t, holdLine, base, ownerToken, 305)
	var firstAbove bool
	run("both cards, neither context loaded", 30*time.Second,
		chromedp.WaitVisible(cardOf(first), chromedp.ByQuery),
		chromedp.WaitVisible(cardOf(second), chromedp.ByQuery),
		chromedp.Evaluate(fmt.Sprintf(`!!(document.querySelector(%q).compareDocumentPosition(document.querySelector(%q)) & Node.DOCUMENT_POSITION_FOLLOWING)`,
			cardOf(first), cardOf(second)), &firstAbove))
	upper, lower := first, second // the earlier hold expires first, so sorts first
	if !firstAbove {
		upper, lower = second, first
	}
	u, l := cardOf(upper), cardOf(lower)
	if !wait.Until(20*time.Second, func() bool { return waiting(upper) }) {
		t.Fatal("the page never asked for the upper card's live context")
	}
	release(lower)
	var before struct {
		Top, ScrollY float64
		Upper        string
	}
	run("point at the lower card, its context loaded", 30*time.Second,
		waitText(l+` .live-context`, "As of"),
		hoverOver(l+` h2`),
		chromedp.Poll(fmt.Sprintf(`document.querySelector(%q).matches(':hover')`, l), nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Evaluate(fmt.Sprintf(`(() => {
			const u = document.querySelector(%q), l = document.querySelector(%q);
			return { top: l.getBoundingClientRect().top, scrollY: window.scrollY, upper: u.querySelector('.live-context').textContent };
		})()`, u, l), &before))
	if before.ScrollY != 0 || strings.Contains(before.Upper, "As of") {
		t.Fatalf("before the upper card's context loads: page scrolled %.0f px, upper context %q; want unscrolled, not loaded", before.ScrollY, before.Upper)
	}
	release(upper)
	var after struct {
		Top           float64
		Hovered       bool
		Shown, Inside bool
	}
	run("the upper card's context loads", 30*time.Second,
		waitText(u+` .live-context`, "As of"),
		chromedp.Evaluate(fmt.Sprintf(`(() => {
			const l = document.querySelector(%q);
			const box = l.querySelector('.live-context').getBoundingClientRect();
			const line = l.querySelector('.live-context .refundable');
			const r = line ? line.getBoundingClientRect() : null;
			return {
				top: l.getBoundingClientRect().top, hovered: l.matches(':hover'),
				shown: !!line, inside: !!r && r.top >= box.top && r.bottom <= box.bottom,
			};
		})()`, l), &after))
	if after.Top != before.Top {
		t.Errorf("with the pointer on the lower card, the first load of the upper card's live context moved it from %.1f to %.1f px", before.Top, after.Top)
	}
	if !after.Hovered {
		t.Error("the pointer is no longer over the lower card after the upper card's context loaded")
	}
	if !after.Shown || !after.Inside {
		t.Errorf("the hovered card's own refundable balance: present %v, shown unscrolled in its box %v; want both", after.Shown, after.Inside)
	}

	mu.Lock()
	all = true
	for id, rs := range paused {
		for _, r := range rs {
			resume(r)
		}
		delete(paused, id)
	}
	mu.Unlock()
	run("back to a laptop's window", 20*time.Second,
		fetch.Disable(),
		leaveQueue(),
		chromedp.EmulateViewport(1280, 900))
	decideElsewhere(t, base, ownerToken, upper, "reject", "test over")
	decideElsewhere(t, base, ownerToken, lower, "reject", "test over")
	run("the queue, empty again", 30*time.Second,
		chromedp.WaitNotPresent(u, chromedp.ByQuery),
		chromedp.WaitNotPresent(l, chromedp.ByQuery))
}

// holdRefund opens a hold for a refund delta minor units smaller than the
// demo's and returns its approval id.
func holdRefund(t *testing.T, holdLine, base, ownerToken string, delta int64) string {
	t.Helper()
	before := map[string]bool{}
	for _, id := range pendingApprovals(t, base, ownerToken) {
		before[id] = true
	}
	form := curlForm(t, holdLine)
	form.Set("amount", fmt.Sprint(atoi(t, form.Get("amount"))-delta))
	r := curlRequest(t, holdLine)
	r.Body, r.ContentLength = io.NopCloser(strings.NewReader(form.Encode())), int64(len(form.Encode()))
	if status, h, body := send(t, r); h.Get("X-Countersign-Verdict") != "HOLD" {
		t.Fatalf("a refund %d less answered %d %q: %s", delta, status, h.Get("X-Countersign-Verdict"), body)
	}
	for _, id := range pendingApprovals(t, base, ownerToken) {
		if !before[id] {
			return id
		}
	}
	t.Fatalf("a refund %d less was held but no new approval is pending", delta)
	return ""
}

// leaveQueue moves the pointer off the page's content (to its top left
// corner, left of the main column) and takes focus out of it, as an owner
// does when leaving the approvals queue.
func leaveQueue() chromedp.Action {
	return chromedp.Tasks{
		chromedp.MouseEvent(input.MouseMoved, 1, 1),
		chromedp.Evaluate(`document.activeElement && document.activeElement.blur(), true`, nil),
	}
}

// hoverOver moves the pointer onto the middle of sel, scrolled into view.
func hoverOver(sel string) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		var at []float64
		if err := chromedp.Run(ctx,
			chromedp.ScrollIntoView(sel, chromedp.ByQuery),
			chromedp.Evaluate(fmt.Sprintf(`(() => { const r = document.querySelector(%q).getBoundingClientRect(); return [r.left + r.width / 2, r.top + r.height / 2]; })()`, sel), &at)); err != nil {
			return err
		}
		return chromedp.MouseEvent(input.MouseMoved, at[0], at[1]).Do(ctx)
	})
}

// decideElsewhere approves or rejects an approval through the owner REST
// API with the owner token, as another console or a script would.
func decideElsewhere(t *testing.T, base, token, id, verb, note string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/approvals/"+id+":"+verb, strings.NewReader(fmt.Sprintf(`{"note":%q}`, note)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	if status, _, body := send(t, req); status != http.StatusOK {
		t.Fatalf("%s %s through the owner API: %d %s", verb, id, status, body)
	}
}
