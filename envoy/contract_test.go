package envoy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	mutationv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"

	"github.com/countersign/countersign/internal/config"
	"github.com/countersign/countersign/internal/envoyconfig"
	"github.com/countersign/countersign/internal/extauthz"
)

const (
	// countersignCluster is the cluster both gRPC filters call.
	countersignCluster = "countersign"
	// extAuthzFilterName is the ext_authz filter's name in the chain; the
	// per-route ExtAuthzPerRoute is keyed by it.
	extAuthzFilterName = "envoy.filters.http.ext_authz"
	// minCallTimeout is the least a Countersign call may be given: Check
	// and Commit write to Postgres (Envoy's default is 200ms).
	minCallTimeout = time.Second
	// protocolOptionsKey is where a cluster's HTTP protocol options live.
	protocolOptionsKey = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
)

// checkContract asserts what Countersign's ext_authz and ext_proc servers
// rely on from the Envoy in front of them. Parsing and validateDeep come
// first; this reads meaning, not syntax.
func checkContract(b *bootstrapv3.Bootstrap) error {
	c := &contract{clusters: map[string]*clusterv3.Cluster{}}
	for _, cl := range b.GetStaticResources().GetClusters() {
		c.clusters[cl.GetName()] = cl
	}
	c.admin(b.GetAdmin())
	hcms := 0
	for i, l := range b.GetStaticResources().GetListeners() {
		lp := fmt.Sprintf("listener %q", l.GetName())
		c.loopback(lp, l.GetAddress())
		c.accessLogs(lp, l.GetAccessLog())
		// Only the filter chains below are checked: a default chain (taken
		// by a connection no chain matches) or a chain matcher would carry
		// traffic past them, and a match on a chain would let another,
		// unchecked, chain take some of it (found by a review).
		if l.GetDefaultFilterChain() != nil || l.GetFilterChainMatcher() != nil {
			c.fail("%s: default_filter_chain and filter_chain_matcher must be unset: every connection goes through the checked filter chains", lp)
		}
		for j, fc := range l.GetFilterChains() {
			if fc.GetFilterChainMatch() != nil {
				c.fail("%s filter_chains[%d]: filter_chain_match must be unset: one chain carries every connection", lp, j)
			}
			for k, f := range fc.GetFilters() {
				hcm := &hcmv3.HttpConnectionManager{}
				if !f.GetTypedConfig().MessageIs(hcm) {
					// A TCP proxy on loopback to the countersign cluster
					// would let the agent speak ext_authz itself and take
					// the rail key from an ALLOW; nothing but the checked
					// HTTP connection manager may carry a listener's traffic.
					c.fail("%s filter_chains[%d] filters[%d] %q is not an HTTP connection manager: the contract cannot tell where it sends what reaches it", lp, j, k, f.GetName())
					continue
				}
				hcms++
				if err := f.GetTypedConfig().UnmarshalTo(hcm); err != nil {
					c.fail("listeners[%d].filter_chains[%d].filters[%d]: %v", i, j, k, err)
					continue
				}
				c.hcm(fmt.Sprintf("%s filter_chains[%d]", lp, j), hcm)
			}
		}
	}
	if hcms == 0 {
		c.fail("no listener has an HTTP connection manager")
	}
	c.countersign()
	return errors.Join(c.errs...)
}

type contract struct {
	clusters map[string]*clusterv3.Cluster
	errs     []error
}

func (c *contract) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

// admin: Envoy's admin interface can drain listeners and dump config. In a
// pod every container shares loopback, so it is a pipe (a socket on the
// private volume), owner only, or absent.
func (c *contract) admin(a *bootstrapv3.Admin) {
	if a == nil || a.GetAddress() == nil {
		return
	}
	p := a.GetAddress().GetPipe()
	if p == nil || p.GetPath() == "" {
		c.fail("admin listens on %v, not on a pipe: an agent sharing the pod's network would reach it", a.GetAddress())
		return
	}
	if p.GetMode()&0o077 != 0 {
		c.fail("admin pipe %s has mode %#o; owner only (0600)", p.GetPath(), p.GetMode())
	}
}

// loopback: nothing Countersign's egress opens may listen beyond the pod.
func (c *contract) loopback(what string, a *corev3.Address) {
	ip, err := netip.ParseAddr(a.GetSocketAddress().GetAddress())
	if err != nil || !ip.IsLoopback() {
		c.fail("%s listens on %q, not on loopback", what, a.GetSocketAddress().GetAddress())
	}
}

// chainFilter is one HTTP filter and its unpacked config.
type chainFilter struct {
	index int
	f     *hcmv3.HttpFilter
	cfg   proto.Message
}

func (c *contract) hcm(path string, h *hcmv3.HttpConnectionManager) {
	c.accessLogs(path, h.GetAccessLog())
	// No agent request is ever internal to Envoy, so Envoy strips the
	// x-envoy-* controls that would have it send the payment again or cut
	// it short (envoyconfig.InternalTrust says how, with Envoy's source).
	for _, p := range envoyconfig.InternalTrust(h) {
		c.fail("%s: %s", path, p)
	}
	for _, p := range envoyconfig.TunnelFaults(h) {
		c.fail("%s: %s", path, p)
	}
	for _, p := range envoyconfig.HeaderFaults(h) {
		c.fail("%s: %s", path, p)
	}
	// An answer reaches ext_proc as Envoy leaves it: nothing may rewrite
	// Envoy's own replies into what reads as the rail's refusal.
	for _, p := range envoyconfig.LocalReplyFaults(h) {
		c.fail("%s: %s", path, p)
	}
	var authz, proc, router []chainFilter
	for i, f := range h.GetHttpFilters() {
		cfg, err := f.GetTypedConfig().UnmarshalNew()
		if err != nil {
			c.fail("%s: http_filters[%d] %q: %v", path, i, f.GetName(), err)
			continue
		}
		cf := chainFilter{i, f, cfg}
		switch cfg.(type) {
		case *extauthzv3.ExtAuthz:
			authz = append(authz, cf)
		case *extprocv3.ExternalProcessor:
			proc = append(proc, cf)
		case *routerv3.Router:
			router = append(router, cf)
		}
	}
	if len(authz) != 1 || len(proc) != 1 || len(router) != 1 {
		c.fail("%s: want exactly one ext_authz, one ext_proc and one router filter, have %d, %d and %d", path, len(authz), len(proc), len(router))
		return
	}
	a, p, r := authz[0], proc[0], router[0]
	if a.index >= p.index || p.index >= r.index {
		c.fail("%s: filter order must be ext_authz, ext_proc, router; they are at %d, %d, %d", path, a.index, p.index, r.index)
	}
	if r.index != len(h.GetHttpFilters())-1 {
		c.fail("%s: the router must be the last filter", path)
	}
	for _, cf := range []chainFilter{a, p} {
		if cf.f.GetDisabled() || cf.f.GetIsOptional() {
			c.fail("%s: filter %q must be neither disabled nor optional", path, cf.f.GetName())
		}
	}
	if a.f.GetName() != extAuthzFilterName {
		c.fail("%s: the ext_authz filter is named %q; the per-route configs are keyed by %q", path, a.f.GetName(), extAuthzFilterName)
	}
	// The router's upstream log sees the request as sent: the rail key
	// in authorization.
	c.accessLogs(path+" router upstream_log", r.cfg.(*routerv3.Router).GetUpstreamLog())
	c.extAuthz(path+" ext_authz", a.cfg.(*extauthzv3.ExtAuthz))
	c.extProc(path+" ext_proc", p.cfg.(*extprocv3.ExternalProcessor))
	rc := h.GetRouteConfig()
	if rc == nil {
		c.fail("%s: route_config must be inline (the rail routes are part of the contract)", path)
		return
	}
	c.routes(path, rc, a.f.GetName(), p.f.GetName())
}

func (c *contract) grpcService(path string, g *corev3.GrpcService) {
	if name := g.GetEnvoyGrpc().GetClusterName(); name != countersignCluster {
		c.fail("%s: grpc_service must be envoy_grpc to cluster %q, is %q", path, countersignCluster, name)
	}
}

func (c *contract) extAuthz(path string, x *extauthzv3.ExtAuthz) {
	c.grpcService(path, x.GetGrpcService())
	if t := x.GetGrpcService().GetTimeout(); t == nil || t.AsDuration() < minCallTimeout {
		c.fail("%s: grpc_service.timeout must be at least %v (Envoy's default is 200ms), is %v", path, minCallTimeout, t.AsDuration())
	}
	if x.GetTransportApiVersion() != corev3.ApiVersion_V3 {
		c.fail("%s: transport_api_version must be V3", path)
	}
	if x.GetFailureModeAllow() {
		c.fail("%s: failure_mode_allow must be false (fail closed)", path)
	}
	if x.GetStatusOnError().GetCode() != typev3.StatusCode_ServiceUnavailable {
		c.fail("%s: status_on_error must be 503, is %v", path, x.GetStatusOnError().GetCode())
	}
	wb := x.GetWithRequestBody()
	switch {
	case wb == nil:
		c.fail("%s: with_request_body must be set: the gate reads the body", path)
	case wb.GetMaxRequestBytes() == 0 || !wb.GetAllowPartialMessage():
		c.fail("%s: with_request_body needs max_request_bytes > 0 and allow_partial_message: true", path)
	case int(wb.GetMaxRequestBytes()) != config.Defaults().MaxRequestBytes:
		// Countersign counts a body that reaches its --max-request-bytes
		// as cut unless its length proves it whole; Envoy marks a body cut
		// at exactly its bound as whole (check_request_utils.cc,
		// setHttpRequest). Bounds that differ let a cut body pass for the
		// request (found by a review).
		c.fail("%s: with_request_body.max_request_bytes is %d, not countersign serve's default --max-request-bytes %d: keep them equal", path, wb.GetMaxRequestBytes(), config.Defaults().MaxRequestBytes)
	}
	if x.GetClearRouteCache() {
		c.fail("%s: clear_route_cache must be false: the route names the rail account", path)
	}
	if x.GetEncodeRawHeaders() {
		c.fail("%s: encode_raw_headers must be false: Countersign reads the headers map", path)
	}
	if x.GetAllowedHeaders() != nil || x.GetDisallowedHeaders() != nil {
		c.fail("%s: %s", path, envoyconfig.EveryHeaderWhy)
	}
	if e := x.GetEnableDynamicMetadataIngestion(); e != nil && !e.GetValue() {
		c.fail("%s: dynamic metadata ingestion must stay on: it carries the attempt to ext_proc", path)
	}
	if x.GetShadowMode() || x.GetFilterEnabled() != nil || x.GetFilterEnabledMetadata() != nil || x.GetDenyAtDisable() != nil {
		c.fail("%s: the check must run on every request (no shadow_mode, filter_enabled, filter_enabled_metadata, deny_at_disable)", path)
	}
	c.mutationRules(path+" decoder_header_mutation_rules", x.GetDecoderHeaderMutationRules())
}

func (c *contract) extProc(path string, x *extprocv3.ExternalProcessor) {
	c.grpcService(path, x.GetGrpcService())
	if x.GetFailureModeAllow() {
		c.fail("%s: failure_mode_allow must be false (fail closed)", path)
	}
	want := &extprocv3.ProcessingMode{
		RequestHeaderMode:   extprocv3.ProcessingMode_SEND,
		ResponseHeaderMode:  extprocv3.ProcessingMode_SEND,
		RequestBodyMode:     extprocv3.ProcessingMode_BUFFERED,
		ResponseBodyMode:    extprocv3.ProcessingMode_BUFFERED,
		RequestTrailerMode:  extprocv3.ProcessingMode_SEND,
		ResponseTrailerMode: extprocv3.ProcessingMode_SKIP,
	}
	if !proto.Equal(x.GetProcessingMode(), want) {
		c.fail("%s: processing_mode must be {%v}, is {%v}", path, want, x.GetProcessingMode())
	}
	if t := x.GetMessageTimeout(); t == nil || t.AsDuration() < minCallTimeout {
		c.fail("%s: message_timeout must be at least %v (Envoy's default is 200ms), is %v", path, minCallTimeout, t.AsDuration())
	}
	if ns := x.GetMetadataOptions().GetForwardingNamespaces().GetUntyped(); !slices.Contains(ns, extauthz.MetadataNamespace) {
		c.fail("%s: metadata_options.forwarding_namespaces.untyped must include %q, is %q", path, extauthz.MetadataNamespace, ns)
	}
	if x.GetObservabilityMode() || x.GetDisableImmediateResponse() || x.GetAllowModeOverride() {
		c.fail("%s: observability_mode, disable_immediate_response and allow_mode_override must be false", path)
	}
	c.mutationRules(path+" mutation_rules", x.GetMutationRules())
}

// mutationRules: when set, they must not let Countersign re-route the
// request or touch Envoy's own headers.
func (c *contract) mutationRules(path string, r *mutationv3.HeaderMutationRules) {
	if r == nil {
		return
	}
	if r.GetAllowAllRouting().GetValue() || r.GetAllowEnvoy().GetValue() || r.GetDisallowAll().GetValue() {
		c.fail("%s: allow_all_routing and allow_envoy must be false, and disallow_all would stop the stamps", path)
	}
}

func (c *contract) routes(path string, rc *routev3.RouteConfiguration, authzName, procName string) {
	if len(rc.GetRequestHeadersToAdd()) > 0 || len(rc.GetRequestHeadersToRemove()) > 0 || len(rc.GetRequestMirrorPolicies()) > 0 {
		c.fail("%s: route_config: %s", path, envoyconfig.OnceWhy("request_headers_to_add, request_headers_to_remove, request_mirror_policies"))
	}
	if len(rc.GetTypedPerFilterConfig()) > 0 {
		// A route takes the route configuration's per-filter config where
		// it sets none of its own for that filter: ext_proc disabled there
		// lets a rail request leave unmarked, then settled as never sent
		// (found by a review).
		c.fail("%s: route_config: per-filter config belongs on the routes, where it is checked", path)
	}
	rails := 0
	var served []string
	for _, vh := range rc.GetVirtualHosts() {
		if !slices.Contains(vh.GetDomains(), "*") {
			served = append(served, vh.GetDomains()...)
		}
	}
	for _, vh := range rc.GetVirtualHosts() {
		if slices.Contains(vh.GetDomains(), "*") {
			c.unknownHost(fmt.Sprintf("%s: virtual host %q", path, vh.GetName()), vh, served)
		}
		if len(vh.GetTypedPerFilterConfig()) > 0 {
			c.fail("%s: virtual host %q: per-filter config belongs on the routes, where it is checked", path, vh.GetName())
		}
		if vh.GetMatcher() != nil {
			c.fail("%s: virtual host %q: a matcher tree is not understood by this contract: routes only", path, vh.GetName())
		}
		if slices.ContainsFunc(vh.GetRoutes(), func(r *routev3.Route) bool { return r.GetRoute() != nil }) {
			if bad := envoyconfig.VirtualHostResends(vh); len(bad) > 0 {
				c.fail("%s: virtual host %q of a rail route: %s", path, vh.GetName(), envoyconfig.OnceWhy(strings.Join(bad, ", ")))
			}
		}
		for i, r := range vh.GetRoutes() {
			rp := fmt.Sprintf("%s: virtual host %q route %d", path, vh.GetName(), i)
			switch a := r.GetAction().(type) {
			case *routev3.Route_Route:
				rails++
				c.railRoute(rp, r, a.Route, authzName, procName)
			case *routev3.Route_DirectResponse, *routev3.Route_Redirect:
				// Answered by Envoy; nothing reaches a rail.
			default:
				c.fail("%s: action %T is not understood by this contract", rp, a)
			}
		}
	}
	if rails == 0 {
		c.fail("%s: no route leads to a rail", path)
	}
}

// unknownHost: a request for a host no rail is served on gets a JSON error
// (an SDK reads it as the rail's own) that names every served host with a
// port, so whoever set the wrong base URL learns the right one.
func (c *contract) unknownHost(path string, vh *routev3.VirtualHost, served []string) {
	for i, r := range vh.GetRoutes() {
		dr := r.GetDirectResponse()
		if dr == nil {
			continue
		}
		rp := fmt.Sprintf("%s route %d", path, i)
		body := dr.GetBody().GetInlineString()
		var e struct {
			Error struct{ Type, Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
			c.fail("%s: the unknown-host answer must be a JSON error with a code and a message, got %q", rp, body)
		}
		for _, d := range served {
			if strings.Contains(d, ":") && !strings.Contains(body, d) {
				c.fail("%s: the unknown-host answer does not name the served host %s", rp, d)
			}
		}
		jsonType := false
		for _, h := range r.GetResponseHeadersToAdd() {
			jsonType = jsonType || (strings.EqualFold(h.GetHeader().GetKey(), "content-type") && h.GetHeader().GetValue() == "application/json")
		}
		if !jsonType {
			c.fail("%s: the unknown-host answer must say content-type: application/json (Envoy's default is text/plain)", rp)
		}
	}
}

func (c *contract) railRoute(path string, r *routev3.Route, ra *routev3.RouteAction, authzName, procName string) {
	name := ra.GetCluster()
	if name == "" {
		c.fail("%s: a rail route must name one cluster", path)
		return
	}
	if name == countersignCluster {
		c.fail("%s: routes to the %q cluster", path, countersignCluster)
		return
	}
	host := ra.GetHostRewriteLiteral()
	if host == "" {
		c.fail("%s: host_rewrite_literal must name the rail host", path)
		return
	}
	if bad := envoyconfig.RouteResends(r, ra); len(bad) > 0 {
		c.fail("%s: %s", path, envoyconfig.OnceWhy(strings.Join(bad, ", ")))
	}
	for _, f := range envoyconfig.RouteTimeoutFaults(ra) {
		c.fail("%s: %s", path, f)
	}
	for _, f := range envoyconfig.RouteTunnels(ra) {
		c.fail("%s: %s", path, f)
	}
	if t := ra.GetTimeout(); t == nil || t.AsDuration() <= 0 {
		c.fail("%s: the route needs a timeout", path)
	} else if t.AsDuration() > config.DefaultRailSettle {
		// A listing proves an attempt absent only once the rail can no
		// longer apply it (--rail-settle-time): a longer rail call would
		// still be at the rail when the reconciler lists.
		c.fail("%s: the route's timeout %s exceeds countersign's default --rail-settle-time %s", path, t.AsDuration(), config.DefaultRailSettle)
	}
	per := r.GetTypedPerFilterConfig()
	az := &extauthzv3.ExtAuthzPerRoute{}
	if cfg, ok := per[authzName]; !ok || cfg.UnmarshalTo(az) != nil {
		c.fail("%s: typed_per_filter_config[%s] must be an ExtAuthzPerRoute", path, authzName)
	} else {
		cs := az.GetCheckSettings()
		if az.GetDisabled() || cs == nil {
			c.fail("%s: ext_authz must be enabled with check_settings", path)
		}
		if cs.GetContextExtensions()["rail_account"] == "" {
			c.fail("%s: check_settings.context_extensions.rail_account must name the rail account", path)
		}
		if cs.GetDisableRequestBodyBuffering() {
			c.fail("%s: the route must not stop the body reaching the check", path)
		}
		if wb := cs.GetWithRequestBody(); wb != nil && (!wb.GetAllowPartialMessage() || int(wb.GetMaxRequestBytes()) != config.Defaults().MaxRequestBytes) {
			c.fail("%s: a per-route with_request_body needs allow_partial_message: true and max_request_bytes equal to countersign serve's --max-request-bytes (%d): a smaller bound cuts bodies Countersign would count whole (found by a review)", path, config.Defaults().MaxRequestBytes)
		}
	}
	if cfg, ok := per[procName]; ok {
		pr := &extprocv3.ExtProcPerRoute{}
		if cfg.UnmarshalTo(pr) != nil || pr.GetDisabled() || pr.GetOverrides() != nil {
			c.fail("%s: ext_proc must run unmodified on a rail route", path)
		}
	}
	for k := range per {
		if k != authzName && k != procName {
			c.fail("%s: typed_per_filter_config[%s] is not part of the contract", path, k)
		}
	}
	cl, ok := c.clusters[name]
	if !ok {
		c.fail("%s: cluster %q is not defined", path, name)
		return
	}
	c.railCluster(path, cl, host)
}

// railCluster: the rail is reached over TLS, verified, at the host the
// route rewrites to.
func (c *contract) railCluster(path string, cl *clusterv3.Cluster, host string) {
	cp := fmt.Sprintf("%s: cluster %q", path, cl.GetName())
	// Reached by its name, at least once, on 443, through the system's
	// resolver (envoyconfig.RailClusterFaults says why each).
	for _, f := range envoyconfig.RailClusterFaults(cl, host, 443) {
		c.fail("%s: %s", cp, f)
	}
	ts := cl.GetTransportSocket()
	tls := &tlsv3.UpstreamTlsContext{}
	if ts == nil || ts.GetTypedConfig().UnmarshalTo(tls) != nil {
		c.fail("%s: transport_socket must be an UpstreamTlsContext", cp)
		return
	}
	if tls.GetSni() != host {
		c.fail("%s: sni %q, want %q", cp, tls.GetSni(), host)
	}
	vc := tls.GetCommonTlsContext().GetValidationContext()
	if vc.GetTrustedCa() == nil {
		c.fail("%s: validation_context.trusted_ca must be set, or the rail's certificate is not verified", cp)
	}
	sanOK := false
	for _, m := range vc.GetMatchTypedSubjectAltNames() {
		if m.GetSanType() == tlsv3.SubjectAltNameMatcher_DNS && m.GetMatcher().GetExact() == host {
			sanOK = true
		}
	}
	if !sanOK {
		c.fail("%s: validation_context must match the DNS SAN %q", cp, host)
	}
	for _, f := range envoyconfig.RailTLSFaults(tls, host) {
		c.fail("%s: %s", cp, f)
	}
}

// countersign: both gRPC filters share one HTTP/2 cluster on Countersign's
// Envoy socket.
func (c *contract) countersign() {
	cl, ok := c.clusters[countersignCluster]
	if !ok {
		c.fail("cluster %q is not defined", countersignCluster)
		return
	}
	// The ALLOW that comes back carries the rail key: the endpoint is
	// Countersign's Envoy socket, never an address the agent shares.
	for _, le := range cl.GetLoadAssignment().GetEndpoints() {
		for _, ep := range le.GetLbEndpoints() {
			if p := ep.GetEndpoint().GetAddress().GetPipe(); p == nil || p.GetPath() == "" {
				c.fail("cluster %q endpoint %v is not a pipe (Countersign's Envoy socket)", countersignCluster, ep.GetEndpoint().GetAddress())
			}
		}
	}
	po := &upstreamhttpv3.HttpProtocolOptions{}
	a, ok := cl.GetTypedExtensionProtocolOptions()[protocolOptionsKey]
	if !ok || a.UnmarshalTo(po) != nil || po.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		c.fail("cluster %q must speak HTTP/2 (typed_extension_protocol_options %s explicit_http_config.http2_protocol_options)", countersignCluster, protocolOptionsKey)
	}
}

// accessLogs: no access log may name a credential header, or read an
// x-envoy-* header the agent sets (envoyconfig.AccessLogFaults says why).
func (c *contract) accessLogs(path string, logs []*accesslogv3.AccessLog) {
	for i, l := range logs {
		faults, err := envoyconfig.AccessLogFaults(l)
		if err != nil {
			c.fail("%s: access_log[%d]: %v", path, i, err)
			continue
		}
		for _, f := range faults {
			c.fail("%s: access_log[%d] (%s) %s", path, i, l.GetTypedConfig().GetTypeUrl(), f)
		}
	}
}
