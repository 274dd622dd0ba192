package main

import (
	"errors"
	"fmt"
	"slices"

	"sigs.k8s.io/yaml"

	// Envoy knows these, so the parse here does too: a copy whose rail
	// cluster picks its upstream from the request, or names its own DNS
	// resolver, must be refused for that, not for an unknown @type.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/dynamic_forward_proxy/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/network/dns_resolver/cares/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
)

// railCluster is the default rendering's first rail cluster.
const railCluster = "rail-stripe"

// envoyMutations break the egress pod's Envoy: its command line, or its
// bootstrap edited as a document (each edit parses and validates, so only
// the meaning of the change can be what is caught).
var envoyMutations = []mutation{
	{"envoy at --log-level debug (its router logs the rail key ext_authz set)", invEnvoyLog, func(d []map[string]any) error {
		return setEnvoyArg(d, "--log-level", "debug")
	}},
	{"envoy at -l trace", invEnvoyLog, func(d []map[string]any) error {
		return replaceEnvoyArgs(d, func(args []any) []any {
			i := slices.Index(args, any("--log-level"))
			if i < 0 {
				return nil
			}
			return slices.Concat(args[:i], []any{"-l", "trace"}, args[i+2:])
		})
	}},
	{"envoy at --log-level=debug", invEnvoyLog, func(d []map[string]any) error {
		return replaceEnvoyArgs(d, func(args []any) []any {
			i := slices.Index(args, any("--log-level"))
			if i < 0 {
				return nil
			}
			return slices.Concat(args[:i], []any{"--log-level=debug"}, args[i+2:])
		})
	}},
	{"envoy raising its router to debug (--component-log-level)", invEnvoyLog, func(d []map[string]any) error {
		return replaceEnvoyArgs(d, func(args []any) []any {
			return append(args, "--component-log-level", "upstream:info,router:debug")
		})
	}},
	{"a rail Service of type LoadBalancer (the egress listener on the internet)", invServices, func(d []map[string]any) error {
		return setServices(d, "type", "LoadBalancer")
	}},
	{"a rail Service of type NodePort", invServices, func(d []map[string]any) error {
		return setServices(d, "type", "NodePort")
	}},
	{"a rail Service with an external IP", invServices, func(d []map[string]any) error {
		return setServices(d, "externalIPs", []any{"203.0.113.7"})
	}},
	{"a rail certificate chain not verified (ACCEPT_UNTRUSTED: any self-signed certificate naming the rail)", invEnvoy, editRailValidation(func(vc map[string]any) {
		vc["trust_chain_verification"] = "ACCEPT_UNTRUSTED"
	})},
	{"a rail certificate that may be expired", invEnvoy, editRailValidation(func(vc map[string]any) {
		vc["allow_expired_certificate"] = true
	})},
	{"a rail certificate checked by a custom validator", invEnvoy, editRailValidation(func(vc map[string]any) {
		vc["custom_validator_config"] = map[string]any{
			"name": "envoy.tls.cert_validator.spiffe",
			"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.SPIFFECertValidatorConfig",
				"trust_domains": []any{map[string]any{"name": "api.stripe.com", "trust_bundle": map[string]any{"filename": "/etc/bundle.pem"}}}},
		}
	})},
	{"a second SAN matcher that accepts other names", invEnvoy, editRailValidation(func(vc map[string]any) {
		vc["match_typed_subject_alt_names"] = append(vc["match_typed_subject_alt_names"].([]any),
			map[string]any{"san_type": "DNS", "matcher": map[string]any{"suffix": ".com"}})
	})},
	{"a rail validation context from SDS", invEnvoy, editRail(func(cl map[string]any) error {
		ctc, err := at(cl, "transport_socket", "typed_config", "common_tls_context")
		if err != nil {
			return err
		}
		delete(ctc, "validation_context")
		ctc["validation_context_sds_secret_config"] = map[string]any{"name": "rail-ca"}
		return nil
	})},
	{"a rail cluster steered by the agent's x-envoy-original-dst-host (ORIGINAL_DST)", invEnvoy, editRail(func(cl map[string]any) error {
		cl["type"], cl["lb_policy"] = "ORIGINAL_DST", "CLUSTER_PROVIDED"
		cl["original_dst_lb_config"] = map[string]any{"use_http_header": true}
		delete(cl, "load_assignment")
		return nil
	})},
	{"a rail cluster as a dynamic forward proxy (the Host picks the upstream)", invEnvoy, editRail(func(cl map[string]any) error {
		delete(cl, "type")
		delete(cl, "load_assignment")
		cl["lb_policy"] = "CLUSTER_PROVIDED"
		cl["cluster_type"] = map[string]any{"name": "envoy.clusters.dynamic_forward_proxy", "typed_config": map[string]any{
			"@type":            "type.googleapis.com/envoy.extensions.clusters.dynamic_forward_proxy.v3.ClusterConfig",
			"dns_cache_config": map[string]any{"name": "dfp", "dns_lookup_family": "V4_ONLY"},
		}}
		return nil
	})},
	{"a rail cluster with no endpoint", invEnvoy, editRail(func(cl map[string]any) error {
		cl["type"] = "STRICT_DNS"
		cl["load_assignment"] = map[string]any{"cluster_name": railCluster, "endpoints": []any{}}
		return nil
	})},
	{"a rail endpoint on another host", invEnvoy, editRail(func(cl map[string]any) error {
		a, err := at(cl, "load_assignment", "endpoints", 0, "lb_endpoints", 0, "endpoint", "address", "socket_address")
		if err != nil {
			return err
		}
		a["address"] = "rails.example.net"
		return nil
	})},
	{"a rail name resolved by a resolver the config names", invEnvoy, editRail(func(cl map[string]any) error {
		cl["typed_dns_resolver_config"] = map[string]any{
			"name": "envoy.network.dns_resolver.cares",
			"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.network.dns_resolver.cares.v3.CaresDnsResolverConfig",
				"resolvers": []any{map[string]any{"socket_address": map[string]any{"address": "203.0.113.53", "port_value": 53}}}},
		}
		return nil
	})},
	{"a rail cluster whose transport_socket_matches can pick plain TCP", invEnvoy, editRail(func(cl map[string]any) error {
		cl["transport_socket_matches"] = []any{map[string]any{"name": "plain", "match": map[string]any{},
			"transport_socket": map[string]any{"name": "envoy.transport_sockets.raw_buffer", "typed_config": map[string]any{
				"@type": "type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer"}}}}
		return nil
	})},
	{"WebSocket upgrades on the agents' listener", invEnvoy, editHCM(func(h map[string]any) error {
		h["upgrade_configs"] = []any{map[string]any{"upgrade_type": "websocket"}}
		return nil
	})},
	{"CONNECT over HTTP/2 on the agents' listener", invEnvoy, editHCM(func(h map[string]any) error {
		h["http2_protocol_options"] = map[string]any{"allow_connect": true}
		return nil
	})},
	{"header names with underscores let through (stripe_account is Stripe-Account to a CGI-style server)", invEnvoy, editHCM(func(h map[string]any) error {
		h["common_http_protocol_options"] = map[string]any{"headers_with_underscores_action": "ALLOW"}
		return nil
	})},
	{"HTTP/1.0 on the agents' listener", invEnvoy, editHCM(func(h map[string]any) error {
		h["http_protocol_options"] = map[string]any{"accept_http_10": true}
		return nil
	})},
	{"a local_reply_config that rewrites Envoy's 504 into a 400 (a timed-out payment read as rejected)", invEnvoy, editHCM(func(h map[string]any) error {
		h["local_reply_config"] = map[string]any{"mappers": []any{map[string]any{
			"filter": map[string]any{"status_code_filter": map[string]any{"comparison": map[string]any{
				"op": "EQ", "value": map[string]any{"default_value": 504, "runtime_key": "unused"}}}},
			"status_code": 400,
		}}}
		return nil
	})},
	{"a rail route with a custom_response per-route config", invEnvoy, editHCM(func(h map[string]any) error {
		rt, err := at(h, "route_config", "virtual_hosts", 0, "routes", 0)
		if err != nil {
			return err
		}
		pf, _ := rt["typed_per_filter_config"].(map[string]any)
		if pf == nil {
			pf = map[string]any{}
		}
		pf["envoy.filters.http.custom_response"] = map[string]any{
			"@type": "type.googleapis.com/envoy.extensions.filters.http.custom_response.v3.CustomResponse"}
		rt["typed_per_filter_config"] = pf
		return nil
	})},
	// An upstream filter runs inside the router, after ext_proc stamped
	// the request and before it reads the rail's answer.
	{"a rail cluster with an upstream HTTP filter (it sees the answer before ext_proc)", invEnvoy, editRail(func(cl map[string]any) error {
		cl["typed_extension_protocol_options"] = map[string]any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": map[string]any{
			"@type":                "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
			"explicit_http_config": map[string]any{"http_protocol_options": map[string]any{}},
			"http_filters": []any{map[string]any{"name": "envoy.filters.http.upstream_codec",
				"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"}}},
		}}
		return nil
	})},
	// Envoy unpacks a TypedStruct into the type its type_url names: the
	// same options, hidden from a check that reads them by type.
	{"a rail cluster's HttpProtocolOptions as a TypedStruct carrying an upstream filter", invEnvoy, editRail(func(cl map[string]any) error {
		cl["typed_extension_protocol_options"] = map[string]any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": map[string]any{
			"@type":    "type.googleapis.com/xds.type.v3.TypedStruct",
			"type_url": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
			"value": map[string]any{"explicit_http_config": map[string]any{"http_protocol_options": map[string]any{}},
				"http_filters": []any{map[string]any{"name": "envoy.filters.http.upstream_codec",
					"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"}}}},
		}}
		return nil
	})},
	// A route without ext_proc config of its own takes the route
	// configuration's; connections no chain matches take a default chain.
	{"ext_proc disabled for the whole route configuration", invEnvoy, editHCM(func(h map[string]any) error {
		rc, err := at(h, "route_config")
		if err != nil {
			return err
		}
		rc["typed_per_filter_config"] = map[string]any{"envoy.filters.http.ext_proc": map[string]any{
			"@type": "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute", "disabled": true}}
		return nil
	})},
	{"the checked filter chain matching one port, and a default chain for the rest", invEnvoy, func(d []map[string]any) error {
		return editEnvoy(d, func(b map[string]any) error {
			l, err := at(b, "static_resources", "listeners", 0)
			if err != nil {
				return err
			}
			fc, err := at(l, "filter_chains", 0)
			if err != nil {
				return err
			}
			fc["filter_chain_match"] = map[string]any{"destination_port": 1}
			l["default_filter_chain"] = map[string]any{"filters": fc["filters"]}
			return nil
		})
	}},
	{"a router with upstream_http_filters (they run for every cluster naming none)", invEnvoy, editHCM(func(h map[string]any) error {
		fs, _ := h["http_filters"].([]any)
		for _, f := range fs {
			if f, _ := f.(map[string]any); f["name"] == "envoy.filters.http.router" {
				tc, err := at(f, "typed_config")
				if err != nil {
					return err
				}
				tc["upstream_http_filters"] = []any{map[string]any{"name": "envoy.filters.http.upstream_codec",
					"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"}}}
				return nil
			}
		}
		return errors.New("no router filter")
	})},
	{"a rail route that enables WebSocket upgrades itself", invEnvoy, editHCM(func(h map[string]any) error {
		ra, err := at(h, "route_config", "virtual_hosts", 0, "routes", 0, "route")
		if err != nil {
			return err
		}
		ra["upgrade_configs"] = []any{map[string]any{"upgrade_type": "websocket", "enabled": true}}
		return nil
	})},
}

func envoyArgs(d []map[string]any) (map[string]any, []any, error) {
	c, err := egressContainer(d, "envoy")
	if err != nil {
		return nil, nil, err
	}
	args, _ := c["args"].([]any)
	return c, args, nil
}

// setEnvoyArg sets the value that follows flag in envoy's args.
func setEnvoyArg(d []map[string]any, flag, value string) error {
	_, args, err := envoyArgs(d)
	if err != nil {
		return err
	}
	i := slices.Index(args, any(flag))
	if i < 0 || i+1 >= len(args) {
		return fmt.Errorf("envoy's args have no %s value", flag)
	}
	args[i+1] = value
	return nil
}

func replaceEnvoyArgs(d []map[string]any, edit func([]any) []any) error {
	c, args, err := envoyArgs(d)
	if err != nil {
		return err
	}
	out := edit(slices.Clone(args))
	if out == nil {
		return fmt.Errorf("envoy's args %v cannot be edited so", args)
	}
	c["args"] = out
	return nil
}

// setServices sets spec.key on every Service.
func setServices(d []map[string]any, key string, v any) error {
	n := 0
	for _, o := range d {
		if o["kind"] != "Service" {
			continue
		}
		spec, _ := o["spec"].(map[string]any)
		spec[key] = v
		n++
	}
	if n == 0 {
		return errors.New("no Service")
	}
	return nil
}

// editEnvoy parses the rendered Envoy bootstrap (the ConfigMap key
// envoy.yaml), edits it and writes it back as YAML.
func editEnvoy(d []map[string]any, edit func(b map[string]any) error) error {
	for _, o := range d {
		data, _ := o["data"].(map[string]any)
		s, ok := data["envoy.yaml"].(string)
		if o["kind"] != "ConfigMap" || !ok {
			continue
		}
		var b map[string]any
		if err := yaml.Unmarshal([]byte(s), &b); err != nil {
			return err
		}
		if err := edit(b); err != nil {
			return err
		}
		out, err := yaml.Marshal(b)
		if err != nil {
			return err
		}
		data["envoy.yaml"] = string(out)
		return nil
	}
	return errors.New("no ConfigMap with envoy.yaml")
}

func editRail(edit func(cl map[string]any) error) func([]map[string]any) error {
	return func(d []map[string]any) error {
		return editEnvoy(d, func(b map[string]any) error {
			cls, _ := at(b, "static_resources")
			for _, c := range cls["clusters"].([]any) {
				if cl, _ := c.(map[string]any); cl["name"] == railCluster {
					return edit(cl)
				}
			}
			return fmt.Errorf("no cluster %s", railCluster)
		})
	}
}

func editRailValidation(edit func(vc map[string]any)) func([]map[string]any) error {
	return editRail(func(cl map[string]any) error {
		vc, err := at(cl, "transport_socket", "typed_config", "common_tls_context", "validation_context")
		if err != nil {
			return err
		}
		edit(vc)
		return nil
	})
}

func editHCM(edit func(h map[string]any) error) func([]map[string]any) error {
	return func(d []map[string]any) error {
		return editEnvoy(d, func(b map[string]any) error {
			h, err := at(b, "static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config")
			if err != nil {
				return err
			}
			return edit(h)
		})
	}
}

// at walks a generic document by map keys and list indexes to a map.
func at(v any, path ...any) (map[string]any, error) {
	for i, p := range path {
		switch p := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[p]
		case int:
			l, _ := v.([]any)
			if p >= len(l) {
				return nil, fmt.Errorf("no index %d at %v", p, path[:i])
			}
			v = l[p]
		}
		if v == nil {
			return nil, fmt.Errorf("nothing at %v", path[:i+1])
		}
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%v is not a map", path)
	}
	return m, nil
}
