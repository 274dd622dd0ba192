package envoyconfig

import (
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestTypedStructFaults: a TypedStruct is unpacked by Envoy into whatever
// its type_url names, so the checks that read a config by its type refuse
// one (of either package) wherever it could hide upstream filters or an
// answer rewrite; a rail cluster takes HttpProtocolOptions and no other
// protocol options type.
func TestTypedStructFaults(t *testing.T) {
	typed := func(name string) *anypb.Any { return &anypb.Any{TypeUrl: "type.googleapis.com/" + name} }
	for _, tc := range []struct {
		name   string
		faults func() []string
		errHas string
	}{
		{"options xds TypedStruct", func() []string {
			return upstreamFilterFaults(clusterWithOptions(typed("xds.type.v3.TypedStruct")))
		}, "is a xds.type.v3.TypedStruct, not envoy.extensions.upstreams.http.v3.HttpProtocolOptions: Envoy unpacks a TypedStruct"},
		{"options udpa TypedStruct", func() []string {
			return upstreamFilterFaults(clusterWithOptions(typed("udpa.type.v1.TypedStruct")))
		}, "is a udpa.type.v1.TypedStruct"},
		{"options of another type", func() []string {
			return upstreamFilterFaults(clusterWithOptions(typed("envoy.extensions.upstreams.tcp.v3.TcpProtocolOptions")))
		}, "a rail cluster takes only HttpProtocolOptions"},
		{"filter as TypedStruct", func() []string {
			return LocalReplyFaults(&hcmv3.HttpConnectionManager{HttpFilters: []*hcmv3.HttpFilter{{Name: "envoy.filters.http.router",
				ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: typed("xds.type.v3.TypedStruct")}}}})
		}, `http_filters[0] "envoy.filters.http.router" is configured by a TypedStruct`},
		{"per-route TypedStruct", func() []string {
			return LocalReplyFaults(&hcmv3.HttpConnectionManager{RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
				TypedPerFilterConfig: map[string]*anypb.Any{"x": typed("udpa.type.v1.TypedStruct")}}}})
		}, `route_config typed_per_filter_config "x" is a TypedStruct`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(tc.faults(), "\n")
			if !strings.Contains(got, tc.errHas) {
				t.Fatalf("faults %q do not say %q", got, tc.errHas)
			}
		})
	}
}

func clusterWithOptions(a *anypb.Any) *clusterv3.Cluster {
	return &clusterv3.Cluster{TypedExtensionProtocolOptions: map[string]*anypb.Any{httpProtocolOptionsType: a}}
}
