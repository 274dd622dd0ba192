package envoyconfig

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

const (
	// httpProtocolOptionsType is a cluster's HTTP protocol options, by type.
	httpProtocolOptionsType = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
	// routerType is the router filter's config, by type.
	routerType = "envoy.extensions.filters.http.router.v3.Router"
)

// typedStructWhy says why a typed config may not come as a TypedStruct.
const typedStructWhy = "Envoy unpacks a TypedStruct into the message its type_url names (translateOpaqueConfig), " +
	"so what it configures escapes every check that reads a typed config by its type: give the message itself"

// isTypedStruct reports whether a is a TypedStruct, of either package.
func isTypedStruct(a *anypb.Any) bool {
	switch typeName(a.GetTypeUrl()) {
	case "xds.type.v3.TypedStruct", "udpa.type.v1.TypedStruct":
		return true
	}
	return false
}

// trailersWhy says why a rail is spoken to in HTTP/1.1 without trailers.
// Countersign reads a request's headers and body, not its trailers; Envoy's
// HTTP/1 encoder drops a request's trailers unless enable_trailers is set
// (http1/codec_impl.cc, encodeTrailersBase), and over HTTP/2 or HTTP/3 it
// sends them, so a stripe-account trailer the agent added would reach the
// rail unread (found by a review).
const trailersWhy = "Countersign does not read a request's trailers, which Envoy sends to the rail only over HTTP/2 or HTTP/3, or HTTP/1.1 with enable_trailers"

// upstreamWhy says why no filter may run between the router and the rail.
const upstreamWhy = "upstream filters run inside the router, after ext_proc has stamped the request and before it reads the rail's answer: " +
	"they could change the stamped request Countersign recorded, or rewrite the answer (a 200 into a 4xx, a body into the rail's error) " +
	"so that a payment that may have been applied reads as a definite rejection, and the next identical request goes out under a new key"

// upstreamFilterFaults lists what runs between the router and a rail
// cluster: http_filters in the cluster's HttpProtocolOptions (under any
// key of typed_extension_protocol_options; Envoy runs them in place of the
// router's upstream_http_filters), and upstream network filters, which see
// the connection's plaintext bytes. An options message that cannot be read
// is a fault too: what it holds is unknown. So is one of any other type:
// a TypedStruct whose type_url names HttpProtocolOptions is read by Envoy
// as the options themselves, filters included, and a rail cluster needs no
// other protocol options (an allowlist of one type).
func upstreamFilterFaults(cl *clusterv3.Cluster) []string {
	var out []string
	opts := cl.GetTypedExtensionProtocolOptions()
	for _, k := range slices.Sorted(maps.Keys(opts)) {
		a := opts[k]
		if t := typeName(a.GetTypeUrl()); t != httpProtocolOptionsType {
			why := "a rail cluster takes only HttpProtocolOptions, whose http_filters are checked"
			if isTypedStruct(a) {
				why = typedStructWhy
			}
			out = append(out, fmt.Sprintf("typed_extension_protocol_options[%s] is a %s, not %s: %s", k, t, httpProtocolOptionsType, why))
			continue
		}
		po := &upstreamhttpv3.HttpProtocolOptions{}
		if err := a.UnmarshalTo(po); err != nil {
			out = append(out, fmt.Sprintf("typed_extension_protocol_options[%s] cannot be read as HttpProtocolOptions (%v): it may carry upstream filters", k, err))
			continue
		}
		if fs := po.GetHttpFilters(); len(fs) > 0 {
			out = append(out, fmt.Sprintf("typed_extension_protocol_options[%s].http_filters must be unset (it has %s): %s", k, filterNames(fs), upstreamWhy))
		}
		switch c := po.GetUpstreamProtocolOptions().(type) {
		case nil:
		case *upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_:
			if h1 := c.ExplicitHttpConfig.GetHttpProtocolOptions(); h1 == nil {
				out = append(out, fmt.Sprintf("typed_extension_protocol_options[%s].explicit_http_config must be http_protocol_options (HTTP/1.1): %s", k, trailersWhy))
			} else if h1.GetEnableTrailers() {
				out = append(out, fmt.Sprintf("typed_extension_protocol_options[%s].explicit_http_config.http_protocol_options.enable_trailers must be false: %s", k, trailersWhy))
			}
		default:
			out = append(out, fmt.Sprintf("typed_extension_protocol_options[%s] must choose HTTP/1.1 by explicit_http_config (not %T): %s", k, c, trailersWhy))
		}
	}
	//nolint:staticcheck // the deprecated fields still choose the protocol
	if cl.GetHttp2ProtocolOptions() != nil || cl.GetProtocolSelection() == clusterv3.Cluster_USE_DOWNSTREAM_PROTOCOL || cl.GetHttpProtocolOptions().GetEnableTrailers() {
		out = append(out, "http2_protocol_options, protocol_selection USE_DOWNSTREAM_PROTOCOL and http_protocol_options.enable_trailers must be unset: "+trailersWhy)
	}
	if fs := cl.GetFilters(); len(fs) > 0 {
		names := make([]string, len(fs))
		for i, f := range fs {
			names[i] = fmt.Sprintf("%q", f.GetName())
		}
		out = append(out, fmt.Sprintf("filters must be unset (it has %s): upstream network filters see the request and the answer in plaintext", strings.Join(names, ", ")))
	}
	return out
}

// routerUpstreamFaults lists the router filters of the agents' connection
// manager that carry upstream_http_filters: Envoy runs them for every
// cluster whose protocol options name none, the rail's included. A filter
// configured by a TypedStruct is refused: it may be a Router (or any
// filter) whose config no check here reads.
func routerUpstreamFaults(h *hcmv3.HttpConnectionManager) []string {
	var out []string
	for i, f := range h.GetHttpFilters() {
		a := f.GetTypedConfig()
		if isTypedStruct(a) || isTypedStruct(f.GetConfigDiscovery().GetDefaultConfig()) {
			out = append(out, fmt.Sprintf("http_filters[%d] %q is configured by a TypedStruct: %s", i, f.GetName(), typedStructWhy))
			continue
		}
		if typeName(a.GetTypeUrl()) != routerType {
			continue
		}
		r := &routerv3.Router{}
		if err := a.UnmarshalTo(r); err != nil {
			out = append(out, fmt.Sprintf("http_filters[%d] %q cannot be read as a Router (%v): it may carry upstream filters", i, f.GetName(), err))
			continue
		}
		if fs := r.GetUpstreamHttpFilters(); len(fs) > 0 {
			out = append(out, fmt.Sprintf("http_filters[%d] %q: upstream_http_filters must be unset (it has %s): %s", i, f.GetName(), filterNames(fs), upstreamWhy))
		}
	}
	return out
}

func filterNames(fs []*hcmv3.HttpFilter) string {
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = fmt.Sprintf("%q", f.GetName())
	}
	return strings.Join(names, ", ")
}
