package envoyconfig

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

const (
	// customResponseType is the custom_response filter's config, by type.
	customResponseType = "envoy.extensions.filters.http.custom_response.v3.CustomResponse"
	// customResponseName is the filter's canonical name.
	customResponseName = "envoy.filters.http.custom_response"
	// routeFilterConfigType wraps a per-route config (route.v3.FilterConfig).
	routeFilterConfigType = "envoy.config.route.v3.FilterConfig"
)

// rewriteWhy says why an answer may not be rewritten on its way back.
const rewriteWhy = "Envoy's own replies (504 on an upstream timeout, 503 on a reset) reach ext_proc's response path as the rail's answer would " +
	"(envoyproxy/envoy#29440), and read as ambiguous only because of their status: a rewrite to a 4xx, or to a body shaped like the rail's error, " +
	"turns a payment that may have been applied into a definite rejection, and the next identical request goes out under a new key"

// LocalReplyFaults lists the settings of the agents' connection manager
// that rewrite an answer's status or body before ext_proc reads it: a
// local_reply_config mapper, and the custom_response filter wherever it
// is named (a filter of the chain, or a per-route config of a virtual
// host, a route or a weighted cluster), and the router's
// upstream_http_filters (routerUpstreamFaults). A typed config given as a
// TypedStruct, which Envoy unpacks into whatever its type_url names, is
// refused wherever one of these could hide in it. A shipped config has none.
func LocalReplyFaults(h *hcmv3.HttpConnectionManager) []string {
	out := routerUpstreamFaults(h)
	if n := len(h.GetLocalReplyConfig().GetMappers()); n > 0 {
		out = append(out, fmt.Sprintf("local_reply_config must have no mappers (it has %d): %s", n, rewriteWhy))
	}
	for i, f := range h.GetHttpFilters() {
		if f.GetName() == customResponseName || isCustomResponse(f.GetTypedConfig()) ||
			slices.ContainsFunc(f.GetConfigDiscovery().GetTypeUrls(), func(u string) bool { return typeName(u) == customResponseType }) ||
			isCustomResponse(f.GetConfigDiscovery().GetDefaultConfig()) {
			out = append(out, fmt.Sprintf("http_filters[%d] %q: the custom_response filter must not be used: %s", i, f.GetName(), rewriteWhy))
		}
	}
	perFilter := func(where string, m map[string]*anypb.Any) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			switch {
			case k == customResponseName || isCustomResponse(m[k]):
				out = append(out, fmt.Sprintf("%s typed_per_filter_config %q: the custom_response filter must not be used: %s", where, k, rewriteWhy))
			case hidesTypedStruct(m[k]):
				// It may be a custom_response config under another name.
				out = append(out, fmt.Sprintf("%s typed_per_filter_config %q is a TypedStruct: %s", where, k, typedStructWhy))
			}
		}
	}
	rc := h.GetRouteConfig()
	perFilter("route_config", rc.GetTypedPerFilterConfig())
	for _, vh := range rc.GetVirtualHosts() {
		vw := fmt.Sprintf("virtual host %q", vh.GetName())
		perFilter(vw, vh.GetTypedPerFilterConfig())
		for i, rt := range vh.GetRoutes() {
			rw := fmt.Sprintf("%s route %d", vw, i)
			perFilter(rw, rt.GetTypedPerFilterConfig())
			for j, cw := range rt.GetRoute().GetWeightedClusters().GetClusters() {
				perFilter(fmt.Sprintf("%s weighted cluster %d", rw, j), cw.GetTypedPerFilterConfig())
			}
		}
	}
	return out
}

// isCustomResponse reports whether a is the custom_response filter's
// config, itself or wrapped in a route.v3.FilterConfig.
func isCustomResponse(a *anypb.Any) bool {
	switch typeName(a.GetTypeUrl()) {
	case customResponseType:
		return true
	case routeFilterConfigType:
		fc := &routev3.FilterConfig{}
		// Unreadable, it is refused by the deep validation.
		return a.UnmarshalTo(fc) == nil && isCustomResponse(fc.GetConfig())
	}
	return false
}

// hidesTypedStruct reports whether a is a TypedStruct, itself or wrapped
// in a route.v3.FilterConfig.
func hidesTypedStruct(a *anypb.Any) bool {
	if typeName(a.GetTypeUrl()) == routeFilterConfigType {
		fc := &routev3.FilterConfig{}
		return a.UnmarshalTo(fc) == nil && isTypedStruct(fc.GetConfig())
	}
	return isTypedStruct(a)
}

// typeName is the full message name a type URL names.
func typeName(url string) string {
	return url[strings.LastIndex(url, "/")+1:]
}
