package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/countersign/countersign/internal/console"
	"github.com/countersign/countersign/internal/ledger"
	"github.com/countersign/countersign/internal/ownerauth"
	"github.com/countersign/countersign/internal/quota"
	"github.com/countersign/countersign/internal/testing/pgtest"
	"github.com/countersign/countersign/internal/testing/testclock"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.Wrap(m, func(ctx context.Context, url string) error {
		_, err := ledger.Migrate(ctx, url, nil)
		return err
	}), pgtest.IgnoreServerGoroutines())
}

// rig is a console over a real ledger, with a stand-in for the REST
// gateway behind WrapAPI that records what reached it.
type rig struct {
	t       *testing.T
	store   *ledger.Store
	auth    *ownerauth.Authenticator
	con     *console.Console
	srv     *httptest.Server
	clock   *testclock.Clock
	ownerID string
	token   string // the owner's token (cso_…)

	mu      sync.Mutex
	reached []*http.Request // requests the stand-in gateway received
}

type rigOptions struct {
	oidc     *ownerauth.Config // the Authenticator's OIDC, nil: off
	console  func(*console.Options)
	failures *quota.Failures
	api      http.Handler // replaces the stand-in gateway
	// listener is the rig server's, when its address must be known
	// before the console is made (its URL); nil: a fresh one.
	listener net.Listener
}

func newRig(t *testing.T, ro rigOptions) *rig {
	t.Helper()
	ctx := context.Background()
	store, err := ledger.Open(ctx, pgtest.NewDatabase(t), ledger.Options{ConnectTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	r := &rig{t: t, store: store, clock: testclock.New(time.Now())}
	cfg := ownerauth.Config{}
	if ro.oidc != nil {
		cfg = *ro.oidc
	}
	cfg.Now = r.clock.Now
	if r.auth, err = ownerauth.New(cfg, store); err != nil {
		t.Fatal(err)
	}
	o := console.Options{Auth: r.auth, Store: store, Now: r.clock.Now, Failures: ro.failures}
	if ro.console != nil {
		ro.console(&o)
	}
	if r.con, err = console.New(o); err != nil {
		t.Fatal(err)
	}
	owner, token, _, err := ownerauth.Bootstrap(ctx, store, "alice", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r.ownerID, r.token = owner.ID, token
	api := ro.api
	if api == nil {
		api = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			r.mu.Lock()
			r.reached = append(r.reached, req.Clone(context.Background()))
			r.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"authorization":%q}`, req.Header.Get("Authorization"))
		})
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", r.con.WrapAPI(api))
	mux.Handle("/console", r.con.Handler())
	mux.Handle("/console/", r.con.Handler())
	r.srv = httptest.NewUnstartedServer(mux)
	if ro.listener != nil {
		_ = r.srv.Listener.Close()
		r.srv.Listener = ro.listener
	}
	r.srv.Start()
	t.Cleanup(r.srv.Close)
	return r
}

// lastReached is the last request the stand-in gateway received.
func (r *rig) lastReached() *http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.reached) == 0 {
		return nil
	}
	return r.reached[len(r.reached)-1]
}

func (r *rig) reachedCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reached)
}

type resp struct {
	status int
	header http.Header
	body   string
}

func (x resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(x.body), &m); err != nil {
		t.Fatalf("not JSON: %q", x.body)
	}
	return m
}

// do sends a request; headers are name, value pairs.
func (r *rig) do(method, path, body string, headers ...string) resp {
	r.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, r.srv.URL+path, rd)
	if err != nil {
		r.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return resp{status: res.StatusCode, header: res.Header, body: string(b)}
}

var sessionCookieRE = regexp.MustCompile(`^__Host-countersign_session=(css_[a-z2-7]{52}); Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=(\d+)$`)

// sess is a console session as the browser holds it: the cookie half (the
// HttpOnly cookie) and the key half (the page's localStorage).
type sess struct{ cookie, key string }

// whole is the secret the owner API takes: "css_<cookie>.<key>".
func (s sess) whole() string { return s.cookie + "." + s.key }

// headers are the Cookie and the key header the page sends, then more.
func (s sess) headers(more ...string) []string {
	return append([]string{"Cookie", cookie(s.cookie), console.SessionKeyHeader, s.key}, more...)
}

// signIn signs in with token and returns the session and the body, which
// holds the key half (session_key) and the cookie the cookie half.
func (r *rig) signIn(token string) (sess, map[string]any) {
	r.t.Helper()
	x := r.do("POST", "/console/api/session", fmt.Sprintf(`{"token":%q}`, token), "Content-Type", "application/json")
	if x.status != 200 {
		r.t.Fatalf("sign-in = %d %s", x.status, x.body)
	}
	m := sessionCookieRE.FindStringSubmatch(x.header.Get("Set-Cookie"))
	if m == nil {
		r.t.Fatalf("sign-in cookie %q", x.header.Get("Set-Cookie"))
	}
	body := x.json(r.t)
	key, _ := body["session_key"].(string)
	if !ownerauth.ValidSessionKey(key) {
		r.t.Fatalf("sign-in body has no session key: %s", x.body)
	}
	return sess{cookie: m[1], key: key}, body
}

func cookie(secret string) string { return console.SessionCookie + "=" + secret }

// readLines reads a streamed response line by line into a channel that
// closes when the stream ends.
func readLines(body io.Reader) <-chan string {
	ch := make(chan string, 16)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(body)
		for sc.Scan() {
			ch <- sc.Text()
		}
	}()
	return ch
}
