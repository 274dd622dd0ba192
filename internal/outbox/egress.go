package outbox

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrAddressRefused means a webhook URL points at, or its name resolved
// to, an address webhooks may not reach.
var ErrAddressRefused = errors.New("outbox: webhook address refused")

// AddressPolicy says which addresses webhook deliveries may connect to.
// An owner chooses webhook URLs, so without it an owner could make the
// server POST to its own neighbours: the cloud metadata service, the
// PostgreSQL port, an admin endpoint on loopback (server-side request
// forgery). Public unicast addresses are allowed; every special-purpose
// range is refused unless Allow names it.
type AddressPolicy struct {
	// Allow lists networks that are reachable even though they are not
	// public (e.g. an internal receiver at 10.20.0.0/16). The answer of a
	// receiver there is kept out of the delivery's last_error (special).
	Allow []netip.Prefix
}

// refused are the special-purpose ranges webhooks may not reach by
// default (IANA's special-purpose registries, RFC 6890 and successors).
var refused = mustPrefixes(
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
	"192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24",
	"203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
	// ::/96 is IPv4-compatible IPv6 (deprecated, RFC 4291 §2.5.5.1): some
	// stacks still route ::a.b.c.d to a.b.c.d, ::127.0.0.1 included.
	"::/128", "::1/128", "::/96", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32", "2002::/16",
	"fc00::/7", "fe80::/10", "ff00::/8",
)

func mustPrefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

// Check returns nil if a delivery may connect to a.
func (p AddressPolicy) Check(a netip.Addr) error {
	a = a.Unmap().WithZone("")
	for _, n := range p.Allow {
		if n.Contains(a) {
			return nil
		}
	}
	for _, n := range refused {
		if n.Contains(a) {
			return fmt.Errorf("%w: %s is in the special-purpose range %s (allow it with --webhook-allow-networks)", ErrAddressRefused, a, n)
		}
	}
	return nil
}

// CheckURL validates a webhook URL when it is registered: http or https,
// a host, and — when the host is an IP literal — an address the policy
// allows. A host name is checked again at every connection, after it
// resolves (a name can resolve differently later).
func (p AddressPolicy) CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("webhook url: %w", err)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return fmt.Errorf("webhook url: scheme %q, want https (or http)", u.Scheme)
	}
	host := u.Hostname()
	if host == "" {
		return errors.New("webhook url: no host")
	}
	if u.User != nil {
		return errors.New("webhook url: credentials in the URL are refused; authenticate the delivery by its signature")
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return p.Check(a)
	}
	// A trailing dot is the same name, fully qualified ("localhost.").
	if h := strings.TrimSuffix(strings.ToLower(host), "."); h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return p.Check(netip.MustParseAddr("127.0.0.1"))
	}
	return nil
}

// special reports whether a is in a special-purpose range, so that a
// delivery reaches it only because Allow names it (or a custom client
// skipped the policy). Such a receiver is inside the operator's network:
// what it answers is kept out of the delivery's last_error, which the
// owner reads, so that a webhook URL cannot read internal services back.
// An invalid address (unknown) counts as special.
func special(a netip.Addr) bool {
	if !a.IsValid() {
		return true
	}
	a = a.Unmap().WithZone("")
	for _, n := range refused {
		if n.Contains(a) {
			return true
		}
	}
	return false
}

// MaxResponseHeaderBytes bounds the headers of a webhook's answer (over
// HTTP/1 and HTTP/2). net/http's default, 10 MiB, let a receiver make the
// dispatcher hold ~10 MiB per delivery in flight (found by a review: 16
// answers of 9 MiB headers grew the heap by ~250 MiB; an OOM-killed
// sidecar stops every payment). A receiver needs none of it: only the
// status and the first bytes of the body are read.
const MaxResponseHeaderBytes = 16 << 10

// h2StreamWindow and h2ConnWindow bound what an HTTP/2 receiver may send
// of a body before the dispatcher reads it, per request and per connection
// (net/http's defaults are 4 MiB and 1 GiB).
const (
	h2StreamWindow = 64 << 10
	h2ConnWindow   = 1 << 20
)

// Client is the HTTP client deliveries go out on: it checks every address
// it connects to against the policy after name resolution (so a name that
// re-resolves to an internal address is refused too), never follows a
// redirect (a 3xx is a failed attempt, never a POST elsewhere), never
// uses a proxy from the environment, and bounds what a receiver's answer
// can make it buffer: headers of at most MaxResponseHeaderBytes, no
// transparent decompression, small HTTP/2 flow-control windows.
func (p AddressPolicy) Client() *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("%w: unparseable address %q", ErrAddressRefused, address)
			}
			return p.Check(ap.Addr())
		}}
	t := &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		// Also HTTP/2's SETTINGS_MAX_HEADER_LIST_SIZE, enforced on the
		// answer as it is decoded.
		MaxResponseHeaderBytes: MaxResponseHeaderBytes,
		DisableCompression:     true,
		HTTP2: &http.HTTP2Config{
			MaxReceiveBufferPerStream:     h2StreamWindow,
			MaxReceiveBufferPerConnection: h2ConnWindow,
		},
	}
	return &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
