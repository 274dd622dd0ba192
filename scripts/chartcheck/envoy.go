package main

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strings"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/envoyconfig"
	"github.com/countersign/countersign/internal/rails"
)

const (
	countersignCluster = "countersign"
	extAuthzName       = "envoy.filters.http.ext_authz"
	extProcName        = "envoy.filters.http.ext_proc"
	protocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
)

// envoyInfo is what the pod checks need from the bootstrap.
type envoyInfo struct {
	listenerPort int
	// listenerAddr is the listener's IP address; adminPipe Envoy's admin
	// socket ("" when admin is not a pipe).
	listenerAddr string
	adminPipe    string
	pipe         string
	// routed maps each Host value (domain) of a virtual host whose routes
	// reach a rail to that rail's account.
	routed map[string]string
	// inAgentPod: this Envoy runs in the agent's pod (injector mode).
	inAgentPod bool
	// longestRoute is the longest a rail route lets a rail call run (its
	// timeout; Envoy's default 15 s when unset; "forever" for 0).
	longestRoute time.Duration
}

// checkEnvoyBootstrap parses the bootstrap the way Envoy does (YAML to
// JSON, proto3 JSON with unknown fields an error), validates it into every
// typed Any, and checks what the chart's pod relies on. inAgentPod says
// the Envoy runs in the agent's pod (injector mode).
func checkEnvoyBootstrap(r *result, data string, accounts map[string]rails.AccountConfig, inAgentPod bool) *envoyInfo {
	b, err := envoyconfig.ParseBootstrap([]byte(data))
	if !r.ok(invEnvoy, err == nil, "bootstrap does not parse as an Envoy v3 Bootstrap: %v", err) {
		return nil
	}
	_, err = envoyconfig.ValidateDeep(b)
	if !r.ok(invEnvoy, err == nil, "bootstrap fails validation: %v", err) {
		return nil
	}
	info := &envoyInfo{routed: map[string]string{}, inAgentPod: inAgentPod}

	if a := b.GetAdmin().GetAddress(); a != nil {
		r.ok(invEnvoy, isLoopback(a), "admin must listen on loopback or a pipe, not %v", a)
		info.adminPipe = a.GetPipe().GetPath()
	}

	sr := b.GetStaticResources()
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range sr.GetClusters() {
		clusters[c.GetName()] = c
	}

	// Countersign: the socket, over HTTP/2.
	if cl, ok := clusters[countersignCluster]; r.ok(invEnvoy, ok, "cluster %q is not defined", countersignCluster) {
		var pipes []string
		for _, le := range cl.GetLoadAssignment().GetEndpoints() {
			for _, ep := range le.GetLbEndpoints() {
				p := ep.GetEndpoint().GetAddress().GetPipe().GetPath()
				r.ok(invGRPCUnix, p != "", "cluster %q: every endpoint must be a pipe (the Unix socket), got %v", countersignCluster, ep.GetEndpoint().GetAddress())
				pipes = append(pipes, p)
			}
		}
		slices.Sort(pipes)
		pipes = slices.Compact(pipes)
		if r.ok(invGRPCUnix, len(pipes) == 1 && pipes[0] != "", "cluster %q must have one pipe endpoint, got %q", countersignCluster, pipes) {
			info.pipe = pipes[0]
		}
		po := &upstreamhttpv3.HttpProtocolOptions{}
		a, ok := cl.GetTypedExtensionProtocolOptions()[protocolOptionsKey]
		r.ok(invEnvoy, ok && a.UnmarshalTo(po) == nil && po.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil,
			"cluster %q must speak HTTP/2", countersignCluster)
	}

	ls := sr.GetListeners()
	if !r.ok(invEnvoy, len(ls) == 1, "want one listener (the agents' egress), got %d", len(ls)) {
		return info
	}
	checkAccessLogs(r, "listener "+ls[0].GetName(), ls[0].GetAccessLog())
	info.listenerPort = int(ls[0].GetAddress().GetSocketAddress().GetPortValue())
	info.listenerAddr = ls[0].GetAddress().GetSocketAddress().GetAddress()
	r.ok(invEnvoy, info.listenerPort > 0, "the listener needs a TCP port")
	// Only the filter chains are checked: a default chain or a chain matcher
	// would carry traffic past them, a match on a chain would let another
	// take some of it.
	r.ok(invEnvoy, ls[0].GetDefaultFilterChain() == nil && ls[0].GetFilterChainMatcher() == nil,
		"the listener's default_filter_chain and filter_chain_matcher must be unset: every connection goes through the checked filter chain")
	var hcms int
	for _, fc := range ls[0].GetFilterChains() {
		r.ok(invEnvoy, fc.GetFilterChainMatch() == nil, "the listener's filter chain must carry every connection: filter_chain_match must be unset")
		for _, f := range fc.GetFilters() {
			h := &hcmv3.HttpConnectionManager{}
			if !r.ok(invEnvoy, f.GetTypedConfig().UnmarshalTo(h) == nil, "listener filter %q is not an HttpConnectionManager", f.GetName()) {
				continue
			}
			hcms++
			checkHCM(r, h, clusters, accounts, info)
		}
	}
	r.ok(invEnvoy, hcms == 1, "want one HttpConnectionManager, got %d", hcms)
	return info
}

func checkHCM(r *result, h *hcmv3.HttpConnectionManager, clusters map[string]*clusterv3.Cluster, accounts map[string]rails.AccountConfig, info *envoyInfo) {
	// No agent request is ever internal to Envoy, which would obey its
	// x-envoy-* retries and timeouts: envoyconfig.InternalTrust says why.
	for _, p := range envoyconfig.InternalTrust(h) {
		r.ok(invEnvoy, false, "%s", p)
	}
	for _, p := range envoyconfig.TunnelFaults(h) {
		r.ok(invEnvoy, false, "http connection manager: %s", p)
	}
	for _, p := range envoyconfig.HeaderFaults(h) {
		r.ok(invEnvoy, false, "http connection manager: %s", p)
	}
	// An answer reaches ext_proc as Envoy leaves it: nothing may rewrite
	// Envoy's own replies into what reads as the rail's refusal.
	for _, p := range envoyconfig.LocalReplyFaults(h) {
		r.ok(invEnvoy, false, "http connection manager: %s", p)
	}
	// ext_authz, then ext_proc, then the router, each failing closed.
	fs := h.GetHttpFilters()
	var names []string
	for _, f := range fs {
		names = append(names, f.GetName())
	}
	if !r.ok(invEnvoy, slices.Equal(names, []string{extAuthzName, extProcName, "envoy.filters.http.router"}),
		"http_filters must be ext_authz, ext_proc, router; got %q", names) {
		return
	}
	az := &extauthzv3.ExtAuthz{}
	if r.ok(invEnvoy, fs[0].GetTypedConfig().UnmarshalTo(az) == nil, "ext_authz filter is not an ExtAuthz") {
		r.ok(invEnvoy, !az.GetFailureModeAllow(), "ext_authz must fail closed (failure_mode_allow: false)")
		r.ok(invEnvoy, az.GetGrpcService().GetEnvoyGrpc().GetClusterName() == countersignCluster, "ext_authz must call the %q cluster", countersignCluster)
		r.ok(invEnvoy, az.GetWithRequestBody().GetAllowPartialMessage(), "ext_authz must send a truncated body on (allow_partial_message) for Countersign to refuse")
		// Envoy marks a body cut at exactly its bound as whole; Countersign
		// counts one that reaches its own bound as cut: the two bounds are one.
		r.ok(invEnvoy, int(az.GetWithRequestBody().GetMaxRequestBytes()) == config.Defaults().MaxRequestBytes,
			"ext_authz with_request_body.max_request_bytes is %d, not countersign serve's --max-request-bytes %d: keep them equal", az.GetWithRequestBody().GetMaxRequestBytes(), config.Defaults().MaxRequestBytes)
		r.ok(invEnvoy, az.GetAllowedHeaders() == nil && az.GetDisallowedHeaders() == nil, "ext_authz: %s", envoyconfig.EveryHeaderWhy)
	}
	ep := &extprocv3.ExternalProcessor{}
	if r.ok(invEnvoy, fs[1].GetTypedConfig().UnmarshalTo(ep) == nil, "ext_proc filter is not an ExternalProcessor") {
		r.ok(invEnvoy, !ep.GetFailureModeAllow(), "ext_proc must fail closed (failure_mode_allow: false)")
		r.ok(invEnvoy, ep.GetGrpcService().GetEnvoyGrpc().GetClusterName() == countersignCluster, "ext_proc must call the %q cluster", countersignCluster)
	}
	checkAccessLogs(r, "http connection manager", h.GetAccessLog())
	rt := &routerv3.Router{}
	if r.ok(invEnvoy, fs[2].GetTypedConfig().UnmarshalTo(rt) == nil, "the last filter must be the router") {
		// The upstream log sees the request as sent: the rail key in
		// authorization.
		checkAccessLogs(r, "router upstream_log", rt.GetUpstreamLog())
	}

	// Routes: every rail route names a rail account of the rails file and
	// goes to it over verified TLS; anything else is answered by Envoy.
	rc := h.GetRouteConfig()
	if !r.ok(invEnvoy, rc != nil, "the route configuration must be inline (route_config)") {
		return
	}
	r.ok(invEnvoy, len(rc.GetRequestHeadersToAdd()) == 0 && len(rc.GetRequestHeadersToRemove()) == 0 && len(rc.GetRequestMirrorPolicies()) == 0,
		"route_config: %s", envoyconfig.OnceWhy("request_headers_to_add, request_headers_to_remove, request_mirror_policies"))
	// A route takes the route configuration's per-filter config where it
	// sets none of its own: ext_proc disabled there lets a rail request
	// leave unmarked, then settled as never sent.
	r.ok(invEnvoy, len(rc.GetTypedPerFilterConfig()) == 0, "route_config: per-filter config belongs on the routes, where it is checked")
	domains := map[string]string{}
	routed := map[string]bool{}
	for _, vh := range rc.GetVirtualHosts() {
		r.ok(invEnvoy, vh.GetMatcher() == nil, "virtual host %q: a matcher tree is not checked here: routes only", vh.GetName())
		if slices.ContainsFunc(vh.GetRoutes(), func(rt *routev3.Route) bool { return rt.GetRoute() != nil }) {
			bad := envoyconfig.VirtualHostResends(vh)
			r.ok(invEnvoy, len(bad) == 0, "virtual host %q of a rail route: %s", vh.GetName(), envoyconfig.OnceWhy(strings.Join(bad, ", ")))
		}
		for _, d := range vh.GetDomains() {
			other, dup := domains[d]
			r.ok(invEnvoy, !dup, "domain %q is in virtual hosts %q and %q (Envoy refuses that)", d, other, vh.GetName())
			domains[d] = vh.GetName()
		}
		r.ok(invEnvoy, len(vh.GetTypedPerFilterConfig()) == 0, "virtual host %q: per-filter config belongs on the routes", vh.GetName())
		for i, rt := range vh.GetRoutes() {
			where := fmt.Sprintf("virtual host %q route %d", vh.GetName(), i)
			switch a := rt.GetAction().(type) {
			case *routev3.Route_Route:
				// Envoy's route timeout defaults to 15 s; 0 turns it off. A
				// GET-only route (an MCP server's event stream) moves no
				// money: nothing of it is reconciled.
				to := 15 * time.Second
				if t := a.Route.GetTimeout(); t != nil {
					if to = t.AsDuration(); to == 0 {
						to = time.Duration(math.MaxInt64)
					}
				}
				if !isGET(rt.GetMatch()) {
					info.longestRoute = max(info.longestRoute, to)
				}
				if acct := checkRailRoute(r, where, rt, a.Route, clusters, accounts, info.inAgentPod); acct != "" {
					routed[acct] = true
					for _, d := range vh.GetDomains() {
						info.routed[d] = acct
					}
				}
			case *routev3.Route_DirectResponse:
			default:
				r.ok(invEnvoy, false, "%s: action %T: only rail routes and direct responses", where, a)
			}
		}
	}
	for acct := range accounts {
		r.ok(invEnvoy, routed[acct], "rail account %q has no Envoy route", acct)
	}
}

func checkRailRoute(r *result, where string, rt *routev3.Route, ra *routev3.RouteAction, clusters map[string]*clusterv3.Cluster, accounts map[string]rails.AccountConfig, inAgentPod bool) string {
	name, host := ra.GetCluster(), ra.GetHostRewriteLiteral()
	r.ok(invEnvoy, name != "" && name != countersignCluster, "%s: a rail route names one rail cluster, got %q", where, name)
	bad := envoyconfig.RouteResends(rt, ra)
	r.ok(invEnvoy, len(bad) == 0, "%s: %s", where, envoyconfig.OnceWhy(strings.Join(bad, ", ")))
	for _, f := range envoyconfig.RouteTimeoutFaults(ra) {
		r.ok(invEnvoy, false, "%s: %s", where, f)
	}
	for _, f := range envoyconfig.RouteTunnels(ra) {
		r.ok(invEnvoy, false, "%s: %s", where, f)
	}
	r.ok(invEnvoy, host != "", "%s: host_rewrite_literal must name the rail host", where)
	per := rt.GetTypedPerFilterConfig()
	apr := &extauthzv3.ExtAuthzPerRoute{}
	cfg, ok := per[extAuthzName]
	if !r.ok(invEnvoy, ok && cfg.UnmarshalTo(apr) == nil && !apr.GetDisabled() && apr.GetCheckSettings() != nil,
		"%s: ext_authz must be enabled with check_settings", where) {
		return ""
	}
	ext := apr.GetCheckSettings().GetContextExtensions()
	acct, known := accounts[ext["rail_account"]]
	if !r.ok(invEnvoy, known, "%s: rail_account %q is not an account of the rails file", where, ext["rail_account"]) {
		return ""
	}
	r.ok(invEnvoy, ext["rail_host"] == host, "%s: rail_host %q must be the host the route rewrites to (%q)", where, ext["rail_host"], host)
	r.ok(invEnvoy, slices.Contains(acct.Hosts, host), "%s: %q is not a host of rail account %q", where, host, acct.Account)
	// ext_proc may be off only where no money moves: an MCP server's GET
	// stream.
	if cfg, ok := per[extProcName]; ok {
		pr := &extprocv3.ExtProcPerRoute{}
		off := cfg.UnmarshalTo(pr) != nil || pr.GetDisabled() || pr.GetOverrides() != nil
		r.ok(invEnvoy, !off || (acct.MCP != nil && isGET(rt.GetMatch())), "%s: ext_proc must run unmodified on a rail route (only an MCP GET stream may skip it)", where)
	}
	cl, ok := clusters[name]
	if !r.ok(invEnvoy, ok, "%s: cluster %q is not defined", where, name) {
		return acct.Account
	}
	// Reached by its name (the one TLS verifies below), at least once,
	// through the system's resolver. Any port: the chart's
	// egress.upstream.port moves an in-cluster MCP server off 443, and with
	// verified TLS the certificate, not the port, says who gets the key.
	for _, f := range envoyconfig.RailClusterFaults(cl, host, 0) {
		r.ok(invEnvoy, false, "%s: cluster %q: %s", where, name, f)
	}
	ts := cl.GetTransportSocket()
	if ts == nil && acct.MCP != nil && !inAgentPod {
		// An in-cluster MCP server over plain HTTP, from an Envoy of its
		// own pod. In the agent's pod it is refused below: the agent can
		// write the pod's /etc/hosts (as root) and its pod spec chooses the
		// resolver, so the name could lead to the agent, with the rail key.
		return acct.Account
	}
	tls := &tlsv3.UpstreamTlsContext{}
	if !r.ok(invEnvoy, ts != nil && ts.GetTypedConfig().UnmarshalTo(tls) == nil, "%s: cluster %q must use TLS (UpstreamTlsContext)", where, name) {
		return acct.Account
	}
	r.ok(invEnvoy, tls.GetSni() == host, "%s: cluster %q sni %q, want %q", where, name, tls.GetSni(), host)
	vc := tls.GetCommonTlsContext().GetValidationContext()
	r.ok(invEnvoy, vc.GetTrustedCa() != nil, "%s: cluster %q does not verify the rail's certificate", where, name)
	r.ok(invEnvoy, slices.ContainsFunc(vc.GetMatchTypedSubjectAltNames(), func(m *tlsv3.SubjectAltNameMatcher) bool {
		return m.GetSanType() == tlsv3.SubjectAltNameMatcher_DNS && m.GetMatcher().GetExact() == host
	}), "%s: cluster %q must match the DNS SAN %q", where, name, host)
	for _, f := range envoyconfig.RailTLSFaults(tls, host) {
		r.ok(invEnvoy, false, "%s: cluster %q: %s", where, name, f)
	}
	return acct.Account
}

// checkAccessLogs: no access log names a credential header or reads an
// x-envoy-* header the agent sets (envoyconfig.AccessLogFaults says why).
func checkAccessLogs(r *result, where string, logs []*accesslogv3.AccessLog) {
	for i, l := range logs {
		faults, err := envoyconfig.AccessLogFaults(l)
		r.ok(invEnvoy, err == nil, "%s: access_log[%d]: %v", where, i, err)
		for _, f := range faults {
			r.ok(invEnvoy, false, "%s: access_log[%d] %s", where, i, f)
		}
	}
}

func isGET(m *routev3.RouteMatch) bool {
	return slices.ContainsFunc(m.GetHeaders(), func(h *routev3.HeaderMatcher) bool {
		return h.GetName() == ":method" && h.GetStringMatch().GetExact() == "GET"
	})
}

func isLoopback(a *corev3.Address) bool {
	if a.GetPipe() != nil {
		return true
	}
	ip, err := netip.ParseAddr(a.GetSocketAddress().GetAddress())
	return err == nil && ip.IsLoopback()
}
