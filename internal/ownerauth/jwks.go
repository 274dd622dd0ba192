package ownerauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-jose/go-jose/v4"
)

const (
	// maxJWKSBytes bounds a JWKS document; real ones are a few KiB.
	maxJWKSBytes = 1 << 20
	// maxKeys bounds the keys kept from one JWKS (a token without a kid is
	// tried against each).
	maxKeys = 64
	// fetchTimeout bounds one JWKS download.
	fetchTimeout = 10 * time.Second
)

var (
	errKeysUnavailable = errors.New("signing keys unavailable")
	errUnknownKey      = errors.New("token signed by an unknown key")
)

// keySource serves the keys of the configured JWKS (a URL or a file). It
// reloads them when they are older than maxAge, or when a token names a key
// id they lack (the issuer rotated), but never more often than minReload, so
// tokens with made-up key ids cannot make Countersign hammer the issuer. When
// a reload fails the keys already held stay in use.
type keySource struct {
	load      func(ctx context.Context) ([]byte, error)
	now       func() time.Time
	maxAge    time.Duration
	minReload time.Duration

	current atomic.Pointer[keySet]
	mu      sync.Mutex // one reload at a time
	lastTry time.Time  // guarded by mu
}

type keySet struct {
	keys   []jose.JSONWebKey
	loaded time.Time
}

// match returns the keys a token with key id kid may be signed with: those
// with that id, or every key when the token names none.
func (s *keySet) match(kid string) []jose.JSONWebKey {
	if s == nil {
		return nil
	}
	if kid == "" {
		return s.keys
	}
	var out []jose.JSONWebKey
	for _, k := range s.keys {
		if k.KeyID == kid {
			out = append(out, k)
		}
	}
	return out
}

// candidates returns the keys to verify a token whose header names kid.
func (s *keySource) candidates(ctx context.Context, kid string) ([]jose.JSONWebKey, error) {
	now := s.now()
	if set := s.current.Load(); set != nil && now.Sub(set.loaded) < s.maxAge {
		if ks := set.match(kid); len(ks) > 0 {
			return ks, nil
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	set := s.current.Load() // another caller may have reloaded while we waited
	var loadErr error
	stale := set == nil || now.Sub(set.loaded) >= s.maxAge || len(set.match(kid)) == 0
	if stale && (s.lastTry.IsZero() || now.Sub(s.lastTry) >= s.minReload) {
		s.lastTry = now
		if fresh, err := s.reload(ctx, now); err == nil {
			set = fresh
		} else {
			loadErr = err
		}
	}
	if set == nil {
		if loadErr == nil {
			loadErr = errors.New("no successful load yet")
		}
		return nil, fmt.Errorf("%w: %w", errKeysUnavailable, loadErr)
	}
	ks := set.match(kid)
	if len(ks) == 0 {
		return nil, errUnknownKey
	}
	return ks, nil
}

// reload loads, parses and publishes the key set. Callers hold s.mu.
func (s *keySource) reload(ctx context.Context, now time.Time) (*keySet, error) {
	raw, err := s.load(ctx)
	if err != nil {
		return nil, err
	}
	keys, err := parseJWKS(raw)
	if err != nil {
		return nil, err
	}
	set := &keySet{keys: keys, loaded: now}
	s.current.Store(set)
	return set, nil
}

// parseJWKS keeps the public signature keys of a JWKS document. Keys it
// cannot use (unknown types, encryption keys, private or symmetric material,
// which a published JWKS never carries) are skipped rather than failing the
// whole set, as issuers add key types over time.
func parseJWKS(raw []byte) ([]jose.JSONWebKey, error) {
	var doc struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("JWKS is not a JSON key set: %w", err)
	}
	var keys []jose.JSONWebKey
	for _, r := range doc.Keys {
		var k jose.JSONWebKey
		if err := k.UnmarshalJSON(r); err != nil || !k.Valid() || !k.IsPublic() {
			continue
		}
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		keys = append(keys, k)
		if len(keys) == maxKeys {
			break
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("JWKS holds no usable public signing key")
	}
	return keys, nil
}

// fileLoader reads a JWKS file (a mounted secret or config map, which the
// orchestrator may rewrite in place when keys rotate).
func fileLoader(path string) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("JWKS file: %w", err)
		}
		defer func() { _ = f.Close() }() // read-only: nothing to flush
		return readLimited(f, "JWKS file")
	}
}

// urlLoader downloads a JWKS. The download is detached from the caller's
// cancellation (other callers wait on its result) but bounded in time.
func urlLoader(client *http.Client, u string) func(context.Context) ([]byte, error) {
	return func(ctx context.Context) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, fmt.Errorf("JWKS URL: %w", err)
		}
		req.Header.Set("Accept", "application/jwk-set+json, application/json")
		resp, err := client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("JWKS fetch: %w", err)
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("JWKS fetch: HTTP %d", resp.StatusCode)
		}
		return readLimited(resp.Body, "JWKS response")
	}
}

func readLimited(r io.Reader, what string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if len(b) > maxJWKSBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", what, maxJWKSBytes)
	}
	return b, nil
}

// checkJWKSURL accepts https, and plain http only to a loopback host: keys
// fetched in clear from elsewhere could be swapped on the way, and whoever
// swaps them can sign in as any owner.
func checkJWKSURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("owner-jwks-url: %w", err)
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !LoopbackHost(u.Hostname()) {
			return fmt.Errorf("owner-jwks-url must be https (plain http only to a loopback host), got %q", raw)
		}
	default:
		return fmt.Errorf("owner-jwks-url must be an https URL, got %q", raw)
	}
	if u.Host == "" {
		return fmt.Errorf("owner-jwks-url has no host: %q", raw)
	}
	return nil
}

// CheckInAgentPodURL refuses, for a process in the agent's pod, an issuer
// URL (flag names the setting) that is not https: the agent shares the
// pod's loopback, so plain http even to localhost may be answered by the
// agent, with a key set or tokens that make it an owner. nil when raw is
// https.
func CheckInAgentPodURL(flag, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	if u.Scheme != "https" {
		return fmt.Errorf("%s must be https in the agent's pod, got %q: the agent shares this pod's loopback, "+
			"so plain http, even to a loopback host, may be answered by the agent, which would then sign in as an owner", flag, raw)
	}
	return nil
}

// httpsRedirectsOnly is client (or the default client) following redirects
// to https only, for the agent's pod, where the default's allowance of
// plain http to loopback would let the agent answer.
func httpsRedirectsOnly(client *http.Client) *http.Client {
	if client == nil {
		client = defaultHTTPClient()
	}
	c := *client
	next := c.CheckRedirect
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if req.URL.Scheme != "https" {
			return fmt.Errorf("redirect to %s refused: not https, and in the agent's pod the agent may answer plain http", req.URL.Redacted())
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 { // net/http's default policy
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &c
}

// LoopbackHost reports whether h (a URL's host name) is localhost or a
// loopback address: the only hosts an issuer endpoint may be reached at over
// plain http.
func LoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.Unmap().IsLoopback()
}

// defaultHTTPClient fetches JWKS documents: bounded, and without following
// redirects to plain http.
func defaultHTTPClient() *http.Client {
	return &http.Client{
		Timeout: fetchTimeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("too many redirects")
			}
			if req.URL.Scheme != "https" && !LoopbackHost(req.URL.Hostname()) {
				return fmt.Errorf("redirect to %s refused: not https", req.URL.Redacted())
			}
			return nil
		},
		Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
			TLSHandshakeTimeout: 5 * time.Second,
			MaxIdleConns:        2,
			IdleConnTimeout:     time.Minute,
			ForceAttemptHTTP2:   true,
		},
	}
}
