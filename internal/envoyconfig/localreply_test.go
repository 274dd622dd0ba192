package envoyconfig

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	customresponsev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/custom_response/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	upstreamcodecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestLocalReplyFaults(t *testing.T) {
	cr, err := anypb.New(&customresponsev3.CustomResponse{})
	if err != nil {
		t.Fatal(err)
	}
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		t.Fatal(err)
	}
	wrapped, err := anypb.New(&routev3.FilterConfig{Config: cr})
	if err != nil {
		t.Fatal(err)
	}
	clean := func() *hcmv3.HttpConnectionManager {
		return &hcmv3.HttpConnectionManager{
			HttpFilters: []*hcmv3.HttpFilter{{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router}}},
			RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
				VirtualHosts: []*routev3.VirtualHost{{Name: "stripe", Routes: []*routev3.Route{{
					Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_WeightedClusters{
						WeightedClusters: &routev3.WeightedCluster{Clusters: []*routev3.WeightedCluster_ClusterWeight{{Name: "stripe", Weight: wrapperspb.UInt32(1)}}}}}},
				}}}},
			}},
		}
	}
	vh := func(h *hcmv3.HttpConnectionManager) *routev3.VirtualHost {
		return h.GetRouteConfig().GetVirtualHosts()[0]
	}
	for _, tc := range []struct {
		name   string
		edit   func(h *hcmv3.HttpConnectionManager)
		errHas string // "" for none
	}{
		{"clean", func(*hcmv3.HttpConnectionManager) {}, ""},
		{"local_reply_config without mappers", func(h *hcmv3.HttpConnectionManager) {
			h.LocalReplyConfig = &hcmv3.LocalReplyConfig{}
		}, ""},
		{"local_reply_config mapper", func(h *hcmv3.HttpConnectionManager) {
			h.LocalReplyConfig = &hcmv3.LocalReplyConfig{Mappers: []*hcmv3.ResponseMapper{{StatusCode: wrapperspb.UInt32(400)}}}
		}, "local_reply_config must have no mappers"},
		{"filter by type", func(h *hcmv3.HttpConnectionManager) {
			h.HttpFilters = append([]*hcmv3.HttpFilter{{Name: "x", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: cr}}}, h.HttpFilters...)
		}, `http_filters[0] "x"`},
		{"filter by name", func(h *hcmv3.HttpConnectionManager) {
			h.HttpFilters = append([]*hcmv3.HttpFilter{{Name: "envoy.filters.http.custom_response"}}, h.HttpFilters...)
		}, `http_filters[0] "envoy.filters.http.custom_response"`},
		{"filter from discovery", func(h *hcmv3.HttpConnectionManager) {
			h.HttpFilters = append([]*hcmv3.HttpFilter{{Name: "y", ConfigType: &hcmv3.HttpFilter_ConfigDiscovery{ConfigDiscovery: &corev3.ExtensionConfigSource{
				TypeUrls: []string{"type.googleapis.com/envoy.extensions.filters.http.custom_response.v3.CustomResponse"}}}}}, h.HttpFilters...)
		}, `http_filters[0] "y"`},
		{"route_config per-filter", func(h *hcmv3.HttpConnectionManager) {
			h.GetRouteConfig().TypedPerFilterConfig = map[string]*anypb.Any{"z": cr}
		}, `route_config typed_per_filter_config "z"`},
		{"virtual host per-filter", func(h *hcmv3.HttpConnectionManager) {
			vh(h).TypedPerFilterConfig = map[string]*anypb.Any{"z": wrapped}
		}, `virtual host "stripe" typed_per_filter_config "z"`},
		{"route per-filter", func(h *hcmv3.HttpConnectionManager) {
			vh(h).Routes[0].TypedPerFilterConfig = map[string]*anypb.Any{"z": cr}
		}, `virtual host "stripe" route 0 typed_per_filter_config "z"`},
		{"weighted cluster per-filter", func(h *hcmv3.HttpConnectionManager) {
			vh(h).Routes[0].GetRoute().GetWeightedClusters().Clusters[0].TypedPerFilterConfig = map[string]*anypb.Any{"z": cr}
		}, `weighted cluster 0 typed_per_filter_config "z"`},
		// Upstream filters run inside the router: they see the rail's
		// answer before ext_proc.
		{"router upstream_http_filters", func(h *hcmv3.HttpConnectionManager) {
			codec, err := anypb.New(&upstreamcodecv3.UpstreamCodec{})
			if err != nil {
				t.Fatal(err)
			}
			r, err := anypb.New(&routerv3.Router{UpstreamHttpFilters: []*hcmv3.HttpFilter{
				{Name: "envoy.filters.http.upstream_codec", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: codec}}}})
			if err != nil {
				t.Fatal(err)
			}
			h.HttpFilters[0].ConfigType = &hcmv3.HttpFilter_TypedConfig{TypedConfig: r}
		}, `http_filters[0] "envoy.filters.http.router": upstream_http_filters must be unset (it has "envoy.filters.http.upstream_codec")`},
		{"another filter's per-route config", func(h *hcmv3.HttpConnectionManager) {
			vh(h).Routes[0].TypedPerFilterConfig = map[string]*anypb.Any{"envoy.filters.http.router": router}
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := clean()
			tc.edit(h)
			got := LocalReplyFaults(h)
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
