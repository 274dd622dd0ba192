package envoyconfig

import (
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	upstreamcodecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestRailClusterUpstreamFilters: no filter may run between the router and
// the rail, where it would see the stamped request after ext_proc and the
// rail's answer before it.
func TestRailClusterUpstreamFilters(t *testing.T) {
	const host = "api.stripe.com"
	codec := &hcmv3.HttpFilter{Name: "envoy.filters.http.upstream_codec", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &upstreamcodecv3.UpstreamCodec{})}}
	mutation := &hcmv3.HttpFilter{Name: "envoy.filters.http.header_mutation", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &headermutationv3.HeaderMutation{})}}
	options := func(filters ...*hcmv3.HttpFilter) *anypb.Any {
		return mustAny(t, &upstreamhttpv3.HttpProtocolOptions{
			UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &corev3.Http1ProtocolOptions{}}}},
			HttpFilters: filters,
		})
	}
	clean := func() *clusterv3.Cluster {
		return &clusterv3.Cluster{
			Name:                 "stripe",
			ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_LOGICAL_DNS},
			LoadAssignment: &endpointv3.ClusterLoadAssignment{Endpoints: []*endpointv3.LocalityLbEndpoints{{LbEndpoints: []*endpointv3.LbEndpoint{{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{
					SocketAddress: &corev3.SocketAddress{Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 443}}}}}},
			}}}}},
		}
	}
	const key = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
	for _, tc := range []struct {
		name   string
		edit   func(cl *clusterv3.Cluster)
		errHas string // "" for none
	}{
		{"clean", func(*clusterv3.Cluster) {}, ""},
		{"protocol options without filters", func(cl *clusterv3.Cluster) {
			cl.TypedExtensionProtocolOptions = map[string]*anypb.Any{key: options()}
		}, ""},
		{"upstream codec alone", func(cl *clusterv3.Cluster) {
			cl.TypedExtensionProtocolOptions = map[string]*anypb.Any{key: options(codec)}
		}, `typed_extension_protocol_options[` + key + `].http_filters must be unset (it has "envoy.filters.http.upstream_codec")`},
		{"header mutation before the codec", func(cl *clusterv3.Cluster) {
			cl.TypedExtensionProtocolOptions = map[string]*anypb.Any{key: options(mutation, codec)}
		}, `"envoy.filters.http.header_mutation", "envoy.filters.http.upstream_codec"`},
		{"under another key", func(cl *clusterv3.Cluster) {
			cl.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.upstreams.http.http_protocol_options": options(codec)}
		}, "typed_extension_protocol_options[envoy.upstreams.http.http_protocol_options].http_filters must be unset"},
		{"unreadable options", func(cl *clusterv3.Cluster) {
			cl.TypedExtensionProtocolOptions = map[string]*anypb.Any{key: {TypeUrl: "type.googleapis.com/" + key, Value: []byte{0xff}}}
		}, "cannot be read as HttpProtocolOptions"},
		// Trailers reach the rail unread over HTTP/2 or with enable_trailers
		// (found by a review).
		{"HTTP/2 to the rail", func(cl *clusterv3.Cluster) {
			cl.TypedExtensionProtocolOptions = map[string]*anypb.Any{key: mustAny(t, &upstreamhttpv3.HttpProtocolOptions{
				UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
					ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}}}}})}
		}, "explicit_http_config must be http_protocol_options (HTTP/1.1)"},
		{"HTTP/1.1 with trailers", func(cl *clusterv3.Cluster) {
			cl.TypedExtensionProtocolOptions = map[string]*anypb.Any{key: mustAny(t, &upstreamhttpv3.HttpProtocolOptions{
				UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig{
					ProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &corev3.Http1ProtocolOptions{EnableTrailers: true}}}}})}
		}, "enable_trailers must be false"},
		{"the agent's protocol", func(cl *clusterv3.Cluster) {
			cl.TypedExtensionProtocolOptions = map[string]*anypb.Any{key: mustAny(t, &upstreamhttpv3.HttpProtocolOptions{
				UpstreamProtocolOptions: &upstreamhttpv3.HttpProtocolOptions_UseDownstreamProtocolConfig{UseDownstreamProtocolConfig: &upstreamhttpv3.HttpProtocolOptions_UseDownstreamHttpConfig{}}})}
		}, "must choose HTTP/1.1 by explicit_http_config"},
		{"deprecated HTTP/2 field", func(cl *clusterv3.Cluster) {
			cl.Http2ProtocolOptions = &corev3.Http2ProtocolOptions{} //nolint:staticcheck // the deprecated field still chooses HTTP/2
		}, "http2_protocol_options, protocol_selection USE_DOWNSTREAM_PROTOCOL"},
		{"upstream network filter", func(cl *clusterv3.Cluster) {
			cl.Filters = []*clusterv3.Filter{{Name: "envoy.filters.network.upstream.x"}}
		}, `filters must be unset (it has "envoy.filters.network.upstream.x")`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := clean()
			tc.edit(cl)
			got := RailClusterFaults(cl, host, 443)
			if tc.errHas == "" {
				if len(got) != 0 {
					t.Fatalf("faults %q, want none", got)
				}
				return
			}
			if len(got) != 1 || !strings.Contains(got[0], tc.errHas) {
				t.Fatalf("faults %q, want one saying %q", got, tc.errHas)
			}
		})
	}
}
