package envoy

import (
	"slices"
	"testing"
)

// TestRewrittenLocalRepliesAreRefused: Envoy's own replies (504 on an
// upstream timeout, 503 on a reset) reach ext_proc's response path as the
// rail's answer would (envoyproxy/envoy#29440), and read as ambiguous only
// by their status. A local_reply_config mapper or the custom_response
// filter could make one a 400 shaped like the rail's error, a definite
// rejection of a payment that may have been applied: the contract refuses
// either, wherever it is named.
func TestRewrittenLocalRepliesAreRefused(t *testing.T) {
	hcm := []any{"static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config"}
	stripeRoute := append(slices.Clone(hcm), "route_config", "virtual_hosts", named("stripe"), "routes", 0)
	customResponse := func() map[string]any {
		return map[string]any{"@type": "type.googleapis.com/envoy.extensions.filters.http.custom_response.v3.CustomResponse"}
	}
	for _, tc := range []struct {
		name   string
		at     []any
		edit   func(m map[string]any)
		errHas string
	}{
		{name: "local_reply_config mapper turning 504 into 400", at: hcm, edit: set("local_reply_config", map[string]any{
			"mappers": []any{map[string]any{
				"filter": map[string]any{"status_code_filter": map[string]any{"comparison": map[string]any{
					"op": "EQ", "value": map[string]any{"default_value": 504, "runtime_key": "unused"}}}},
				"status_code": 400,
				"body":        map[string]any{"inline_string": `{"error":{"type":"invalid_request_error","message":"timeout"}}`},
			}},
		}), errHas: "local_reply_config must have no mappers"},
		{name: "custom_response filter before the router", at: hcm, edit: func(m map[string]any) {
			fs := m["http_filters"].([]any)
			m["http_filters"] = slices.Insert(fs, len(fs)-1, any(map[string]any{
				"name": "envoy.filters.http.custom_response", "typed_config": customResponse()}))
		}, errHas: "the custom_response filter must not be used"},
		{name: "custom_response filter under another name", at: hcm, edit: func(m map[string]any) {
			fs := m["http_filters"].([]any)
			m["http_filters"] = slices.Insert(fs, len(fs)-1, any(map[string]any{
				"name": "responses", "typed_config": customResponse()}))
		}, errHas: "http_filters[2] \"responses\": the custom_response filter must not be used"},
		{name: "custom_response per-route config on a rail route", at: stripeRoute, edit: func(m map[string]any) {
			pf, _ := m["typed_per_filter_config"].(map[string]any)
			if pf == nil {
				pf = map[string]any{}
			}
			pf["envoy.filters.http.custom_response"] = customResponse()
			m["typed_per_filter_config"] = pf
		}, errHas: "typed_per_filter_config \"envoy.filters.http.custom_response\": the custom_response filter must not be used"},
		{name: "custom_response per-route config wrapped in a FilterConfig", at: stripeRoute, edit: func(m map[string]any) {
			pf, _ := m["typed_per_filter_config"].(map[string]any)
			if pf == nil {
				pf = map[string]any{}
			}
			pf["responses"] = map[string]any{"@type": "type.googleapis.com/envoy.config.route.v3.FilterConfig", "config": customResponse()}
			m["typed_per_filter_config"] = pf
		}, errHas: "typed_per_filter_config \"responses\": the custom_response filter must not be used"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantStage(t, editedEgress(t, tc.at, tc.edit), failsContract, tc.errHas) })
	}
}
