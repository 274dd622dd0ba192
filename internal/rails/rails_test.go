package rails

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/stripe"
	"github.com/countersign/countersign/internal/sik"
)

// TestMCPBaseURL: an MCP account gets a client for Countersign's own
// tools/list, at mcp.base_url or https://<first host>; a base_url with a
// path, query or another scheme is refused (the endpoint is appended).
func TestMCPBaseURL(t *testing.T) {
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("sk_test_x"), 0o600); err != nil {
		t.Fatal(err)
	}
	adapters := Adapters{sik.RailStripe: func() rail.Adapter { return stripe.New() }}
	for _, tc := range []struct {
		name, baseURL, wantBase, wantErr string
	}{
		{name: "default", wantBase: "https://mcp.stripe.local"},
		{name: "explicit", baseURL: "http://127.0.0.1:9000/", wantBase: "http://127.0.0.1:9000"},
		{name: "path", baseURL: "https://mcp.example/mcp", wantErr: "without a path"},
		{name: "query", baseURL: "https://mcp.example?x=1", wantErr: "without a path"},
		{name: "scheme", baseURL: "ftp://mcp.example", wantErr: "http(s) URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := New(File{Rails: []AccountConfig{{Account: "acct_mcp", Rail: "stripe", Hosts: []string{"mcp.stripe.local"},
				BaseURL: "https://api.stripe.com", KeyFile: key, MCP: &MCPConfig{Preset: "stripe", BaseURL: tc.baseURL}}}}, adapters, nil)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("New = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			a, _ := r.ByID("acct_mcp")
			c, ok := a.ToolClient.(*httpClient)
			if !ok || c.base != tc.wantBase || c.auth != "Bearer sk_test_x" {
				t.Fatalf("ToolClient = %+v, want base %s with the account's key", a.ToolClient, tc.wantBase)
			}
			if _, ok := a.Adapter.(rail.ToolDescriber); !ok {
				t.Error("the MCP adapter does not describe tools")
			}
		})
	}
	r, err := New(File{Rails: []AccountConfig{{Account: "acct_rest", Rail: "stripe", Hosts: []string{"api.stripe.com"}, KeyFile: key}}}, adapters, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := r.ByID("acct_rest"); a.ToolClient != nil {
		t.Error("a REST account has a tool client")
	}
}

// TestConcurrentReadsReuseConnections: reads of one rail by many decisions
// at once reuse their connections. With http.DefaultTransport's two idle
// connections per host, every read past the second opened a new one (a
// TLS handshake to the rail in production): 12 rounds of 16 concurrent
// reads opened over 150 connections.
func TestConcurrentReadsReuseConnections(t *testing.T) {
	var opened atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"id":"pi_1"}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("sk_test_x"), 0o600); err != nil {
		t.Fatal(err)
	}
	adapters := Adapters{sik.RailStripe: func() rail.Adapter { return stripe.New() }}
	r, err := New(File{Rails: []AccountConfig{{Account: "acct_1", Rail: "stripe", Hosts: []string{"api.stripe.com"},
		BaseURL: srv.URL, KeyFile: key}}}, adapters, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := r.ByID("acct_1")
	const rounds, concurrent = 12, 16
	for range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, concurrent)
		for range concurrent {
			wg.Go(func() {
				resp, err := a.Client.Do(context.Background(), http.MethodGet, "/v1/payment_intents/pi_1", nil, nil)
				if err != nil {
					errs <- err
					return
				}
				_, err = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// One connection per concurrent read, and more where a read began
	// before a finished one's connection was back in the pool (the
	// transport then dials, and keeps the extra one idle): on a busy
	// machine a round or two may, but never every round.
	if limit := int64(5 * concurrent); opened.Load() > limit {
		t.Fatalf("%d rounds of %d concurrent reads opened %d connections; want them reused (at most %d)", rounds, concurrent, opened.Load(), limit)
	}
}

// TestRailRedirectIsNotFollowed: a rail's redirect is answered as it is
// (the adapters read it as a failed read). Followed, it would carry the
// rail's key to another port or scheme of the same host (Go drops
// Authorization only for another host name), and another server's answer
// would be taken for the rail's. Also when the caller brings its own
// client.
func TestRailRedirectIsNotFollowed(t *testing.T) {
	var reached atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached.Add(1)
		_, _ = w.Write([]byte(`{"id":"pi_1","amount":100000}`))
	}))
	defer other.Close()
	railSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/v1/payment_intents/pi_1", http.StatusFound)
	}))
	defer railSrv.Close()
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("sk_test_x"), 0o600); err != nil {
		t.Fatal(err)
	}
	adapters := Adapters{sik.RailStripe: func() rail.Adapter { return stripe.New() }}
	for name, hc := range map[string]*http.Client{"default client": nil, "caller's client": {}} {
		r, err := New(File{Rails: []AccountConfig{{Account: "acct_1", Rail: "stripe", Hosts: []string{"api.stripe.com"}, BaseURL: railSrv.URL, KeyFile: key}}}, adapters, hc)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := r.ByID("acct_1")
		resp, err := a.Client.Do(context.Background(), http.MethodGet, "/v1/payment_intents/pi_1", nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusFound || reached.Load() != 0 {
			t.Fatalf("%s: status %d, the redirect's target reached %d times; want the 302 itself", name, resp.StatusCode, reached.Load())
		}
	}
}

// TestPlainHTTPOnlyToLoopback: every call to base_url (and mcp.base_url)
// carries the rail's secret key, so plain http is refused unless the host
// is a loopback address, where the mock rail of tests and `countersign
// dev` listens.
func TestPlainHTTPOnlyToLoopback(t *testing.T) {
	key := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("sk_test_x"), 0o600); err != nil {
		t.Fatal(err)
	}
	adapters := Adapters{sik.RailStripe: func() rail.Adapter { return stripe.New() }}
	const refused = "which is not a loopback address (127.0.0.0/8, ::1, localhost): the rail's secret key would cross the network unencrypted; use https"
	for _, tc := range []struct {
		name, baseURL, mcpBaseURL, wantErr string
	}{
		{name: "https", baseURL: "https://api.stripe.com"},
		{name: "default https", baseURL: ""},
		{name: "ipv4 loopback", baseURL: "http://127.0.0.1:12111"},
		{name: "all of 127/8", baseURL: "http://127.8.9.10:12111"},
		{name: "ipv6 loopback", baseURL: "http://[::1]:12111"},
		{name: "localhost", baseURL: "http://localhost:12111"},
		{name: "localhost any case", baseURL: "http://LocalHost:12111"},
		{name: "mcp on loopback", baseURL: "http://127.0.0.1:12111", mcpBaseURL: "http://127.0.0.1:9000"},
		{name: "host name", baseURL: "http://api.stripe.com", wantErr: `base_url "http://api.stripe.com" is http to api.stripe.com, ` + refused},
		{name: "private address", baseURL: "http://10.0.0.7:8080", wantErr: "is http to 10.0.0.7, " + refused},
		{name: "any address", baseURL: "http://0.0.0.0:12111", wantErr: "is http to 0.0.0.0, " + refused},
		{name: "loopback look-alike", baseURL: "http://127.0.0.1.nip.io", wantErr: refused},
		{name: "localhost look-alike", baseURL: "http://localhost.example.com", wantErr: refused},
		{name: "credentials in the url are not echoed", baseURL: "http://user:hunter2@rail.example", wantErr: `"http://user:xxxxx@rail.example" is http to rail.example`},
		{name: "mcp host name", baseURL: "https://api.stripe.com", mcpBaseURL: "http://stripe-mcp.internal",
			wantErr: `mcp: base_url "http://stripe-mcp.internal" is http to stripe-mcp.internal, ` + refused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := AccountConfig{Account: "acct_1", Rail: "stripe", Hosts: []string{"api.stripe.com"}, BaseURL: tc.baseURL, KeyFile: key}
			if tc.mcpBaseURL != "" {
				c.MCP = &MCPConfig{Preset: "stripe", BaseURL: tc.mcpBaseURL}
			}
			_, err := New(File{Rails: []AccountConfig{c}}, adapters, nil)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New = %v, want an error containing %q", err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("the error shows the URL's password: %v", err)
			}
		})
	}
}

// TestInAgentPodRefusesPlainHTTPEvenToLoopback: in the agent's pod the
// agent shares loopback, so an http rail URL on 127.0.0.1 would send the
// rail key to whatever the agent listens on there (found by a review);
// with InAgentPod only https is accepted, for base_url and mcp.base_url,
// through New and Load alike.
func TestInAgentPodRefusesPlainHTTPEvenToLoopback(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "key")
	if err := os.WriteFile(key, []byte("sk_test_x"), 0o600); err != nil {
		t.Fatal(err)
	}
	adapters := Adapters{sik.RailStripe: func() rail.Adapter { return stripe.New() }}
	const refused = "is http: this process runs in the agent's pod (in-agent-pod), whose loopback and /etc/hosts the agent shares"
	for _, tc := range []struct {
		name, baseURL, mcpBaseURL, wantErr string
	}{
		{name: "https", baseURL: "https://api.stripe.com"},
		{name: "default https", baseURL: ""},
		{name: "mcp https", baseURL: "https://api.stripe.com", mcpBaseURL: "https://stripe-mcp.tools.svc"},
		{name: "ipv4 loopback", baseURL: "http://127.0.0.1:12111", wantErr: `base_url "http://127.0.0.1:12111" ` + refused},
		{name: "ipv6 loopback", baseURL: "http://[::1]:12111", wantErr: refused},
		{name: "localhost", baseURL: "http://localhost:12111", wantErr: refused},
		{name: "host name", baseURL: "http://api.stripe.com", wantErr: refused},
		{name: "mcp on loopback", baseURL: "https://api.stripe.com", mcpBaseURL: "http://127.0.0.1:9000", wantErr: `mcp: base_url "http://127.0.0.1:9000" ` + refused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := AccountConfig{Account: "acct_1", Rail: "stripe", Hosts: []string{"api.stripe.com"}, BaseURL: tc.baseURL, KeyFile: key}
			if tc.mcpBaseURL != "" {
				c.MCP = &MCPConfig{Preset: "stripe", BaseURL: tc.mcpBaseURL}
			}
			raw, err := yaml.Marshal(File{Rails: []AccountConfig{c}})
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(t.TempDir(), "rails.yaml")
			if err := os.WriteFile(file, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			for name, load := range map[string]func(...Option) error{
				"New": func(o ...Option) error {
					_, err := New(File{Rails: []AccountConfig{c}}, adapters, nil, o...)
					return err
				},
				"Load": func(o ...Option) error {
					_, err := Load(file, adapters, nil, o...)
					return err
				},
			} {
				err := load(InAgentPod())
				if tc.wantErr == "" {
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					continue
				}
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("%s = %v, want an error containing %q", name, err, tc.wantErr)
				}
				// Off the agent's pod, loopback stays open for the mock rail.
				if err := load(); strings.HasPrefix(tc.name, "ipv") || tc.name == "localhost" || tc.name == "mcp on loopback" {
					if err != nil {
						t.Fatalf("%s without InAgentPod: %v", name, err)
					}
				}
			}
		})
	}
}
