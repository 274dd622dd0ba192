package rail

import (
	"fmt"
	"maps"
	"mime"
	"slices"
	"strings"
)

// HeaderClass says where a request header stands (CONVENTIONS: every byte
// from the agent is classified).
type HeaderClass int

// Header classes.
const (
	// HeaderTransport is an HTTP, proxy or tracing header (user-agent,
	// accept, x-request-id, traceparent, …) or an SDK's telemetry: the rail
	// does not read it for what an action does.
	HeaderTransport HeaderClass = iota + 1
	// HeaderKey is read into the action's meaning (x-countersign-distinct).
	HeaderKey
	// HeaderStamp is Countersign's own: overwritten on ALLOW (the
	// idempotency key, the rail credential).
	HeaderStamp
	// HeaderPinned must be absent or the one value Countersign reads the
	// request as; its rule's Check says which.
	HeaderPinned
	// HeaderRefused changes whose account or which API the rail acts on,
	// or how the rail reads the request: a request that carries it is not
	// recognised.
	HeaderRefused
)

// HeaderRule is one header's standing.
type HeaderRule struct {
	Class HeaderClass
	// Why is the sentence a refusal gives (HeaderRefused).
	Why string
	// Check validates a pinned header's value (HeaderPinned).
	Check func(v string) error
}

// HeaderPolicy is a rail's header table. Names are lower-case, as
// rail.Request carries them.
type HeaderPolicy struct {
	Rules map[string]HeaderRule
	// Namespaces are name prefixes the rail (or Countersign) owns, such as
	// "stripe-" or "x-razorpay-": a header in one of them that Rules does
	// not name is refused, because the rail may read it and Countersign
	// cannot say what it does.
	Namespaces []string
}

// commonRules hold for every rail: the method-override family can turn a
// POST into another verb behind the path Countersign read, the URL-rewrite
// family the path itself, and a
// compressed body is bytes Countersign did not read.
var commonRules = map[string]HeaderRule{
	"x-http-method-override": {Class: HeaderRefused, Why: "it can make the rail read the request as another method"},
	"x-http-method":          {Class: HeaderRefused, Why: "it can make the rail read the request as another method"},
	"x-method-override":      {Class: HeaderRefused, Why: "it can make the rail read the request as another method"},
	// Some web stacks (Symfony before 3.4.14/4.1.3, IIS rewrite modules)
	// take the request's path from these, behind the one Countersign read.
	"x-original-url":     {Class: HeaderRefused, Why: "it can make the rail read the request as another path"},
	"x-rewrite-url":      {Class: HeaderRefused, Why: "it can make the rail read the request as another path"},
	"x-forwarded-prefix": {Class: HeaderRefused, Why: "it can make the rail read the request as another path"},
	// nginx's auth_request convention and frameworks behind trusted proxies
	// (Symfony's and Laravel's getHost) read these as the request's path
	// and host; a CGI gateway reads Proxy as HTTP_PROXY, the proxy the
	// rail's own code would call out through (httpoxy). No SDK sends them
	// (found by a review).
	"x-original-uri":   {Class: HeaderRefused, Why: "it can make the rail read the request as another path"},
	"x-forwarded-host": {Class: HeaderRefused, Why: "it can make the rail read the request as sent to another host"},
	"x-original-host":  {Class: HeaderRefused, Why: "it can make the rail read the request as sent to another host"},
	"x-forwarded-uri":  {Class: HeaderRefused, Why: "it can make the rail read the request as another path"},
	// RFC 7239's one header for what the x-forwarded-* family says (host=,
	// proto=), read the same way behind trusted proxies.
	"forwarded": {Class: HeaderRefused, Why: "it can make the rail read the request as sent to another host"},
	"proxy":     {Class: HeaderRefused, Why: "servers reading headers as CGI variables read it as HTTP_PROXY, the proxy their own calls go through"},
	// Envoy times a call by a request's grpc-timeout on a route with
	// max_grpc_timeout or max_stream_duration.grpc_timeout_header_max
	// (router.cc finalTimeout, conn_manager_impl.cc
	// refreshDurationTimeout); the shipped configs set neither
	// (envoyconfig.RouteTimeoutFaults), and no rail reads it.
	"grpc-timeout": {Class: HeaderRefused, Why: "it can make Envoy cut the rail call short when the agent chooses, leaving its outcome unknown"},
	"content-encoding": {Class: HeaderPinned, Check: func(v string) error {
		// Only HTTP's own whitespace around it (space, tab): Envoy passes
		// "identity\u00a0" as it is (found by a review).
		if !strings.EqualFold(strings.Trim(v, " \t"), "identity") {
			return fmt.Errorf("%q: the body must be sent unencoded, as Countersign reads it", v)
		}
		return nil
	}},
	"authorization":          {Class: HeaderStamp}, // the agent's credential, replaced by the rail key
	"x-countersign-distinct": {Class: HeaderKey},
	// x-envoy-* headers a proxy itself puts on a request before the check,
	// none a control of the rail call (envoyNamespace):
	// x-envoy-auth-partial-body is ext_authz's flag in the check alone (it
	// drops a client's own: check_request_utils.cc, setHttpRequest), read
	// by extauthz.BodyIsWhole; x-envoy-attempt-count is a router's count of
	// its own tries, which a mesh sidecar in front adds (Istio's virtual
	// hosts include it) and no router reads from a request.
	"x-envoy-auth-partial-body": {Class: HeaderTransport},
	"x-envoy-attempt-count":     {Class: HeaderTransport},
	// What a connection manager itself adds before its filters run, as a
	// mesh gateway's does (use_remote_address, tracing, Istio's peer
	// exchange; conn_manager_utility.cc mutateRequestHeaders,
	// conn_manager_impl.cc traceRequest): marks and metadata no router
	// reads as a control of the call (found by a review: refusing the
	// whole namespace refused every request through such a gateway).
	"x-envoy-internal":                   {Class: HeaderTransport},
	"x-envoy-external-address":           {Class: HeaderTransport},
	"x-envoy-decorator-operation":        {Class: HeaderTransport},
	"x-envoy-downstream-service-cluster": {Class: HeaderTransport},
	"x-envoy-downstream-service-node":    {Class: HeaderTransport},
	"x-envoy-peer-metadata":              {Class: HeaderTransport},
	"x-envoy-peer-metadata-id":           {Class: HeaderTransport},
}

// countersignNamespace is Countersign's own header prefix.
const countersignNamespace = "x-countersign-"

// envoyNamespace is Envoy's. Its router reads x-envoy-* request headers as
// controls of the call it sends (envoyproxy/envoy at 8179eba, 1.37-dev:
// router.cc finalTimeout, finalHedgingParams, decodeHeaders;
// retry_state_impl.cc): x-envoy-retry-on, -retry-grpc-on, -max-retries,
// -retriable-status-codes and -retriable-header-names send the allowed
// request again, -hedge-on-per-try-timeout sends it twice at once,
// -upstream-rq-timeout-ms, -upstream-rq-per-try-timeout-ms and
// -upstream-stream-duration-ms cut it short. The connection manager strips
// most of them from a request it does not take for internal, but not
// -upstream-stream-duration-ms, and whether a request is internal depends
// on Envoy's version and configuration. One decision is one rail call, sent
// as decided, so a request that carries any x-envoy-* header but those in
// commonRules is refused, whatever Envoy in front would make of it.
const envoyNamespace = "x-envoy-"

// RefusedHeader is Check's refusal of one header. It wraps ErrUnrecognised
// (the request is not one Countersign knows) and names the header, so the
// refusal the agent reads says which one and why.
type RefusedHeader struct {
	Name string
	// Why completes "header <Name> …".
	Why string
}

func (e *RefusedHeader) Error() string {
	return fmt.Sprintf("%v: header %s %s", ErrUnrecognised, e.Name, e.Why)
}

// Unwrap makes a RefusedHeader an ErrUnrecognised.
func (e *RefusedHeader) Unwrap() error { return ErrUnrecognised }

// Check returns a *RefusedHeader (an ErrUnrecognised) for a refused
// header, an ErrMalformed error for a pinned header with another value,
// nil otherwise.
// Headers are checked in name order, so the error is deterministic.
func (p HeaderPolicy) Check(headers map[string]string) error {
	for _, name := range slices.Sorted(maps.Keys(headers)) {
		v := headers[name]
		if strings.Contains(name, "_") {
			// Servers that read headers as CGI variables (Rack, PHP-FPM,
			// WSGI) give stripe_account and stripe-account one name
			// (HTTP_STRIPE_ACCOUNT), so a header spelled with "_" could be
			// read as one this policy refuses or pins under its "-"
			// spelling. Envoy's listeners refuse such names too
			// (headers_with_underscores_action: REJECT_REQUEST); this
			// holds where a configuration forgot it.
			return &RefusedHeader{Name: name, Why: "has an underscore in its name, which servers reading headers as CGI variables read as a dash"}
		}
		if !plainName(name) {
			// Gateways that fold every other byte to "_" for the CGI
			// variable (lighttpd's CGI, FastCGI and SCGI) read
			// stripe.account as Stripe-Account, and Envoy passes names
			// with any of RFC 9110's token characters (found by a review).
			return &RefusedHeader{Name: name, Why: "has a character other than a lower-case letter, a digit or '-' in its name, which servers reading headers as CGI variables read as a dash"}
		}
		r, ok := p.Rules[name]
		if !ok {
			r, ok = commonRules[name]
		}
		if !ok {
			if strings.HasPrefix(name, envoyNamespace) {
				return &RefusedHeader{Name: name, Why: "is one of Envoy's controls of the rail call (" + envoyNamespace +
					"… headers retry it, hedge it or cut it short), and one decision sends one rail call, as decided"}
			}
			for _, ns := range append(p.Namespaces, countersignNamespace) {
				if strings.HasPrefix(name, ns) {
					return &RefusedHeader{Name: name, Why: fmt.Sprintf("is not one Countersign knows, and headers named %s… may change what the rail does", ns)}
				}
			}
			continue // transport
		}
		switch r.Class {
		case HeaderRefused:
			return &RefusedHeader{Name: name, Why: "is refused: " + r.Why}
		case HeaderStamp:
			// Envoy joins a header sent twice with "," in the check; which
			// copy the rail reads after Countersign writes its own depends
			// on Envoy's version (setCopy replaced only the first before
			// http_set_copy_replace_all_headers): one copy, no comma
			// (found by a review).
			if strings.Contains(v, ",") {
				return fmt.Errorf("%w: %s: sent more than once, or with a comma: Countersign writes this header itself, once", ErrMalformed, name)
			}
		case HeaderPinned:
			if r.Check != nil {
				if err := r.Check(v); err != nil {
					return fmt.Errorf("%w: %s: %w", ErrMalformed, name, err)
				}
			}
		}
	}
	return nil
}

// plainName reports whether a header name is lower-case letters, digits
// and '-' (after the ':' of an HTTP/2 pseudo-header, which Envoy reports).
func plainName(name string) bool {
	name = strings.TrimPrefix(name, ":")
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// CheckMediaType accepts a Content-Type that names exactly want, with no
// parameter other than charset=utf-8: a body declared in another charset
// could be decoded by the rail into other characters than Countersign read.
func CheckMediaType(ct, want string) error {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != want {
		return fmt.Errorf("%q: the request must be %s", ct, want)
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return fmt.Errorf("%q: parameter %s=%s; only charset=utf-8 is read the same everywhere", ct, k, v)
		}
	}
	return nil
}
