package envoy

import (
	"slices"
	"testing"
)

// TestUpstreamFiltersAreRefused: an upstream HTTP filter runs inside the
// router, after ext_proc stamped the request and before it reads the
// rail's answer: it could rewrite a 200 into what reads as the rail's
// refusal. The contract refuses one in a rail cluster's
// HttpProtocolOptions and in the router's upstream_http_filters, and the
// filters' types are registered, so the refusal is the contract's, not an
// unresolvable @type's.
func TestUpstreamFiltersAreRefused(t *testing.T) {
	hcm := []any{"static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config"}
	router := append(slices.Clone(hcm), "http_filters", named("envoy.filters.http.router"), "typed_config")
	stripe := []any{"static_resources", "clusters", named("stripe")}
	codec := map[string]any{"name": "envoy.filters.http.upstream_codec",
		"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"}}
	mutation := map[string]any{"name": "envoy.filters.http.header_mutation",
		"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation",
			"mutations": map[string]any{"response_mutations": []any{map[string]any{"remove": "x-request-id"}}}}}
	options := func(key string, filters ...any) func(m map[string]any) {
		return func(m map[string]any) {
			po := map[string]any{"@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
				"explicit_http_config": map[string]any{"http_protocol_options": map[string]any{}}}
			if len(filters) > 0 {
				po["http_filters"] = filters
			}
			m["typed_extension_protocol_options"] = map[string]any{key: po}
		}
	}
	for _, tc := range []struct {
		name   string
		at     []any
		edit   func(m map[string]any)
		want   stage
		errHas string
	}{
		{name: "rail cluster protocol options without filters", at: stripe, edit: options("envoy.extensions.upstreams.http.v3.HttpProtocolOptions"), want: passes},
		{name: "rail cluster with the upstream codec alone", at: stripe, edit: options("envoy.extensions.upstreams.http.v3.HttpProtocolOptions", codec),
			want: failsContract, errHas: `typed_extension_protocol_options[envoy.extensions.upstreams.http.v3.HttpProtocolOptions].http_filters must be unset (it has "envoy.filters.http.upstream_codec")`},
		{name: "rail cluster rewriting the answer's headers upstream", at: stripe, edit: options("envoy.extensions.upstreams.http.v3.HttpProtocolOptions", mutation, codec),
			want: failsContract, errHas: `"envoy.filters.http.header_mutation", "envoy.filters.http.upstream_codec"`},
		{name: "rail cluster protocol options under the legacy key", at: stripe, edit: options("envoy.upstreams.http.http_protocol_options", codec),
			want: failsContract, errHas: "typed_extension_protocol_options[envoy.upstreams.http.http_protocol_options].http_filters must be unset"},
		{name: "router upstream_http_filters", at: router, edit: set("upstream_http_filters", []any{mutation, codec}),
			want: failsContract, errHas: `upstream_http_filters must be unset (it has "envoy.filters.http.header_mutation", "envoy.filters.http.upstream_codec")`},
	} {
		t.Run(tc.name, func(t *testing.T) { wantStage(t, editedEgress(t, tc.at, tc.edit), tc.want, tc.errHas) })
	}
}
