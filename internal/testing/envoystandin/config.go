package envoystandin

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// Config is the stand-in's listener, filter chain and route table. Each
// field names the Envoy field it models.
type Config struct {
	// Listen is the listener address (listener.address); "" means
	// 127.0.0.1:0.
	Listen string
	// Listener, when set, is used instead of opening Listen: a caller that
	// must know the port before it writes the route table (a virtual
	// host's domains name it) opens the socket itself. Close closes it.
	Listener net.Listener

	// ExtAuthz is the gRPC address of the authorization service
	// (ext_authz grpc_service; transport_api_version V3). Required.
	ExtAuthz string
	// ExtProc is the gRPC address of the external processor (ext_proc
	// grpc_service). "" means the chain has no ext_proc filter.
	ExtProc string

	Routes []Route

	// MaxRequestBytes is with_request_body.max_request_bytes. 0 means
	// with_request_body is not configured: no body is buffered or sent to
	// ext_authz (Envoy requires the field to be > 0 when the message is set).
	MaxRequestBytes uint32
	// AllowPartialMessage is with_request_body.allow_partial_message.
	AllowPartialMessage bool
	// PackAsBytes is with_request_body.pack_as_bytes: the body goes in
	// raw_body instead of body.
	PackAsBytes bool
	// FailureModeAllow is ext_authz failure_mode_allow. It must stay false
	// for Countersign (fail closed); true exists only for completeness.
	FailureModeAllow bool
	// StatusOnError is ext_authz status_on_error. 0 means 503, the value the
	// Countersign Envoy configuration sets (Envoy's own default is 403).
	StatusOnError int
	// Timeout is the ext_authz grpc_service.timeout. 0 means Envoy's
	// default, 200ms.
	Timeout time.Duration
	// LegacyAppend models Envoy releases before envoyproxy/envoy#42878,
	// which ignore append_action in OkHttpResponse.headers and
	// response_headers_to_add and honour only the deprecated append bool
	// (unset or false: overwrite; true: append to an existing header only).
	LegacyAppend bool

	// ExtProcMessageTimeout is ext_proc message_timeout. 0 means Envoy's
	// default, 200ms.
	ExtProcMessageTimeout time.Duration
	// ExtProcFailureModeAllow is ext_proc failure_mode_allow (default false).
	ExtProcFailureModeAllow bool
	// ExtProcStatusOnError is ext_proc status_on_error. 0 means Envoy's
	// default, 500.
	ExtProcStatusOnError int
	// ExtProcSkipsLocalReplies models Envoy builds in which local replies
	// (an ext_authz denial, a router 503 or 504, a 413, a 404) bypass the
	// ext_proc filter. false is Envoy's long-standing behaviour: a local
	// reply is encoded through every encoder filter, so ext_proc sends it
	// to the processor as response_headers and response_body, on the
	// stream already open for the request or on a new one
	// (envoyproxy/envoy#11447, #29440, #41769).
	ExtProcSkipsLocalReplies bool

	// RewriteBodyAfterAuthz is a fault, not Envoy behaviour: a filter
	// between ext_authz and ext_proc (a Lua or Wasm filter, a chain in the
	// wrong order) that changes the buffered body after the check. nil (the
	// shipped chain) changes nothing. Tests use it to prove the body that
	// leaves is the body that was decided.
	RewriteBodyAfterAuthz func(body []byte) []byte
}

// Route is one route of the virtual host.
type Route struct {
	// Prefix selects the route. A value starting with "/" is a path prefix
	// (route.match.prefix); anything else is matched against the request's
	// authority as the agent sent it, with or without its port, like a
	// virtual host's domains ("*" matches any host).
	Prefix string
	// Upstream is the cluster, as a base URL: http://127.0.0.1:port. Only
	// plain HTTP/1.1 is modelled (no TLS origination).
	Upstream string
	// HostRewrite is route.host_rewrite_literal: the :authority the
	// upstream sees (the rail host, e.g. api.stripe.com). "" keeps the
	// agent's authority.
	HostRewrite string
	// ContextExtensions is the route's ExtAuthzPerRoute
	// check_settings.context_extensions (e.g. rail_account).
	ContextExtensions map[string]string
	// Timeout is route.timeout. 0 means Envoy's default, 15s.
	Timeout time.Duration
	// DirectResponse, when set, is route.direct_response: the router
	// answers itself and Upstream is not used. Such a route also stands
	// for ExtAuthzPerRoute{disabled: true} and ExtProcPerRoute{disabled:
	// true}, as envoy/egress.yaml configures its catch-all `unknown`
	// route: neither filter sees the request (other per-route filter
	// settings are not modelled).
	DirectResponse *DirectResponse
}

// DirectResponse is a route's direct_response: a local reply from the
// router. As in Envoy's sendLocalReply, a non-empty body gets
// content-type: text/plain unless Headers (the route's
// response_headers_to_add, applied to the local reply first) set one; the
// reply still passes through the encoder filters that are not disabled.
type DirectResponse struct {
	// Status is direct_response.status (200–599).
	Status int
	// Body is direct_response.body.inline_string.
	Body string
	// Headers are the route's response_headers_to_add (OVERWRITE_IF_EXISTS_OR_ADD).
	Headers map[string]string
}

const (
	defaultAuthzTimeout   = 200 * time.Millisecond
	defaultMessageTimeout = 200 * time.Millisecond
	defaultRouteTimeout   = 15 * time.Second
	// remoteCloseTimeout is Envoy's default for
	// envoy.filters.http.ext_proc.remote_close_timeout_milliseconds: how
	// long a half-closed ext_proc stream waits for the server to end it.
	remoteCloseTimeout = time.Second
)

func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:0"
	}
	if c.StatusOnError == 0 {
		c.StatusOnError = 503
	}
	if c.Timeout == 0 {
		c.Timeout = defaultAuthzTimeout
	}
	if c.ExtProcMessageTimeout == 0 {
		c.ExtProcMessageTimeout = defaultMessageTimeout
	}
	if c.ExtProcStatusOnError == 0 {
		c.ExtProcStatusOnError = 500
	}
	routes := make([]Route, len(c.Routes))
	for i, r := range c.Routes {
		if r.Timeout == 0 {
			r.Timeout = defaultRouteTimeout
		}
		r.Upstream = strings.TrimSuffix(r.Upstream, "/")
		routes[i] = r
	}
	c.Routes = routes
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.ExtAuthz == "" {
		errs = append(errs, errors.New("egress: ExtAuthz (the authorization service's gRPC address) is required"))
	}
	if len(c.Routes) == 0 {
		errs = append(errs, errors.New("egress: at least one Route is required"))
	}
	for i, r := range c.Routes {
		if r.Prefix == "" {
			errs = append(errs, fmt.Errorf("egress: route %d: Prefix is empty", i))
		}
		if d := r.DirectResponse; d != nil {
			if d.Status < 200 || d.Status > 599 {
				errs = append(errs, fmt.Errorf("egress: route %d: DirectResponse.Status %d is not an HTTP status", i, d.Status))
			}
			if r.Upstream != "" {
				errs = append(errs, fmt.Errorf("egress: route %d: a DirectResponse route has no Upstream", i))
			}
			continue
		}
		u, err := url.Parse(r.Upstream)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("egress: route %d: Upstream: %w", i, err))
		case u.Scheme != "http" || u.Host == "":
			errs = append(errs, fmt.Errorf("egress: route %d: Upstream %q must be an http:// base URL (TLS origination is not modelled)", i, r.Upstream))
		}
	}
	for _, s := range []int{c.StatusOnError, c.ExtProcStatusOnError} {
		if s < 200 || s > 599 {
			errs = append(errs, fmt.Errorf("egress: status %d is not an HTTP status", s))
		}
	}
	return errors.Join(errs...)
}

// match is the route table lookup. nil means no route: the router answers
// 404 and ext_authz is skipped (Envoy's ext_authz does not check a request
// without a route).
func (c Config) match(authority, path string) *Route {
	host := authority
	if h, _, err := net.SplitHostPort(authority); err == nil {
		host = h
	}
	for i := range c.Routes {
		r := &c.Routes[i]
		if strings.HasPrefix(r.Prefix, "/") {
			if strings.HasPrefix(path, r.Prefix) {
				return r
			}
			continue
		}
		if r.Prefix == "*" || strings.EqualFold(r.Prefix, authority) || strings.EqualFold(r.Prefix, host) {
			return r
		}
	}
	return nil
}
