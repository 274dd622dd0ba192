package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/testing/envoystandin"
)

// egressRail is one rail account's egress listener: the address an
// unmodified SDK of that rail takes as its API base URL. One listener per
// rail account lets the base URL be the whole configuration: an SDK sends
// its base URL's host:port as Host and nothing else that could pick a rail.
// (The shipped envoy/egress.yaml serves both rails on one listener and picks
// by the host names stripe.egress.local and razorpay.egress.local, which a
// pod's hostAliases resolve; a developer's machine has no such names.)
type egressRail struct {
	Name     string // as a person reads it: "Stripe"
	Account  string // the Countersign rail account (context extension rail_account)
	RailHost string // the rail's own API host (host_rewrite_literal, rail_host)
	// Hosts are the Host values this listener routes to the rail: its
	// address and, on loopback, localhost with its port. Empty when it
	// listens on every address and so routes any Host.
	Hosts []string
	ln    net.Listener
	proxy *envoystandin.Proxy
}

// BaseURL is the SDK's API base URL.
func (e *egressRail) BaseURL() string { return "http://" + e.ln.Addr().String() }

// listenEgress opens the listeners first: each one's route table names
// the hosts of all of them.
func listenEgress(ctx context.Context, rails []*egressRail, addrs []string) error {
	var lc net.ListenConfig
	for i, r := range rails {
		ln, err := lc.Listen(ctx, "tcp", addrs[i])
		if err != nil {
			closeListeners(rails[:i])
			return fmt.Errorf("%s egress: %w", r.Name, err)
		}
		r.ln, r.Hosts = ln, servedHosts(ln.Addr())
	}
	return nil
}

func closeListeners(rails []*egressRail) {
	for _, r := range rails {
		_ = r.ln.Close()
	}
}

// servedHosts are the Host values a listener on a answers for.
func servedHosts(a net.Addr) []string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || tcp.IP.IsUnspecified() {
		return nil
	}
	hosts := []string{a.String()}
	if tcp.IP.IsLoopback() {
		hosts = append(hosts, net.JoinHostPort("localhost", strconv.Itoa(tcp.Port)))
	}
	return hosts
}

// startDevEgress runs the Envoy stand-in on one listener per rail account,
// in front of the mock rail, so the printed commands and an SDK take the
// path an agent's SDK would, with the base URL as printed. The route table
// of each listener is what an Envoy listener would be configured with: a
// virtual host whose domains are the listener's own host:port values, and
// a catch-all route like envoy/egress.yaml's `unknown` (a direct_response
// with ext_authz and ext_proc disabled), whose JSON body, shaped like the
// rail's own error, names the hosts that are served.
func startDevEgress(ctx context.Context, envoyAddr, mockURL string, rails []*egressRail, addrs []string) error {
	if err := listenEgress(ctx, rails, addrs); err != nil {
		return err
	}
	for i, r := range rails {
		route := func(prefix string) envoystandin.Route {
			return envoystandin.Route{Prefix: prefix, Upstream: mockURL, HostRewrite: r.RailHost,
				// Stripe's SDKs wait 80 s; egress.yaml's rail routes allow 60 s.
				Timeout:           60 * time.Second,
				ContextExtensions: map[string]string{"rail_account": r.Account, "rail_host": r.RailHost}}
		}
		var routes []envoystandin.Route
		for _, h := range r.Hosts {
			routes = append(routes, route(h))
		}
		if len(r.Hosts) == 0 {
			routes = append(routes, route("*"))
		} else {
			routes = append(routes, envoystandin.Route{Prefix: "*", DirectResponse: &envoystandin.DirectResponse{
				Status: 404, Body: unknownHostBody(r, rails), Headers: map[string]string{"content-type": "application/json"}}})
		}
		p, err := envoystandin.Start(ctx, envoystandin.Config{
			Listener: r.ln, ExtAuthz: envoyAddr, ExtProc: envoyAddr, MaxRequestBytes: 64 << 10, AllowPartialMessage: true,
			PackAsBytes: true, StatusOnError: 503, Timeout: 5 * time.Second, ExtProcMessageTimeout: 5 * time.Second,
			Routes: routes,
		})
		if err != nil {
			stopEgress(rails[:i])
			closeListeners(rails[i:])
			return fmt.Errorf("%s egress: %w", r.Name, err)
		}
		r.proxy = p
	}
	return nil
}

func stopEgress(rails []*egressRail) {
	for _, r := range rails {
		if r.proxy != nil {
			r.proxy.Close()
		}
	}
}

// unknownHostBody is the catch-all route's answer on r's listener: the
// rail's error shape (so r's SDK reports it as an API error) with a
// sentence naming every served base URL, and the same as data.
func unknownHostBody(r *egressRail, rails []*egressRail) string {
	type served struct {
		Host        string `json:"host"`
		Rail        string `json:"rail"`
		RailAccount string `json:"rail_account"`
	}
	var list []served
	var sentences []string
	for _, o := range rails {
		var urls []string
		for _, h := range o.Hosts {
			list = append(list, served{Host: h, Rail: strings.ToLower(o.Name), RailAccount: o.Account})
			urls = append(urls, "http://"+h)
		}
		if len(o.Hosts) == 0 {
			urls = append(urls, o.BaseURL()+" (any host name)")
		}
		sentences = append(sentences, fmt.Sprintf("%s (%s) at %s", o.Name, o.Account, strings.Join(urls, " or ")))
	}
	msg := "Countersign's egress serves no rail for this Host. Served: " + strings.Join(sentences, "; ") +
		". Set the SDK's API base URL to the one for its rail."
	var body any
	if r.RailHost == razorpayHost {
		body = map[string]any{"error": map[string]any{"code": "BAD_REQUEST_ERROR", "description": msg,
			"reason": "countersign_unknown_host", "served_hosts": list}}
	} else {
		body = map[string]any{"error": map[string]any{"type": "invalid_request_error", "code": "countersign_unknown_host",
			"message": msg, "served_hosts": list}}
	}
	b, _ := json.Marshal(body) // maps of strings and slices: cannot fail
	return string(b)
}
