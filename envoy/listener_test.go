package envoy

import (
	"encoding/json"
	"testing"
)

// TestTrafficPastTheCheckedChainIsRefused: the contract checks the
// listener's filter chains and each rail route's per-filter config; a
// route configuration's own per-filter config (which a route without its
// own takes: ext_proc disabled there lets a rail request leave unmarked,
// later settled as never sent), a default filter chain or chain matcher
// (taken by connections no chain matches), or a match on the checked chain
// (leaving the rest to another) would carry traffic past those checks
// (found by a review: each passed every stage).
func TestTrafficPastTheCheckedChainIsRefused(t *testing.T) {
	listener := []any{"static_resources", "listeners", 0}
	hcm := []any{"static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config"}
	routeConfig := append(append([]any{}, hcm...), "route_config")
	chain := []any{"static_resources", "listeners", 0, "filter_chains", 0}
	for _, tc := range []struct {
		name   string
		at     []any
		edit   func(m map[string]any)
		errHas string
	}{
		{name: "ext_proc disabled for the route configuration", at: routeConfig, edit: set("typed_per_filter_config", map[string]any{
			"envoy.filters.http.ext_proc": map[string]any{
				"@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute", "disabled": true}}),
			errHas: "route_config: per-filter config belongs on the routes"},
		{name: "a default filter chain", at: listener, edit: func(m map[string]any) {
			// The checked chain, copied: even an identical default chain is
			// one the contract would have to check again.
			b, err := json.Marshal(m["filter_chains"].([]any)[0])
			if err != nil {
				t.Fatal(err)
			}
			var dc map[string]any
			if err := json.Unmarshal(b, &dc); err != nil {
				t.Fatal(err)
			}
			m["default_filter_chain"] = dc
		}, errHas: "default_filter_chain and filter_chain_matcher must be unset"},
		{name: "the checked chain matching only port 1", at: chain, edit: set("filter_chain_match", map[string]any{"destination_port": 1}),
			errHas: "filter_chain_match must be unset"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantStage(t, editedEgress(t, tc.at, tc.edit), failsContract, tc.errHas) })
	}
}
