package mockrail

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// rail is a Server on an httptest listener, with a manual clock and
// sequential ids.
type rail struct {
	t      *testing.T
	srv    *Server
	ts     *httptest.Server
	clock  *ManualClock
	client *http.Client
}

func newRail(t *testing.T, opts ...Option) *rail {
	t.Helper()
	clock := NewManualClock(t0)
	srv, err := New(append([]Option{WithClock(clock), WithIDs(SequentialIDs())}, opts...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ts := httptest.NewServer(srv)
	// No keep-alive: Go's Transport silently retries a replayable request
	// (one with an Idempotency-Key) whose reused connection dies, which
	// would hide the faults under test.
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(func() {
		srv.Close()
		ts.Close()
		tr.CloseIdleConnections()
	})
	return &rail{t: t, srv: srv, ts: ts, clock: clock, client: &http.Client{Transport: tr}}
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (x resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(x.body, &m); err != nil {
		t.Fatalf("response is not a JSON object: %v: %s", err, x.body)
	}
	return m
}

// field walks a JSON object by keys.
func (x resp) field(t *testing.T, keys ...string) any {
	t.Helper()
	var v any = x.json(t)
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%v: not an object at %q in %s", keys, k, x.body)
		}
		v = m[k]
	}
	return v
}

func (x resp) str(t *testing.T, keys ...string) string {
	t.Helper()
	s, _ := x.field(t, keys...).(string)
	return s
}

func (x resp) num(t *testing.T, keys ...string) int64 {
	t.Helper()
	f, ok := x.field(t, keys...).(float64)
	if !ok {
		t.Fatalf("%v is not a number in %s", keys, x.body)
	}
	return int64(f)
}

func (r *rail) send(ctx context.Context, method, path string, body []byte, hdr http.Header) (resp, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.ts.URL+path, rd)
	if err != nil {
		return resp{}, err
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	res, err := r.client.Do(req)
	if err != nil {
		return resp{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return resp{res.StatusCode, res.Header, b}, err
}

func (r *rail) must(method, path string, body []byte, hdr http.Header) resp {
	r.t.Helper()
	x, err := r.send(context.Background(), method, path, body, hdr)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, path, err)
	}
	return x
}

func stripeHeader(key, idem string) http.Header {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+key)
	h.Set("Content-Type", "application/x-www-form-urlencoded")
	if idem != "" {
		h.Set("Idempotency-Key", idem)
	}
	return h
}

func rzpHeader(id, secret string, kv ...string) http.Header {
	h := http.Header{}
	req, _ := http.NewRequest("GET", "/", nil)
	req.SetBasicAuth(id, secret)
	h.Set("Authorization", req.Header.Get("Authorization"))
	h.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			h.Set(kv[i], kv[i+1])
		}
	}
	return h
}

// stripe sends a Stripe request with the default key: form is the body of a
// POST or the query of a GET.
func (r *rail) stripe(method, path string, form url.Values, idem string) resp {
	r.t.Helper()
	return r.must(method, stripePath(method, path, form), stripeBody(method, form), stripeHeader(DefaultStripeKey, idem))
}

func stripePath(method, path string, form url.Values) string {
	if method == http.MethodGet && len(form) > 0 {
		return path + "?" + form.Encode()
	}
	return path
}

func stripeBody(method string, form url.Values) []byte {
	if method == http.MethodGet {
		return nil
	}
	return []byte(form.Encode())
}

// rzp sends a Razorpay request with the default key pair; kv are extra
// header name/value pairs.
func (r *rail) rzp(method, path string, body any, kv ...string) resp {
	r.t.Helper()
	return r.must(method, path, rzpBody(body), rzpHeader(DefaultRazorpayKeyID, DefaultRazorpayKeySecret, kv...))
}

func rzpBody(body any) []byte {
	switch b := body.(type) {
	case nil:
		return nil
	case string:
		return []byte(b)
	default:
		return mustJSON(b)
	}
}

func form(kv ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Add(kv[i], kv[i+1])
	}
	return v
}

func wantStatus(t *testing.T, x resp, status int) {
	t.Helper()
	if x.status != status {
		t.Fatalf("status %d, want %d: %s", x.status, status, x.body)
	}
}

func wantContains(t *testing.T, x resp, sub string) {
	t.Helper()
	if !strings.Contains(string(x.body), sub) {
		t.Fatalf("body does not contain %q: %s", sub, x.body)
	}
}

// ids returns the ids in a Stripe list's data or a Razorpay collection's
// items.
func ids(t *testing.T, x resp) []string {
	t.Helper()
	var l struct {
		Data  []struct{ ID string } `json:"data"`
		Items []struct{ ID string } `json:"items"`
	}
	if err := json.Unmarshal(x.body, &l); err != nil {
		t.Fatalf("not a list: %v: %s", err, x.body)
	}
	var out []string
	for _, d := range append(l.Data, l.Items...) {
		out = append(out, d.ID)
	}
	return out
}

func waitCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
