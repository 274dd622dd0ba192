package railtest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestClient(t *testing.T) {
	type seen struct {
		method, uri, auth, custom, ua string
		body                          string
	}
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.RequestURI(), r.Header.Get("Authorization"), r.Header.Get("X-Custom"), r.Header.Get("User-Agent"), string(b)}
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()

	for _, tc := range []struct {
		name, base, path, method string
		headers                  map[string]string
		body                     []byte
		want                     seen
	}{
		{"get_with_query", srv.URL, "/v1/refunds?limit=100&payment_intent=pi_1", http.MethodGet, nil, nil,
			seen{http.MethodGet, "/v1/refunds?limit=100&payment_intent=pi_1", "Bearer sk_test_x", "", "countersign", ""}},
		{"base_with_prefix_and_slash", srv.URL + "/stripe/", "/v1/balance", http.MethodGet, map[string]string{"X-Custom": "1"}, nil,
			seen{http.MethodGet, "/stripe/v1/balance", "Bearer sk_test_x", "1", "countersign", ""}},
		{"caller_cannot_set_authorization", srv.URL, "/v1/x", http.MethodPost, map[string]string{"authorization": "Bearer agent", "User-Agent": "sdk"}, []byte("a=1"),
			seen{http.MethodPost, "/v1/x", "Bearer sk_test_x", "", "sdk", "a=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewClient(tc.base, "Bearer sk_test_x", srv.Client())
			resp, err := c.Do(context.Background(), tc.method, tc.path, tc.headers, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			if s := <-got; s != tc.want {
				t.Fatalf("server saw %+v, want %+v", s, tc.want)
			}
		})
	}
}

func TestClientRefusesNonRelativePaths(t *testing.T) {
	c := NewClient("https://api.stripe.com", "Bearer sk", &http.Client{Transport: failTransport{t}})
	for _, p := range []string{"", "v1/refunds", "//evil.example/v1", "https://evil.example/v1", "/v1/x#frag", "/v1/x\r\nHost: evil"} {
		if _, err := c.Do(context.Background(), http.MethodGet, p, nil, nil); !errors.Is(err, errPath) {
			t.Errorf("Do(%q) error = %v, want errPath", p, err)
		}
	}
}

type failTransport struct{ t *testing.T }

func (f failTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	f.t.Errorf("request sent to %s", r.URL)
	return nil, errors.New("no")
}

// TestClientDefaultDoesNotFollowRedirects: the key must not be replayed to
// wherever a redirect points.
func TestClientDefaultDoesNotFollowRedirects(t *testing.T) {
	followed := false
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { followed = true }))
	defer target.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/steal", http.StatusFound)
	}))
	defer srv.Close()
	c := NewClient(srv.URL, "Bearer sk", nil)
	resp, err := c.Do(context.Background(), http.MethodGet, "/v1/balance", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	if resp.StatusCode != http.StatusFound || followed {
		t.Fatalf("status %d, followed %v: want the 302 itself", resp.StatusCode, followed)
	}
}

func TestClientHonoursContext(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := NewClient(srv.URL, "", srv.Client()).Do(ctx, http.MethodGet, "/v1/balance", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do error = %v, want DeadlineExceeded", err)
	}
}

func TestCursorPage(t *testing.T) {
	items := make([]Listed, 5)
	for i := range items {
		items[i].ID = string(rune('a' + i))
	}
	ids := func(ls []Listed) (out []string) {
		for _, l := range ls {
			out = append(out, l.ID)
		}
		return out
	}
	for _, tc := range []struct {
		after   string
		want    []string
		hasMore bool
	}{
		{"", []string{"a", "b"}, true},
		{"b", []string{"c", "d"}, true},
		{"c", []string{"d", "e"}, false},
		{"e", nil, false},
	} {
		page, more, err := CursorPage(items, tc.after, 2)
		if err != nil || !slices.Equal(ids(page), tc.want) || more != tc.hasMore {
			t.Errorf("CursorPage(after %q) = %v, %v, %v", tc.after, ids(page), more, err)
		}
	}
	if _, _, err := CursorPage(items, "zz", 2); err == nil {
		t.Error("unknown cursor accepted")
	}
	if got := ids(OffsetPage(items, 3, 10)); !slices.Equal(got, []string{"d", "e"}) {
		t.Errorf("OffsetPage = %v", got)
	}
	if got := OffsetPage(items, 9, 10); got != nil {
		t.Errorf("OffsetPage past the end = %v", got)
	}
}

// TestStampLabelIsTheStampAlone: the fuzz targets' check refuses a label
// that is where a rail carries the stamp, and only that; an agent's key
// that merely contains the stamp's name is a label like any other.
func TestStampLabelIsTheStampAlone(t *testing.T) {
	for name, want := range map[string]bool{
		"metadata[countersign_sik]":  true,
		"notes.countersign_sik":      true,
		"metadata.countersign_sik":   true,
		"metadata[0countersign_sik]": false,
		"metadata[countersign_sik0]": false,
		"notes.a.countersign_sik":    false,
		"notes.countersign_sik.a":    false,
		"countersign_sik":            false,
		"description":                false,
	} {
		if got := isStampLabel(name); got != want {
			t.Errorf("isStampLabel(%q) = %v, want %v", name, got, want)
		}
	}
}
