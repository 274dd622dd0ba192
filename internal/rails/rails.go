// Package rails holds the configured rail accounts: which adapter speaks
// for which host, where Countersign's own read-only calls go, and the rail's
// secret key, read from a mounted file that only Countersign can read (C1).
package rails

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/countersign/countersign/internal/rail"
	"github.com/countersign/countersign/internal/rail/mcp"
	"github.com/countersign/countersign/internal/sik"
)

// AccountConfig is one rail account in the rails file.
type AccountConfig struct {
	// Account is the rail account id Countersign keys intents by.
	Account string `json:"account"`
	// Rail is "stripe" or "razorpay".
	Rail string `json:"rail"`
	// Hosts are the API hosts whose calls this account guards.
	Hosts []string `json:"hosts"`
	// BaseURL is where the rail's API is (default https://<first host>).
	BaseURL string `json:"base_url,omitempty"`
	// KeyFile holds the rail's secret key: Stripe "sk_…", Razorpay
	// "key_id:key_secret".
	KeyFile string `json:"key_file"`
	// MCP, when set, says the hosts are a payment MCP server for this
	// rail (streamable HTTP); reads of referents and listings still go to
	// the rail's REST API at BaseURL.
	MCP *MCPConfig `json:"mcp,omitempty"`
	// PayoutAccountNumbers, on a razorpay account, are the RazorpayX
	// account numbers its payouts may leave from (a payout's
	// account_number: the business's current account, or its RazorpayX
	// Lite customer identifier). A payout from any other is refused before
	// any rail read. Unset, the agent chooses the source account
	// (payoutaccounts.go).
	PayoutAccountNumbers []string `json:"payout_account_numbers,omitempty"`
}

// MCPConfig selects an MCP server's tool mapping.
type MCPConfig struct {
	// Preset is the tool mapping to start from: "stripe" (Stripe's agent
	// toolkit) or "razorpay" (razorpay-mcp-server).
	Preset string `json:"preset"`
	// Endpoint is the streamable HTTP path (default /mcp).
	Endpoint string `json:"endpoint,omitempty"`
	// Metadata names the argument of the money-moving tools that stores
	// key/value pairs on the created entity, where the stamp goes (e.g.
	// "metadata" for a Stripe server whose create_refund takes it). Without
	// one, ambiguous outcomes cannot be reconciled by listing (docs/mcp.md).
	Metadata string `json:"metadata,omitempty"`
	// BaseURL is where Countersign itself reaches the MCP server for its
	// read-only tools/list (G6's tool-description pins), with the key it
	// holds; default https://<first host>. The endpoint is appended.
	BaseURL string `json:"base_url,omitempty"`
}

// File is the rails configuration file.
type File struct {
	Rails []AccountConfig `json:"rails"`
}

// Account is a configured, loaded rail account.
type Account struct {
	ID      string
	Rail    sik.Rail
	Hosts   []string
	BaseURL string
	Adapter rail.Adapter
	Client  rail.Client
	// ToolClient reaches the MCP server for Countersign's own reads of its
	// tool list (nil off MCP).
	ToolClient rail.Client
	auth       string
	// payoutAccounts are the source accounts a payout may name (nil: any).
	payoutAccounts map[string]bool
}

// AuthHeader is the outbound Authorization value carrying the rail key.
// It is set on ALLOW and never logged or stored.
func (a *Account) AuthHeader() string { return a.auth }

// Registry finds rail accounts by id and by host.
type Registry struct {
	byID   map[string]*Account
	byHost map[string]*Account
	order  []*Account
}

// Adapters maps a rail name to its adapter constructor.
type Adapters map[sik.Rail]func() rail.Adapter

var accountRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

// Option changes how New and Load check a rails file.
type Option func(*options)

type options struct {
	// inAgentPod: loopback is the agent's too (InAgentPod).
	inAgentPod bool
}

// InAgentPod says the process runs in the agent's pod (countersign serve
// --in-agent-pod, as the injector runs it): the agent shares its loopback,
// so an http base_url is refused even on a loopback address, where
// whatever the agent listens on would receive the rail key.
func InAgentPod() Option { return func(o *options) { o.inAgentPod = true } }

// Load reads the rails file at path and every key file it names.
func Load(path string, adapters Adapters, hc *http.Client, opts ...Option) (*Registry, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rails file: %w", err)
	}
	var f File
	if err := yaml.UnmarshalStrict(raw, &f); err != nil {
		return nil, fmt.Errorf("rails file %s: %w", path, err)
	}
	return New(f, adapters, hc, opts...)
}

// New builds a registry from a parsed configuration.
func New(f File, adapters Adapters, hc *http.Client, opts ...Option) (*Registry, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if hc == nil {
		hc = defaultHTTPClient()
	}
	if hc.CheckRedirect == nil {
		c := *hc
		c.CheckRedirect = noRedirects
		hc = &c
	}
	r := &Registry{byID: map[string]*Account{}, byHost: map[string]*Account{}}
	var errs []error
	for i, c := range f.Rails {
		acct, err := load(c, adapters, hc, o)
		if err != nil {
			errs = append(errs, fmt.Errorf("rails[%d] (%s): %w", i, c.Account, err))
			continue
		}
		if _, dup := r.byID[acct.ID]; dup {
			errs = append(errs, fmt.Errorf("rails[%d]: account %q is configured twice", i, acct.ID))
			continue
		}
		r.byID[acct.ID] = acct
		r.order = append(r.order, acct)
		for _, h := range acct.Hosts {
			if other, dup := r.byHost[h]; dup {
				errs = append(errs, fmt.Errorf("rails[%d]: host %q already belongs to %s", i, h, other.ID))
				continue
			}
			r.byHost[h] = acct
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return r, nil
}

func load(c AccountConfig, adapters Adapters, hc *http.Client, o options) (*Account, error) {
	if !accountRE.MatchString(c.Account) {
		return nil, fmt.Errorf("account %q must be 1–128 of [A-Za-z0-9_.:-]", c.Account)
	}
	mk, ok := adapters[sik.Rail(c.Rail)]
	if !ok {
		return nil, fmt.Errorf("rail %q has no adapter (known: stripe, razorpay)", c.Rail)
	}
	if len(c.Hosts) == 0 {
		return nil, errors.New("hosts is empty")
	}
	hosts := make([]string, len(c.Hosts))
	for i, h := range c.Hosts {
		hosts[i] = normalizeHost(h)
	}
	base := c.BaseURL
	if base == "" {
		base = "https://" + hosts[0]
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("base_url %q must be an http(s) URL", base)
	}
	if err := keyOverTLS("base_url", u, o); err != nil {
		return nil, err
	}
	if c.KeyFile == "" {
		return nil, errors.New("key_file is required: the rail key lives in a mounted file, never in configuration")
	}
	keyRaw, err := os.ReadFile(c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("key_file: %w", err)
	}
	key := strings.TrimSpace(string(keyRaw))
	if key == "" {
		return nil, fmt.Errorf("key_file %s is empty", c.KeyFile)
	}
	var auth, mcpAuth string
	switch sik.Rail(c.Rail) {
	case sik.RailRazorpay:
		if !strings.Contains(key, ":") {
			return nil, fmt.Errorf("key_file %s: a Razorpay key is key_id:key_secret", c.KeyFile)
		}
		auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(key))
		// razorpay-mcp-server's HTTP mode takes the pair as a bearer token.
		mcpAuth = "Bearer " + base64.StdEncoding.EncodeToString([]byte(key))
	default:
		auth = "Bearer " + key
		mcpAuth = auth
	}
	a := &Account{ID: c.Account, Rail: sik.Rail(c.Rail), Hosts: hosts, BaseURL: strings.TrimRight(base, "/"), Adapter: mk(), auth: auth}
	if a.payoutAccounts, err = payoutAccounts(c); err != nil {
		return nil, err
	}
	a.Client = &httpClient{base: a.BaseURL, auth: auth, hc: hc}
	if c.MCP != nil {
		ad, err := mcpAdapter(*c.MCP, a.Rail, a.Adapter)
		if err != nil {
			return nil, fmt.Errorf("mcp: %w", err)
		}
		// Calls go to the MCP server with its credential form; the REST
		// client above keeps the rail's own for reads.
		a.Adapter, a.auth = ad, mcpAuth
		mbase := c.MCP.BaseURL
		if mbase == "" {
			mbase = "https://" + hosts[0]
		}
		mu, err := url.Parse(mbase)
		if err != nil || (mu.Scheme != "https" && mu.Scheme != "http") || mu.Host == "" || (mu.Path != "" && mu.Path != "/") || mu.RawQuery != "" {
			return nil, fmt.Errorf("mcp: base_url %q must be an http(s) URL without a path (the endpoint is appended)", mbase)
		}
		if err := keyOverTLS("mcp: base_url", mu, o); err != nil {
			return nil, err
		}
		a.ToolClient = &httpClient{base: strings.TrimRight(mbase, "/"), auth: mcpAuth, hc: hc}
	}
	return a, nil
}

// keyOverTLS refuses a plain http URL off this machine: every call to it
// carries the rail's secret key. http stays for a mock rail on a loopback
// address (tests, `countersign dev`), except in the agent's pod, whose
// loopback is the agent's as well: there an http URL on 127.0.0.1 reaches
// whatever the agent listens on, and only https (the rail's certificate)
// tells the rail from the agent.
func keyOverTLS(field string, u *url.URL, o options) error {
	if u.Scheme != "http" {
		return nil
	}
	if o.inAgentPod {
		return fmt.Errorf("%s %q is http: this process runs in the agent's pod (in-agent-pod), whose loopback and /etc/hosts the agent shares, "+
			"so whatever answers there may be the agent, and would receive the rail's secret key; use https", field, u.Redacted())
	}
	if isLoopbackHost(u.Hostname()) {
		return nil
	}
	return fmt.Errorf("%s %q is http to %s, which is not a loopback address (127.0.0.0/8, ::1, localhost): "+
		"the rail's secret key would cross the network unencrypted; use https", field, u.Redacted(), u.Hostname())
}

// isLoopbackHost reports whether host is localhost or a loopback address.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// normalizeHost lower-cases and drops a default port.
func normalizeHost(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	if host, port, err := net.SplitHostPort(h); err == nil && (port == "443" || port == "80") {
		return host
	}
	return h
}

// ByID returns the account with id.
func (r *Registry) ByID(id string) (*Account, bool) {
	if r == nil {
		return nil, false
	}
	a, ok := r.byID[id]
	return a, ok
}

// ByHost returns the account guarding host.
func (r *Registry) ByHost(host string) (*Account, bool) {
	if r == nil {
		return nil, false
	}
	a, ok := r.byHost[normalizeHost(host)]
	return a, ok
}

// Accounts lists the accounts in configuration order.
func (r *Registry) Accounts() []*Account {
	if r == nil {
		return nil
	}
	return r.order
}

// Idle connections kept to the rails (MaxIdleConnsPerHost per rail host).
// http.DefaultTransport keeps 2 per host, so with more than 2 decisions
// reading one rail at once, every other read opened a new connection (in
// production a TCP and TLS handshake to the rail, before the answer) and
// left one behind in TIME_WAIT. 64 covers the decisions one process runs at
// once (its ledger pool is 32) with room for the reconciler's listings.
const (
	railIdleConnsPerHost = 64
	railIdleConns        = 256
	railTimeout          = 15 * time.Second
)

// defaultHTTPClient is the client of the rail reads when the caller names
// none: http.DefaultTransport's settings (proxy from the environment,
// dial and TLS handshake timeouts, HTTP/2 where the rail offers it) with
// enough idle connections kept for concurrent decisions.
func defaultHTTPClient() *http.Client {
	t := &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true}
	if d, ok := http.DefaultTransport.(*http.Transport); ok {
		t = d.Clone()
	}
	t.MaxIdleConnsPerHost, t.MaxIdleConns = railIdleConnsPerHost, railIdleConns
	return &http.Client{Timeout: railTimeout, Transport: t, CheckRedirect: noRedirects}
}

// noRedirects answers a rail's redirect with the redirect itself, which the
// adapters read as a failed read (fail closed). Following it would send the
// request again, with the rail's key when only the port or the scheme
// changed (Go drops Authorization only for another host name), and would
// take another server's answer for the rail's.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// httpClient is the production rail.Client: the rail's base URL plus its key.
type httpClient struct {
	base string
	auth string
	hc   *http.Client
}

func (c *httpClient) Do(ctx context.Context, method, path string, headers map[string]string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Authorization", c.auth)
	return c.hc.Do(req)
}

// mcpAdapter builds the MCP adapter of an account from a preset.
func mcpAdapter(c MCPConfig, r sik.Rail, underlying rail.Adapter) (rail.Adapter, error) {
	var cfg mcp.Config
	switch c.Preset {
	case "stripe":
		cfg = mcp.StripeDefaults()
	case "razorpay":
		cfg = mcp.RazorpayDefaults()
	default:
		return nil, fmt.Errorf("preset %q is not stripe or razorpay", c.Preset)
	}
	if cfg.Rail != r {
		return nil, fmt.Errorf("preset %q does not match rail %q", c.Preset, r)
	}
	cfg.Underlying = underlying
	if c.Endpoint != "" {
		cfg.Endpoint = c.Endpoint
	}
	if c.Metadata != "" {
		for name, t := range cfg.Tools {
			t.Metadata = c.Metadata
			cfg.Tools[name] = t
		}
	}
	return mcp.New(cfg)
}
