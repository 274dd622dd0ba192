package envoyconfig

import (
	"fmt"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

// RailClusterFaults lists the settings of a rail cluster under which Envoy
// could send a request, with the rail key ext_authz set on it, somewhere
// other than host: the name the route rewrites to, which TLS verifies (or,
// for a plain-HTTP MCP upstream, which only the resolver answers). port is
// the one port every endpoint must be on; 0 allows any (the chart's
// egress.upstream.port: with verified TLS the certificate, not the port,
// says who receives the key).
//
// A cluster with no endpoint would pass a loop over them, so none is a
// fault. ORIGINAL_DST sends to the address the request names (with
// original_dst_lb_config.use_http_header, the agent's
// x-envoy-original-dst-host header: original_dst_cluster.cc), EDS and LEDS
// to whatever a management server says, a cluster_type extension
// (dynamic_forward_proxy among them) to an upstream it picks from the
// request; a resolver the config names, or an endpoint's additional
// address, answers for the name instead of the system resolver. Nor may
// any filter run between the router and the rail (upstreamFilterFaults).
func RailClusterFaults(cl *clusterv3.Cluster, host string, port uint32) []string {
	var out []string
	if cl.GetClusterType() != nil {
		out = append(out, fmt.Sprintf("cluster_type %q must be unset: a custom cluster picks its upstream itself", cl.GetClusterType().GetName()))
	} else if t := cl.GetType(); t != clusterv3.Cluster_LOGICAL_DNS && t != clusterv3.Cluster_STRICT_DNS {
		out = append(out, fmt.Sprintf("type %v must be LOGICAL_DNS or STRICT_DNS: the rail is reached by its name "+
			"(ORIGINAL_DST sends where the request says, with use_http_header where the agent's x-envoy-original-dst-host says; EDS where a management server says)", t))
	}
	//nolint:staticcheck // the deprecated fields still choose a resolver
	if cl.GetTypedDnsResolverConfig() != nil || len(cl.GetDnsResolvers()) > 0 || cl.GetDnsResolutionConfig() != nil || cl.GetUseTcpForDnsLookups() {
		out = append(out, "typed_dns_resolver_config, dns_resolvers, dns_resolution_config and use_tcp_for_dns_lookups must be unset: the rail's name is resolved by the system's resolver, not one the config names")
	}
	if len(cl.GetTransportSocketMatches()) > 0 || cl.GetTransportSocketMatcher() != nil {
		out = append(out, "transport_socket_matches and transport_socket_matcher must be unset: they could select a socket other than the verified TLS one")
	}
	n := 0
	for i, le := range cl.GetLoadAssignment().GetEndpoints() {
		if le.GetLedsClusterLocalityConfig() != nil {
			out = append(out, fmt.Sprintf("load_assignment.endpoints[%d]: leds_cluster_locality_config must be unset: the endpoints are the config's", i))
		}
		for j, ep := range le.GetLbEndpoints() {
			n++
			where := fmt.Sprintf("load_assignment.endpoints[%d].lb_endpoints[%d]", i, j)
			sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
			if sa.GetAddress() != host || sa.GetResolverName() != "" {
				out = append(out, fmt.Sprintf("%s: address %q (resolver %q), want %s by the system's resolver", where, sa.GetAddress(), sa.GetResolverName(), host))
			}
			if p := sa.GetPortValue(); p == 0 || (port != 0 && p != port) {
				want := "a port"
				if port != 0 {
					want = fmt.Sprint(port)
				}
				out = append(out, fmt.Sprintf("%s: port %d (%q), want %s", where, p, sa.GetNamedPort(), want))
			}
			if len(ep.GetEndpoint().GetAdditionalAddresses()) > 0 {
				out = append(out, where+": additional_addresses must be unset: Envoy would connect to them too")
			}
		}
	}
	if n == 0 {
		out = append(out, fmt.Sprintf("load_assignment has no endpoint: want %s", host))
	}
	return append(out, upstreamFilterFaults(cl)...)
}

// RailTLSFaults lists the settings of a rail cluster's UpstreamTlsContext
// under which a certificate that is not host's, from a CA the bundle
// trusts, would still be accepted, and the rail key sent on that
// connection. ACCEPT_UNTRUSTED skips the chain (default_validator.cc,
// DefaultCertValidator::doVerifyCertChain: any self-signed certificate
// naming host passes), a custom validator replaces the default one,
// allow_expired_certificate accepts an expired one, a validation context
// from SDS, a certificate provider or combined with one is not the
// config's; and Envoy accepts a certificate matching any one SAN matcher,
// so every matcher must be host's exact DNS name.
func RailTLSFaults(tls *tlsv3.UpstreamTlsContext, host string) []string {
	var out []string
	ctc := tls.GetCommonTlsContext()
	if _, ok := ctc.GetValidationContextType().(*tlsv3.CommonTlsContext_ValidationContext); !ok {
		out = append(out, fmt.Sprintf("common_tls_context: the validation context must be the inline validation_context "+
			"(not validation_context_sds_secret_config, combined_validation_context or a certificate provider), is %T", ctc.GetValidationContextType()))
		return out
	}
	vc := ctc.GetValidationContext()
	if v := vc.GetTrustChainVerification(); v != tlsv3.CertificateValidationContext_VERIFY_TRUST_CHAIN {
		out = append(out, fmt.Sprintf("validation_context.trust_chain_verification %v must be unset or VERIFY_TRUST_CHAIN: "+
			"with ACCEPT_UNTRUSTED any self-signed certificate naming %s receives the rail key", v, host))
	}
	if vc.GetCustomValidatorConfig() != nil {
		out = append(out, "validation_context.custom_validator_config must be unset: Envoy's default validator checks the chain and the name")
	}
	if vc.GetAllowExpiredCertificate() {
		out = append(out, "validation_context.allow_expired_certificate must be false")
	}
	//nolint:staticcheck // the deprecated field still matches names
	if len(vc.GetMatchSubjectAltNames()) > 0 {
		out = append(out, "validation_context.match_subject_alt_names must be unset: match_typed_subject_alt_names names the rail")
	}
	for i, m := range vc.GetMatchTypedSubjectAltNames() {
		if m.GetSanType() != tlsv3.SubjectAltNameMatcher_DNS || m.GetMatcher().GetExact() != host || m.GetMatcher().GetIgnoreCase() {
			out = append(out, fmt.Sprintf("validation_context.match_typed_subject_alt_names[%d] must be DNS, exact %s: Envoy accepts a certificate that any one matcher matches", i, host))
		}
	}
	return out
}

// TunnelFaults lists the settings of the agents' connection manager under
// which a request stops being one request that ext_authz and ext_proc see
// whole: an upgrade (WebSocket, CONNECT) turns the connection, once the
// upgrade request is allowed, into a tunnel to the rail whose later bytes
// no filter sees, the rail key's connection included; HTTP/1.0 carries no
// Host of its own (Envoy routes it to default_host_for_http_10) and
// Countersign's checks assume HTTP/1.1 framing or later.
func TunnelFaults(h *hcmv3.HttpConnectionManager) []string {
	var out []string
	if len(h.GetUpgradeConfigs()) > 0 {
		out = append(out, "upgrade_configs must be unset: an upgraded connection is a tunnel neither ext_authz nor ext_proc sees")
	}
	if h.GetHttp2ProtocolOptions().GetAllowConnect() {
		out = append(out, "http2_protocol_options.allow_connect must be false: CONNECT opens a tunnel neither ext_authz nor ext_proc sees")
	}
	if h.GetHttp3ProtocolOptions().GetAllowExtendedConnect() {
		out = append(out, "http3_protocol_options.allow_extended_connect must be false: an extended CONNECT opens a tunnel neither ext_authz nor ext_proc sees")
	}
	if h.GetHttpProtocolOptions().GetAcceptHttp_10() {
		out = append(out, "http_protocol_options.accept_http_10 must be false: an HTTP/1.0 request has no Host of its own and Countersign expects HTTP/1.1 or later")
	}
	return out
}

// RouteTunnels refuses a rail route's upgrade_configs, which enable an
// upgrade even where the connection manager names none (http_connection_manager/config.cc,
// createUpgradeFilterChain: an upgrade enabled on the route is allowed).
func RouteTunnels(ra *routev3.RouteAction) []string {
	if len(ra.GetUpgradeConfigs()) > 0 {
		return []string{"upgrade_configs must be unset: a route can enable an upgrade the connection manager does not, and an upgraded connection is a tunnel neither ext_authz nor ext_proc sees"}
	}
	return nil
}
