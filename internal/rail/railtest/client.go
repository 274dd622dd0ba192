package railtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/rail"
)

// DefaultTimeout bounds one rail read when NewClient builds its own
// http.Client. Callers pass a deadline in ctx for tighter bounds.
const DefaultTimeout = 30 * time.Second

// NewClient returns a rail.Client that sends rail-relative paths to baseURL
// (e.g. "https://api.stripe.com" or an httptest server's URL, optionally with
// a path prefix) with authHeader as the Authorization header ("" sends
// none). hc may be nil: the client then uses its own http.Client with
// DefaultTimeout that never follows redirects, so the rail key is never
// replayed to another location.
//
// It is a test helper that is also production quality: the engine may use
// it as is, or copy it.
func NewClient(baseURL, authHeader string, hc *http.Client) rail.Client {
	if hc == nil {
		hc = &http.Client{
			Timeout: DefaultTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		}
	}
	return &client{base: strings.TrimRight(baseURL, "/"), auth: authHeader, hc: hc}
}

type client struct {
	base string
	auth string
	hc   *http.Client
}

// errPath is returned for a path that is not rail-relative.
var errPath = errors.New("railtest: path must be rail-relative (start with one '/')")

// Do implements rail.Client. The caller closes the response body.
func (c *client) Do(ctx context.Context, method, path string, headers map[string]string, body []byte) (*http.Response, error) {
	// "//host/x" would be read as a network path by some URL parsers; a
	// rail-relative path never needs it.
	if !strings.HasPrefix(path, "/") || strings.HasPrefix(path, "//") || strings.ContainsAny(path, "#\r\n") {
		return nil, fmt.Errorf("%w: %q", errPath, path)
	}
	u, err := url.Parse(c.base + path)
	if err != nil {
		return nil, fmt.Errorf("railtest: build URL for %q: %w", path, err)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("railtest: build request: %w", err)
	}
	for k, v := range headers {
		if strings.EqualFold(k, "Authorization") {
			continue // only the client's own credential is ever sent
		}
		req.Header.Set(k, v)
	}
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "countersign")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("railtest: %s %s: %w", method, path, err)
	}
	return resp, nil
}
