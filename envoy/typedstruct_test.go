package envoy

import (
	"slices"
	"testing"
)

// TestTypedStructIsRefused: Envoy unpacks a TypedStruct into the message
// its type_url names, so a rail cluster's HttpProtocolOptions, the router
// or a custom_response config given as one would carry upstream filters or
// an answer rewrite past every check that reads a typed config by type.
// The contract refuses a TypedStruct wherever one of these could hide (the
// xds one; udpa.type.v1's is not registered, so it fails to parse).
func TestTypedStructIsRefused(t *testing.T) {
	hcm := []any{"static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config"}
	router := append(slices.Clone(hcm), "http_filters", named("envoy.filters.http.router"))
	stripe := []any{"static_resources", "clusters", named("stripe")}
	vhost := append(slices.Clone(hcm), "route_config", "virtual_hosts", named("stripe"))
	const ts = "type.googleapis.com/xds.type.v3.TypedStruct"
	codec := map[string]any{"name": "envoy.filters.http.upstream_codec",
		"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"}}
	for _, tc := range []struct {
		name   string
		at     []any
		edit   func(m map[string]any)
		want   stage
		errHas string
	}{
		{name: "protocol options as a TypedStruct", at: stripe, edit: func(m map[string]any) {
			m["typed_extension_protocol_options"] = map[string]any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": map[string]any{
				"@type": ts, "type_url": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
				"value": map[string]any{"explicit_http_config": map[string]any{"http_protocol_options": map[string]any{}}, "http_filters": []any{codec}}}}
		}, want: failsContract, errHas: "typed_extension_protocol_options[envoy.extensions.upstreams.http.v3.HttpProtocolOptions] is a xds.type.v3.TypedStruct"},
		{name: "protocol options of another type", at: stripe, edit: func(m map[string]any) {
			m["typed_extension_protocol_options"] = map[string]any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": map[string]any{
				"@type": "type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"}}
		}, want: failsContract, errHas: "is a envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec, not envoy.extensions.upstreams.http.v3.HttpProtocolOptions"},
		{name: "router as a TypedStruct", at: router, edit: func(m map[string]any) {
			m["typed_config"] = map[string]any{"@type": ts, "type_url": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router",
				"value": map[string]any{"upstream_http_filters": []any{codec}}}
		}, want: failsContract, errHas: `"envoy.filters.http.router" is configured by a TypedStruct`},
		{name: "custom_response per route as a TypedStruct", at: vhost, edit: func(m map[string]any) {
			m["typed_per_filter_config"] = map[string]any{"envoy.filters.http.x": map[string]any{
				"@type": ts, "type_url": "type.googleapis.com/envoy.extensions.filters.http.custom_response.v3.CustomResponse", "value": map[string]any{}}}
		}, want: failsContract, errHas: `typed_per_filter_config "envoy.filters.http.x" is a TypedStruct`},
		{name: "custom_response in a FilterConfig as a TypedStruct", at: vhost, edit: func(m map[string]any) {
			m["typed_per_filter_config"] = map[string]any{"envoy.filters.http.x": map[string]any{
				"@type":  "type.googleapis.com/envoy.config.route.v3.FilterConfig",
				"config": map[string]any{"@type": ts, "type_url": "type.googleapis.com/envoy.extensions.filters.http.custom_response.v3.CustomResponse", "value": map[string]any{}}}}
		}, want: failsContract, errHas: `typed_per_filter_config "envoy.filters.http.x" is a TypedStruct`},
		{name: "udpa TypedStruct", at: stripe, edit: func(m map[string]any) {
			m["typed_extension_protocol_options"] = map[string]any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": map[string]any{
				"@type": "type.googleapis.com/udpa.type.v1.TypedStruct", "type_url": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions", "value": map[string]any{}}}
		}, want: failsParse},
	} {
		t.Run(tc.name, func(t *testing.T) { wantStage(t, editedEgress(t, tc.at, tc.edit), tc.want, tc.errHas) })
	}
}
