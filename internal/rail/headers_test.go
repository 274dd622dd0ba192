package rail

import (
	"errors"
	"strings"
	"testing"
)

// TestHeaderPolicyCheck: each header stands where its rule, the common
// rules or a namespace put it; Envoy's controls of the rail call are
// refused by name, on any rail, and the two x-envoy-* headers a proxy adds
// itself pass.
func TestHeaderPolicyCheck(t *testing.T) {
	p := HeaderPolicy{
		Rules: map[string]HeaderRule{
			"rail-account": {Class: HeaderRefused, Why: "it acts on another account"},
			"rail-key":     {Class: HeaderStamp},
		},
		Namespaces: []string{"rail-"},
	}
	envoyWhy := "is one of Envoy's controls of the rail call"
	for _, tc := range []struct {
		name    string
		headers map[string]string
		// refused names the header a RefusedHeader must name ("" for none);
		// why is what its reason must say.
		refused, why string
		// malformed: the error is ErrMalformed.
		malformed bool
	}{
		{name: "none", headers: nil},
		{name: "transport", headers: map[string]string{"user-agent": "sdk/1", "accept": "*/*", "x-request-id": "r1", ":authority": "stripe.egress.local:15001"}},
		// x-forwarded-for is the agent's to say: Envoy never trusts it (the
		// shipped configs' original-IP detection, envoyconfig.NoInternalRequests).
		{name: "x-forwarded-for", headers: map[string]string{"x-forwarded-for": "127.0.0.1"}},
		{name: "the rail's stamp", headers: map[string]string{"rail-key": "k"}},
		{name: "a refused rule", headers: map[string]string{"rail-account": "acct_2"}, refused: "rail-account", why: "it acts on another account"},
		{name: "the rail's namespace", headers: map[string]string{"rail-other": "1"}, refused: "rail-other", why: "headers named rail-… may change what the rail does"},
		{name: "countersign's namespace", headers: map[string]string{"x-countersign-verdict": "ALLOW"}, refused: "x-countersign-verdict", why: "headers named x-countersign-…"},
		{name: "a common refusal", headers: map[string]string{"x-http-method-override": "GET"}, refused: "x-http-method-override", why: "another method"},
		{name: "a client's timeout", headers: map[string]string{"grpc-timeout": "1m"}, refused: "grpc-timeout", why: "cut the rail call short"},
		{name: "a pinned value", headers: map[string]string{"content-encoding": "gzip"}, malformed: true},
		// Found by a review: Envoy passes a no-break space as it is, and
		// joins a stamp header sent twice with a comma.
		{name: "identity with a no-break space", headers: map[string]string{"content-encoding": "identity\u00a0"}, malformed: true},
		{name: "identity with HTTP's whitespace", headers: map[string]string{"content-encoding": " identity\t"}},
		{name: "a stamp sent twice", headers: map[string]string{"rail-key": "k1,k2"}, malformed: true},
		{name: "the credential sent twice", headers: map[string]string{"authorization": "Bearer a,Bearer b"}, malformed: true},
		{name: "a forwarded host", headers: map[string]string{"x-forwarded-host": "api.example.com"}, refused: "x-forwarded-host", why: "another host"},
		{name: "an original URI", headers: map[string]string{"x-original-uri": "/v1/payouts"}, refused: "x-original-uri", why: "another path"},
		{name: "RFC 7239's forwarded", headers: map[string]string{"forwarded": "host=api.example.com;proto=https"}, refused: "forwarded", why: "another host"},
		{name: "an original host", headers: map[string]string{"x-original-host": "api.example.com"}, refused: "x-original-host", why: "another host"},
		{name: "a forwarded URI", headers: map[string]string{"x-forwarded-uri": "/v1/payouts"}, refused: "x-forwarded-uri", why: "another path"},
		{name: "httpoxy", headers: map[string]string{"proxy": "http://10.0.0.9:8080"}, refused: "proxy", why: "HTTP_PROXY"},

		// Envoy's ext_authz flag and a sidecar's attempt count pass.
		{name: "ext_authz's partial-body flag", headers: map[string]string{"x-envoy-auth-partial-body": "false"}},
		{name: "a sidecar's attempt count", headers: map[string]string{"x-envoy-attempt-count": "1"}},
		// What a mesh gateway's connection manager adds before its filters
		// (found by a review: each refused every request through it); any
		// control beside them is still refused, below.
		{name: "internal", headers: map[string]string{"x-envoy-internal": "true"}},
		{name: "external address", headers: map[string]string{"x-envoy-external-address": "10.0.0.1"}},
		{name: "decorator operation", headers: map[string]string{"x-envoy-decorator-operation": "stripe"}},
		{name: "downstream cluster and node", headers: map[string]string{"x-envoy-downstream-service-cluster": "agent", "x-envoy-downstream-service-node": "n"}},
		{name: "peer metadata", headers: map[string]string{"x-envoy-peer-metadata": "Cg==", "x-envoy-peer-metadata-id": "sidecar~10.0.0.1"}},
		{name: "a gateway's marks beside a control", headers: map[string]string{"x-envoy-internal": "true", "x-envoy-max-retries": "3"}, refused: "x-envoy-max-retries", why: envoyWhy},

		// Every control Envoy's router reads from a request (router.cc,
		// retry_state_impl.cc), whether or not its connection manager
		// would strip it first.
		{name: "retry on 5xx", headers: map[string]string{"x-envoy-retry-on": "5xx"}, refused: "x-envoy-retry-on", why: envoyWhy},
		{name: "retry on a gRPC status", headers: map[string]string{"x-envoy-retry-grpc-on": "unavailable"}, refused: "x-envoy-retry-grpc-on", why: envoyWhy},
		{name: "max retries", headers: map[string]string{"x-envoy-max-retries": "10"}, refused: "x-envoy-max-retries", why: envoyWhy},
		{name: "retriable status codes", headers: map[string]string{"x-envoy-retriable-status-codes": "200,201"}, refused: "x-envoy-retriable-status-codes", why: envoyWhy},
		{name: "retriable header names", headers: map[string]string{"x-envoy-retriable-header-names": "request-id"}, refused: "x-envoy-retriable-header-names", why: envoyWhy},
		{name: "hedge", headers: map[string]string{"x-envoy-hedge-on-per-try-timeout": "true"}, refused: "x-envoy-hedge-on-per-try-timeout", why: envoyWhy},
		{name: "timeout", headers: map[string]string{"x-envoy-upstream-rq-timeout-ms": "1"}, refused: "x-envoy-upstream-rq-timeout-ms", why: envoyWhy},
		{name: "per-try timeout", headers: map[string]string{"x-envoy-upstream-rq-per-try-timeout-ms": "1"}, refused: "x-envoy-upstream-rq-per-try-timeout-ms", why: envoyWhy},
		// Never stripped by Envoy's connection manager, internal or not.
		{name: "stream duration", headers: map[string]string{"x-envoy-upstream-stream-duration-ms": "1"}, refused: "x-envoy-upstream-stream-duration-ms", why: envoyWhy},
		{name: "expected timeout", headers: map[string]string{"x-envoy-expected-rq-timeout-ms": "1"}, refused: "x-envoy-expected-rq-timeout-ms", why: envoyWhy},
		{name: "alternate stat name", headers: map[string]string{"x-envoy-upstream-alt-stat-name": "x"}, refused: "x-envoy-upstream-alt-stat-name", why: envoyWhy},
		{name: "the logged path", headers: map[string]string{"x-envoy-original-path": "/v1/balance"}, refused: "x-envoy-original-path", why: envoyWhy},
		{name: "one Envoy does not have yet", headers: map[string]string{"x-envoy-anything": "1"}, refused: "x-envoy-anything", why: envoyWhy},
		// CGI-style servers (Rack, PHP-FPM, WSGI) read stripe_account as
		// Stripe-Account (found by a review): any underscore is refused,
		// whether its dash spelling is refused, pinned, namespaced or none.
		{name: "an underscore spelling of a refused header", headers: map[string]string{"rail_account": "acct_2"}, refused: "rail_account", why: "underscore"},
		{name: "an underscore spelling of a namespace", headers: map[string]string{"rail_other": "1"}, refused: "rail_other", why: "underscore"},
		{name: "an underscore spelling of a common refusal", headers: map[string]string{"x_http_method_override": "GET"}, refused: "x_http_method_override", why: "underscore"},
		{name: "an underscore spelling of an Envoy control", headers: map[string]string{"x_envoy_retry_on": "5xx"}, refused: "x_envoy_retry_on", why: "underscore"},
		{name: "an underscore spelling of a pinned header", headers: map[string]string{"content_encoding": "gzip"}, refused: "content_encoding", why: "underscore"},
		{name: "an underscore in a transport header", headers: map[string]string{"user_agent": "sdk/1"}, refused: "user_agent", why: "underscore"},
		// Gateways that fold every byte but letters and digits to "_"
		// (lighttpd's CGI, FastCGI, SCGI) read these as the names they
		// spell with dashes (found by a review): any name byte but a
		// lower-case letter, a digit or '-' is refused.
		{name: "a dot spelling of a refused header", headers: map[string]string{"rail.account": "acct_2"}, refused: "rail.account", why: "CGI"},
		{name: "a tilde spelling of a namespace", headers: map[string]string{"rail~other": "1"}, refused: "rail~other", why: "CGI"},
		{name: "a plus spelling of a common refusal", headers: map[string]string{"x-http-method+override": "GET"}, refused: "x-http-method+override", why: "CGI"},
		{name: "an upper-case name", headers: map[string]string{"Rail-Account": "acct_2"}, refused: "Rail-Account", why: "CGI"},
		{name: "a space in a name", headers: map[string]string{"rail-account ": "acct_2"}, refused: "rail-account ", why: "CGI"},
		{name: "a lone colon", headers: map[string]string{":": "x"}, refused: ":", why: "CGI"},
		{name: "a doubled pseudo-header colon", headers: map[string]string{"::path": "/"}, refused: "::path", why: "CGI"},
		{name: "pseudo-headers Envoy reports", headers: map[string]string{":authority": "api.example", ":method": "POST", ":path": "/v1/x", ":scheme": "https"}},
		{name: "among harmless ones", headers: map[string]string{"user-agent": "sdk/1", "x-envoy-auth-partial-body": "false", "x-envoy-retry-on": "reset"}, refused: "x-envoy-retry-on", why: envoyWhy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := p.Check(tc.headers)
			var rh *RefusedHeader
			switch {
			case tc.malformed:
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("Check = %v, want ErrMalformed", err)
				}
			case tc.refused == "":
				if err != nil {
					t.Fatalf("Check = %v, want nil", err)
				}
			case !errors.As(err, &rh) || !errors.Is(err, ErrUnrecognised):
				t.Fatalf("Check = %v, want a RefusedHeader (ErrUnrecognised) for %s", err, tc.refused)
			case rh.Name != tc.refused || !strings.Contains(err.Error(), tc.why):
				t.Fatalf("Check = %q (header %q), want header %q refused saying %q", err, rh.Name, tc.refused, tc.why)
			}
		})
	}
}
