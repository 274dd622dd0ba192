package envoy

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	// Envoy knows the TCP proxy, so the parse here does too: a copy that
	// relays loopback TCP to Countersign's socket must be refused by the
	// contract, not by an unknown @type.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	// Likewise Envoy's default original-IP detector, in a copy that adds it.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/http/original_ip_detection/xff/v3"
	// And a cluster that picks its upstream from the request, and a DNS
	// resolver the config names, in copies whose rail cluster uses them.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/dynamic_forward_proxy/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/network/dns_resolver/cares/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"
)

// egressConfig is the agent-pod egress bootstrap.
const egressConfig = "egress.yaml"

// bootstrapFiles are the shipped Envoy bootstraps: every YAML file in this
// directory (the Istio examples live in istio/ and are not bootstraps).
func bootstrapFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(files, egressConfig) {
		t.Fatalf("%s is not among the shipped configs %v", egressConfig, files)
	}
	return files
}

// TestShippedBootstraps parses, deep-validates and contract-checks every
// shipped bootstrap.
func TestShippedBootstraps(t *testing.T) {
	for _, f := range bootstrapFiles(t) {
		t.Run(f, func(t *testing.T) {
			b, err := loadBootstrap(f)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if _, err := validateDeep(b); err != nil {
				t.Fatalf("validate:\n%v", err)
			}
			if err := checkContract(b); err != nil {
				t.Fatalf("contract:\n%v", err)
			}
		})
	}
}

// TestDeepValidationReachesEveryAny proves the walk unpacks the Anys at
// every depth: the filter configs inside the connection manager inside the
// listener, the per-route configs inside its routes, the TLS contexts and
// protocol options of the clusters, the access logger.
func TestDeepValidationReachesEveryAny(t *testing.T) {
	b, err := loadBootstrap(egressConfig)
	if err != nil {
		t.Fatal(err)
	}
	res, err := validateDeep(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"envoy.extensions.access_loggers.stream.v3.StdoutAccessLog",
		"envoy.extensions.filters.http.ext_authz.v3.ExtAuthz",
		"envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute",
		"envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute",
		"envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor",
		"envoy.extensions.filters.http.router.v3.Router",
		"envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
		"envoy.extensions.http.original_ip_detection.custom_header.v3.CustomHeaderConfig",
		"envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
		"envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
	}
	if got := res.Types(); !slices.Equal(got, want) {
		t.Errorf("unpacked types\n got %q\nwant %q", got, want)
	}
	// Two levels of Any: a per-route config inside the connection manager.
	const nested = "static_resources.listeners[0].filter_chains[0].filters[0].typed_config<HttpConnectionManager>" +
		".route_config.virtual_hosts[0].routes[0].typed_per_filter_config[envoy.filters.http.ext_authz]<ExtAuthzPerRoute>"
	if res.Anys[nested] == "" {
		t.Errorf("no Any at %s; walked:\n%s", nested, strings.Join(slices.Sorted(maps.Keys(res.Anys)), "\n"))
	}
}

// TestUnresolvableAnyNamesItsPath: protojson already refuses an unknown
// @type in a file, so the walker's own check is exercised on a message
// built in Go — the shape an xDS server could send.
func TestUnresolvableAnyNamesItsPath(t *testing.T) {
	b := &bootstrapv3.Bootstrap{StaticResources: &bootstrapv3.Bootstrap_StaticResources{
		Listeners: []*listenerv3.Listener{{
			Name: "l",
			FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
				Name:       "f",
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: &anypb.Any{TypeUrl: "type.googleapis.com/countersign.test.NoSuchFilter"}},
			}}}},
		}},
	}}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("the outer message is valid, ValidateAll says %v", err)
	}
	_, err := validateDeep(b)
	if err == nil {
		t.Fatal("an unresolvable type URL passed")
	}
	for _, want := range []string{"static_resources.listeners[0].filter_chains[0].filters[0].typed_config", "countersign.test.NoSuchFilter"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

// TestInvalidAnyValueIsCaught: bytes that do not decode as the named type.
func TestInvalidAnyValueIsCaught(t *testing.T) {
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{})
	if err != nil {
		t.Fatal(err)
	}
	hcm.Value = []byte{0x0a, 0xff} // field 1, length 255, nothing follows
	b := &bootstrapv3.Bootstrap{StaticResources: &bootstrapv3.Bootstrap_StaticResources{
		Listeners: []*listenerv3.Listener{{Name: "l", FilterChains: []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{{
			Name: "f", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: hcm},
		}}}}}},
	}}
	if _, err := validateDeep(b); err == nil || !strings.Contains(err.Error(), "filters[0].typed_config") {
		t.Fatalf("validateDeep = %v, want an error at filters[0].typed_config", err)
	}
}

type stage int

const (
	passes stage = iota
	failsParse
	failsValidation
	failsContract
)

func (s stage) String() string {
	return [...]string{"passes", "fails parse", "fails validation", "fails contract"}[s]
}

// TestBrokenCopiesAreCaught breaks a copy of egress.yaml one way at a time
// and checks the first stage that must catch it does, and the earlier
// stages do not (so each case tests what it says).
func TestBrokenCopiesAreCaught(t *testing.T) {
	hcm := []any{"static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config"}
	filter := func(name string) []any { return append(slices.Clone(hcm), "http_filters", named(name), "typed_config") }
	authz, proc := filter("envoy.filters.http.ext_authz"), filter("envoy.filters.http.ext_proc")
	stripeVH := append(slices.Clone(hcm), "route_config", "virtual_hosts", named("stripe"))
	stripeRoute := append(slices.Clone(stripeVH), "routes", 0)
	cluster := func(name string) []any { return []any{"static_resources", "clusters", named(name)} }
	stripeCTC := append(cluster("stripe"), "transport_socket", "typed_config", "common_tls_context")
	stripeVC := append(slices.Clone(stripeCTC), "validation_context")
	stripeEndpoint := append(cluster("stripe"), "load_assignment", "endpoints", 0, "lb_endpoints", 0, "endpoint")
	stripeAddress := append(slices.Clone(stripeEndpoint), "address")

	cases := []struct {
		name   string
		at     []any
		edit   func(m map[string]any)
		want   stage
		errHas string // what the rejecting stage's error must say
		// contractHas, for a fault an earlier stage catches, is what the
		// contract must say of it as well: Envoy only warns of a
		// deprecated field, and validateDeep's refusal of them is not the
		// contract's reason.
		contractHas string
	}{
		{name: "unchanged", at: nil, edit: func(map[string]any) {}, want: passes},

		{name: "misspelled top-level field", edit: rename("static_resources", "static_resource"), want: failsParse, errHas: "unknown field \"static_resource\""},
		{name: "misspelled field inside a typed config", at: authz, edit: rename("failure_mode_allow", "failure_mode_alow"), want: failsParse, errHas: "unknown field \"failure_mode_alow\""},
		{name: "misspelled field two Anys deep", at: append(slices.Clone(stripeRoute), "typed_per_filter_config", "envoy.filters.http.ext_authz"),
			edit: rename("check_settings", "check_setting"), want: failsParse, errHas: "unknown field \"check_setting\""},
		{name: "unknown enum value", at: append(slices.Clone(proc), "processing_mode"), edit: set("request_body_mode", "BUFFERD"), want: failsParse, errHas: "BUFFERD"},
		{name: "unknown transport api version", at: authz, edit: set("transport_api_version", "V4"), want: failsParse, errHas: "\"V4\""},
		{name: "unknown @type", at: authz, edit: set("@type", "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzz"), want: failsParse, errHas: "unable to resolve"},

		{name: "status_on_error not an HTTP status, inside an Any", at: authz, edit: set("status_on_error", map[string]any{"code": 999}),
			want: failsValidation, errHas: "http_filters[0].typed_config<ExtAuthz>"},
		{name: "with_request_body without max_request_bytes, inside an Any", at: append(slices.Clone(authz), "with_request_body"), edit: del("max_request_bytes"),
			want: failsValidation, errHas: "typed_config<ExtAuthz>"},
		{name: "ext_proc message_timeout over an hour, inside an Any", at: proc, edit: set("message_timeout", "7200s"),
			want: failsValidation, errHas: "typed_config<ExternalProcessor>"},
		{name: "no context extensions, two Anys deep", at: append(slices.Clone(stripeRoute), "typed_per_filter_config", "envoy.filters.http.ext_authz", "check_settings"),
			edit: set("context_extensions", map[string]any{}), want: failsContract, errHas: "rail_account must name"},
		{name: "route with ext_authz disabled and check settings, two Anys deep", at: append(slices.Clone(stripeRoute), "typed_per_filter_config", "envoy.filters.http.ext_authz"),
			edit: set("disabled", true), want: failsParse, errHas: "already set"}, // a oneof set twice
		{name: "SAN matcher without a type, inside an Any", at: append(cluster("stripe"), "transport_socket", "typed_config", "common_tls_context", "validation_context", "match_typed_subject_alt_names", 0),
			edit: del("san_type"), want: failsValidation, errHas: "typed_config<UpstreamTlsContext>"},
		{name: "deprecated cluster field", at: cluster("countersign"), edit: set("http2_protocol_options", map[string]any{}),
			want: failsValidation, errHas: "http2_protocol_options"},

		{name: "ext_authz fails open", at: authz, edit: set("failure_mode_allow", true), want: failsContract, errHas: "ext_authz: failure_mode_allow must be false"},
		{name: "ext_proc fails open", at: proc, edit: set("failure_mode_allow", true), want: failsContract, errHas: "ext_proc: failure_mode_allow must be false"},
		{name: "status_on_error 403", at: authz, edit: set("status_on_error", map[string]any{"code": 403}), want: failsContract, errHas: "status_on_error must be 503"},
		// GrpcService.timeout has no generated rule: only the contract
		// stops a negative one.
		{name: "negative ext_authz timeout", at: append(slices.Clone(authz), "grpc_service"), edit: set("timeout", "-1s"), want: failsContract, errHas: "grpc_service.timeout must be at least"},
		{name: "a rail call longer than the settle time", at: append(slices.Clone(stripeRoute), "route"), edit: set("timeout", "300s"), want: failsContract, errHas: "exceeds countersign's default --rail-settle-time"},
		{name: "ext_authz on the 200ms default timeout", at: append(slices.Clone(authz), "grpc_service"), edit: del("timeout"), want: failsContract, errHas: "grpc_service.timeout must be at least"},
		{name: "no partial message", at: append(slices.Clone(authz), "with_request_body"), edit: set("allow_partial_message", false), want: failsContract, errHas: "allow_partial_message: true"},
		{name: "no body in the check", at: authz, edit: del("with_request_body"), want: failsContract, errHas: "with_request_body must be set"},
		// Bounds that differ let a body cut at Envoy's pass for whole at
		// Countersign's (found by a review).
		{name: "a body bound other than countersign's", at: append(slices.Clone(authz), "with_request_body"), edit: set("max_request_bytes", 1048576), want: failsContract, errHas: "keep them equal"},
		{name: "a route's smaller body bound", at: append(slices.Clone(stripeRoute), "typed_per_filter_config", "envoy.filters.http.ext_authz", "check_settings"),
			edit: set("with_request_body", map[string]any{"max_request_bytes": 1024, "allow_partial_message": true}), want: failsContract, errHas: "equal to countersign serve's --max-request-bytes"},
		{name: "route cache cleared", at: authz, edit: set("clear_route_cache", true), want: failsContract, errHas: "clear_route_cache must be false"},
		{name: "raw headers", at: authz, edit: set("encode_raw_headers", true), want: failsContract, errHas: "encode_raw_headers must be false"},
		{name: "the check shown some headers only", at: authz, edit: set("allowed_headers", map[string]any{"patterns": []any{map[string]any{"exact": "authorization"}}}),
			want: failsContract, errHas: "allowed_headers and disallowed_headers must be unset"},
		{name: "x-envoy-* headers hidden from the check", at: authz, edit: set("disallowed_headers", map[string]any{"patterns": []any{map[string]any{"prefix": "x-envoy-"}}}),
			want: failsContract, errHas: "allowed_headers and disallowed_headers must be unset"},
		{name: "routing headers mutable", at: append(slices.Clone(authz), "decoder_header_mutation_rules"), edit: set("allow_all_routing", true), want: failsContract, errHas: "allow_all_routing"},
		{name: "ext_proc before ext_authz", at: hcm, edit: swapFilters(0, 1), want: failsContract, errHas: "filter order"},
		// No agent request is internal, or Envoy would obey its
		// x-envoy-retry-on, x-envoy-upstream-rq-timeout-ms, ….
		{name: "loopback trusted to set x-envoy headers", at: hcm, edit: set("internal_address_config", map[string]any{"cidr_ranges": []any{map[string]any{"address_prefix": "127.0.0.1", "prefix_len": 32}}}),
			want: failsContract, errHas: "internal_address_config must be unset"},
		{name: "an internal_address_config without ranges: RFC 1918 and loopback trusted", at: hcm, edit: set("internal_address_config", map[string]any{}),
			want: failsContract, errHas: "internal_address_config must be unset: with no cidr_ranges"},
		{name: "Envoy's default detector: a one-address X-Forwarded-For trusted", at: hcm, edit: del("original_ip_detection_extensions"),
			want: failsContract, errHas: "original_ip_detection_extensions must be one custom_header detector"},
		{name: "the detector trusts X-Forwarded-For", at: append(slices.Clone(hcm), "original_ip_detection_extensions", 0, "typed_config"),
			edit: set("allow_extension_to_set_address_as_trusted", true), want: failsContract, errHas: "allow_extension_to_set_address_as_trusted: false"},
		{name: "a second detector", at: hcm, edit: func(m map[string]any) {
			m["original_ip_detection_extensions"] = append(m["original_ip_detection_extensions"].([]any), map[string]any{
				"name":         "envoy.http.original_ip_detection.xff",
				"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.http.original_ip_detection.xff.v3.XffConfig"},
			})
		}, want: failsContract, errHas: "original_ip_detection_extensions must be one custom_header detector"},
		{name: "the peer's address trusted", at: hcm, edit: set("use_remote_address", true), want: failsContract, errHas: "use_remote_address must be unset"},
		{name: "a hop in front trusted", at: hcm, edit: set("xff_num_trusted_hops", 1), want: failsContract, errHas: "xff_num_trusted_hops must be 0"},
		{name: "router before ext_proc", at: hcm, edit: swapFilters(1, 2), want: failsContract, errHas: "filter order"},
		{name: "streamed request body", at: append(slices.Clone(proc), "processing_mode"), edit: set("request_body_mode", "STREAMED"), want: failsContract, errHas: "request_body_mode:STREAMED"},
		{name: "response body not sent", at: append(slices.Clone(proc), "processing_mode"), edit: set("response_body_mode", "NONE"), want: failsContract, errHas: "processing_mode must be"},
		{name: "ext_authz metadata not forwarded", at: proc, edit: del("metadata_options"), want: failsContract, errHas: "forwarding_namespaces.untyped must include"},
		{name: "immediate responses ignored", at: proc, edit: set("disable_immediate_response", true), want: failsContract, errHas: "disable_immediate_response"},
		{name: "ext_authz disabled in the chain", at: append(slices.Clone(hcm), "http_filters", named("envoy.filters.http.ext_authz")), edit: set("disabled", true), want: failsContract, errHas: "neither disabled nor optional"},
		{name: "rail route without rail_account", at: append(slices.Clone(stripeRoute), "typed_per_filter_config", "envoy.filters.http.ext_authz", "check_settings", "context_extensions"),
			edit: del("rail_account"), want: failsContract, errHas: "rail_account must name"},
		{name: "rail route without ext_authz settings", at: append(slices.Clone(stripeRoute), "typed_per_filter_config"), edit: del("envoy.filters.http.ext_authz"), want: failsContract, errHas: "must be an ExtAuthzPerRoute"},
		{name: "rail route without host rewrite", at: append(slices.Clone(stripeRoute), "route"), edit: del("host_rewrite_literal"), want: failsContract, errHas: "host_rewrite_literal must name"},
		{name: "rail route to countersign", at: append(slices.Clone(stripeRoute), "route"), edit: set("cluster", "countersign"), want: failsContract, errHas: "routes to the \"countersign\" cluster"},
		{name: "rail cluster without TLS", at: cluster("stripe"), edit: del("transport_socket"), want: failsContract, errHas: "transport_socket must be an UpstreamTlsContext"},
		{name: "rail certificate not verified", at: append(cluster("stripe"), "transport_socket", "typed_config", "common_tls_context"), edit: del("validation_context"), want: failsContract, errHas: "trusted_ca must be set"},
		{name: "sni is not the rewritten host", at: append(cluster("razorpay"), "transport_socket", "typed_config"), edit: set("sni", "api.razorpay.co"), want: failsContract, errHas: "sni \"api.razorpay.co\""},
		// The rail key goes to the rail's name only, over a chain the
		// bundle verifies (envoyconfig.RailClusterFaults, RailTLSFaults).
		{name: "rail certificate chain not verified (ACCEPT_UNTRUSTED: any self-signed certificate naming the rail)", at: stripeVC,
			edit: set("trust_chain_verification", "ACCEPT_UNTRUSTED"), want: failsContract, errHas: "trust_chain_verification ACCEPT_UNTRUSTED must be unset or VERIFY_TRUST_CHAIN"},
		{name: "rail certificate may be expired", at: stripeVC, edit: set("allow_expired_certificate", true), want: failsContract, errHas: "allow_expired_certificate must be false"},
		{name: "rail certificate checked by a custom validator", at: stripeVC, edit: set("custom_validator_config", map[string]any{
			"name": "envoy.tls.cert_validator.spiffe",
			"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.SPIFFECertValidatorConfig",
				"trust_domains": []any{map[string]any{"name": "api.stripe.com", "trust_bundle": map[string]any{"filename": "/etc/bundle.pem"}}}},
		}), want: failsContract, errHas: "custom_validator_config must be unset"},
		{name: "rail validation context from SDS", at: stripeCTC, edit: func(m map[string]any) {
			delete(m, "validation_context")
			m["validation_context_sds_secret_config"] = map[string]any{"name": "rail-ca"}
		}, want: failsContract, errHas: "the validation context must be the inline validation_context"},
		{name: "rail validation context combined with one from SDS", at: stripeCTC, edit: func(m map[string]any) {
			m["combined_validation_context"] = map[string]any{"default_validation_context": m["validation_context"], "validation_context_sds_secret_config": map[string]any{"name": "rail-ca"}}
			delete(m, "validation_context")
		}, want: failsContract, errHas: "the validation context must be the inline validation_context"},
		{name: "a second SAN matcher accepts other names", at: stripeVC, edit: func(m map[string]any) {
			m["match_typed_subject_alt_names"] = append(m["match_typed_subject_alt_names"].([]any), map[string]any{"san_type": "DNS", "matcher": map[string]any{"suffix": ".com"}})
		}, want: failsContract, errHas: "match_typed_subject_alt_names[1] must be DNS, exact api.stripe.com"},
		{name: "rail cluster steered by the agent's x-envoy-original-dst-host (ORIGINAL_DST)", at: cluster("stripe"), edit: func(m map[string]any) {
			m["type"], m["lb_policy"] = "ORIGINAL_DST", "CLUSTER_PROVIDED"
			m["original_dst_lb_config"] = map[string]any{"use_http_header": true}
			delete(m, "load_assignment")
		}, want: failsContract, errHas: "type ORIGINAL_DST must be LOGICAL_DNS or STRICT_DNS"},
		{name: "rail cluster as a dynamic forward proxy (the Host picks the upstream)", at: cluster("stripe"), edit: func(m map[string]any) {
			delete(m, "type")
			delete(m, "load_assignment")
			m["lb_policy"] = "CLUSTER_PROVIDED"
			m["cluster_type"] = map[string]any{"name": "envoy.clusters.dynamic_forward_proxy", "typed_config": map[string]any{
				"@type":            "type.googleapis.com/envoy.extensions.clusters.dynamic_forward_proxy.v3.ClusterConfig",
				"dns_cache_config": map[string]any{"name": "dfp", "dns_lookup_family": "V4_ONLY"},
			}}
		}, want: failsContract, errHas: `cluster_type "envoy.clusters.dynamic_forward_proxy" must be unset`},
		{name: "rail cluster with no endpoint", at: cluster("stripe"), edit: func(m map[string]any) {
			m["type"] = "STRICT_DNS"
			m["load_assignment"] = map[string]any{"cluster_name": "stripe", "endpoints": []any{}}
		}, want: failsContract, errHas: "load_assignment has no endpoint"},
		{name: "rail endpoint on another host", at: stripeAddress, edit: set("socket_address", map[string]any{"address": "rails.example.net", "port_value": 443}),
			want: failsContract, errHas: `address "rails.example.net"`},
		{name: "rail endpoint on another port", at: stripeAddress, edit: set("socket_address", map[string]any{"address": "api.stripe.com", "port_value": 8443}),
			want: failsContract, errHas: "port 8443"},
		{name: "rail endpoint with an additional address", at: stripeEndpoint, edit: set("additional_addresses", []any{
			map[string]any{"address": map[string]any{"socket_address": map[string]any{"address": "203.0.113.7", "port_value": 443}}},
		}), want: failsContract, errHas: "additional_addresses must be unset"},
		{name: "rail name resolved by a resolver on loopback (the agent's, in its pod)", at: cluster("stripe"), edit: set("typed_dns_resolver_config", map[string]any{
			"name": "envoy.network.dns_resolver.cares",
			"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.extensions.network.dns_resolver.cares.v3.CaresDnsResolverConfig",
				"resolvers": []any{map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": 53}}}},
		}), want: failsContract, errHas: "the rail's name is resolved by the system's resolver"},
		// One request, seen whole: no tunnel after the check.
		{name: "WebSocket upgrades on the agents' listener", at: hcm, edit: set("upgrade_configs", []any{map[string]any{"upgrade_type": "websocket"}}),
			want: failsContract, errHas: "upgrade_configs must be unset: an upgraded connection is a tunnel"},
		{name: "CONNECT over HTTP/2 on the agents' listener", at: hcm, edit: set("http2_protocol_options", map[string]any{"allow_connect": true}),
			want: failsContract, errHas: "http2_protocol_options.allow_connect must be false"},
		// A header name with an underscore reaches the rail (found by a
		// review): stripe_account is Stripe-Account to a CGI-style server.
		{name: "underscores in header names let through", at: append(slices.Clone(hcm), "common_http_protocol_options"),
			edit: set("headers_with_underscores_action", "ALLOW"),
			want: failsContract, errHas: "headers_with_underscores_action must be REJECT_REQUEST"},
		{name: "no protocol options (Envoy's default lets underscores through)", at: hcm, edit: del("common_http_protocol_options"),
			want: failsContract, errHas: "headers_with_underscores_action must be REJECT_REQUEST"},
		{name: "HTTP/1.0 on the agents' listener", at: hcm, edit: set("http_protocol_options", map[string]any{"accept_http_10": true}),
			want: failsContract, errHas: "http_protocol_options.accept_http_10 must be false"},
		{name: "a rail route enables WebSocket upgrades itself", at: append(slices.Clone(stripeRoute), "route"),
			edit: set("upgrade_configs", []any{map[string]any{"upgrade_type": "websocket", "enabled": true}}),
			want: failsContract, errHas: "a route can enable an upgrade the connection manager does not"},
		{name: "countersign over HTTP/1.1", at: cluster("countersign"), edit: del("typed_extension_protocol_options"), want: failsContract, errHas: "must speak HTTP/2"},
		{name: "authorization in the access log", at: append(slices.Clone(hcm), "access_log", 0, "typed_config", "log_format", "json_format"),
			edit: set("auth", "%REQ(AUTHORIZATION)%"), want: failsContract, errHas: "credentials must never be logged"},
		// An x-envoy-* request header is the agent's: a log of one shows
		// what the agent claims, not what Envoy did.
		{name: "the access log shows the agent's x-envoy-original-path", at: append(slices.Clone(hcm), "access_log", 0, "typed_config", "log_format", "json_format"),
			edit: set("path", "%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%"), want: failsContract, errHas: "access_log[0] (type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog) reads x-envoy-original-path"},
		{name: "the access log names an x-envoy-* header through REQUEST_HEADER", at: append(slices.Clone(hcm), "access_log", 0, "typed_config", "log_format", "json_format"),
			edit: set("retry", "%REQUEST_HEADER(x-envoy-retry-on)%"), want: failsContract, errHas: "reads x-envoy-retry-on"},
		{name: "the agent's x-envoy-* header chooses which requests are logged", at: append(slices.Clone(hcm), "access_log", 0),
			edit: set("filter", map[string]any{"header_filter": map[string]any{"header": map[string]any{"name": "x-envoy-force-trace", "present_match": true, "invert_match": true}}}),
			want: failsContract, errHas: "reads x-envoy-force-trace"},
		{name: "the router's upstream log shows the rail key", at: filter("envoy.filters.http.router"),
			edit: set("upstream_log", []any{map[string]any{"name": "envoy.access_loggers.stdout", "typed_config": map[string]any{
				"@type":      "type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog",
				"log_format": map[string]any{"json_format": map[string]any{"key": "%REQ(AUTHORIZATION)%"}},
			}}}),
			want: failsContract, errHas: "router upstream_log: access_log[0] (type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog) names \"authorization\""},
		// The agent shares the pod's loopback: admin and Countersign's
		// Envoy listener are sockets on the private volume, never addresses.
		{name: "admin on loopback", at: []any{"admin", "address"}, edit: func(m map[string]any) {
			delete(m, "pipe")
			m["socket_address"] = map[string]any{"address": "127.0.0.1", "port_value": 9901}
		}, want: failsContract, errHas: "admin listens on"},
		{name: "admin pipe open to the group", at: []any{"admin", "address", "pipe"}, edit: set("mode", 0o660), want: failsContract, errHas: "owner only"},
		{name: "countersign on loopback TCP", at: append(cluster("countersign"), "load_assignment", "endpoints", 0, "lb_endpoints", 0, "endpoint", "address"),
			edit: func(m map[string]any) {
				delete(m, "pipe")
				m["socket_address"] = map[string]any{"address": "127.0.0.1", "port_value": 9191}
			}, want: failsContract, errHas: "is not a pipe"},
		{name: "listener on every interface", at: []any{"static_resources", "listeners", 0, "address", "socket_address"}, edit: set("address", "0.0.0.0"), want: failsContract, errHas: "listener \"egress\" listens on"},

		// A rail request leaves once, as decided, for its rail only.
		{name: "rail route retries the payment", at: append(slices.Clone(stripeRoute), "route"),
			edit: set("retry_policy", map[string]any{"retry_on": "reset,connect-failure,5xx", "num_retries": 3}), want: failsContract, errHas: "retry_policy must be unset"},
		{name: "rail virtual host retries every rail call", at: stripeVH,
			edit: set("retry_policy", map[string]any{"retry_on": "reset,5xx", "num_retries": 2}), want: failsContract, errHas: "virtual host \"stripe\" of a rail route: retry_policy must be unset"},
		{name: "rail route hedges the payment", at: append(slices.Clone(stripeRoute), "route"),
			edit: set("hedge_policy", map[string]any{"initial_requests": 2}), want: failsContract, errHas: "hedge_policy must be unset"},
		{name: "rail virtual host hedges", at: stripeVH,
			edit: set("hedge_policy", map[string]any{"hedge_on_per_try_timeout": true}), want: failsContract, errHas: "hedge_policy must be unset"},
		{name: "rail route mirrors the allowed request, rail key included", at: append(slices.Clone(stripeRoute), "route"),
			edit: set("request_mirror_policies", []any{map[string]any{"cluster": "razorpay"}}), want: failsContract, errHas: "request_mirror_policies must be unset"},
		{name: "rail virtual host mirrors", at: stripeVH,
			edit: set("request_mirror_policies", []any{map[string]any{"cluster": "razorpay"}}), want: failsContract, errHas: "request_mirror_policies must be unset"},
		{name: "route configuration mirrors every request", at: append(slices.Clone(hcm), "route_config"),
			edit: set("request_mirror_policies", []any{map[string]any{"cluster": "razorpay"}}), want: failsContract, errHas: "route_config: request_headers_to_add, request_headers_to_remove, request_mirror_policies must be unset"},
		{name: "rail route adds a header over the stamps", at: stripeRoute,
			edit: set("request_headers_to_add", []any{map[string]any{"header": map[string]any{"key": "idempotency-key", "value": "fixed"}, "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}}),
			want: failsContract, errHas: "request_headers_to_add must be unset"},
		{name: "rail route removes the idempotency key", at: stripeRoute,
			edit: set("request_headers_to_remove", []any{"idempotency-key"}), want: failsContract, errHas: "request_headers_to_remove must be unset"},
		{name: "rail virtual host adds a header", at: stripeVH,
			edit: set("request_headers_to_add", []any{map[string]any{"header": map[string]any{"key": "authorization", "value": "Bearer x"}}}),
			want: failsContract, errHas: "request_headers_to_add must be unset"},
		{name: "route configuration adds a header", at: append(slices.Clone(hcm), "route_config"),
			edit: set("request_headers_to_add", []any{map[string]any{"header": map[string]any{"key": "x-a", "value": "b"}}}),
			want: failsContract, errHas: "route_config: request_headers_to_add"},
		// The rail call's timeout is the route's, never the agent's
		// grpc-timeout header.
		{name: "rail route times the call by the agent's grpc-timeout", at: append(slices.Clone(stripeRoute), "route"),
			edit: set("max_stream_duration", map[string]any{"max_stream_duration": "60s", "grpc_timeout_header_max": "60s"}),
			want: failsContract, errHas: "max_stream_duration.grpc_timeout_header_max must be unset: Envoy would time the rail call by the request's grpc-timeout header"},
		{name: "rail route lets the agent's grpc-timeout run unbounded", at: append(slices.Clone(stripeRoute), "route"),
			edit: set("max_stream_duration", map[string]any{"grpc_timeout_header_max": "0s"}),
			want: failsContract, errHas: "grpc_timeout_header_max must be unset"},
		{name: "rail route offsets the agent's grpc-timeout", at: append(slices.Clone(stripeRoute), "route"),
			edit: set("max_stream_duration", map[string]any{"grpc_timeout_header_offset": "1s"}),
			want: failsContract, errHas: "max_stream_duration.grpc_timeout_header_offset must be unset"},
		{name: "rail route's max_stream_duration turns its timeout off", at: append(slices.Clone(stripeRoute), "route"),
			edit: set("max_stream_duration", map[string]any{}),
			want: failsContract, errHas: "max_stream_duration must be unset: with it Envoy's router ignores the route's timeout"},
		{name: "rail route honours a gRPC request's grpc-timeout (deprecated field)", at: append(slices.Clone(stripeRoute), "route"),
			edit: set("max_grpc_timeout", "0s"), want: failsValidation, errHas: "max_grpc_timeout is deprecated",
			contractHas: "max_grpc_timeout must be unset: Envoy would time the rail call by the request's grpc-timeout header"},
		{name: "rail route offsets a gRPC request's grpc-timeout (deprecated field)", at: append(slices.Clone(stripeRoute), "route"),
			edit: set("grpc_timeout_offset", "1s"), want: failsValidation, errHas: "grpc_timeout_offset is deprecated",
			contractHas: "grpc_timeout_offset must be unset"},
		{name: "rail route follows redirects internally", at: append(slices.Clone(stripeRoute), "route"),
			edit: set("internal_redirect_policy", map[string]any{"max_internal_redirects": 1}), want: failsContract, errHas: "internal_redirect_policy must be unset"},
		{name: "rail virtual host routed by a matcher tree", at: stripeVH,
			edit: set("matcher", map[string]any{"on_no_match": map[string]any{"action": map[string]any{"name": "route",
				"typed_config": map[string]any{"@type": "type.googleapis.com/envoy.config.route.v3.Route", "match": map[string]any{"prefix": "/"}, "route": map[string]any{"cluster": "stripe"}}}}}),
			want: failsContract, errHas: "a matcher tree is not understood"},
		{name: "second listener proxies loopback TCP to the countersign socket", at: []any{"static_resources"}, edit: func(m map[string]any) {
			m["listeners"] = append(m["listeners"].([]any), map[string]any{
				"name":    "relay",
				"address": map[string]any{"socket_address": map[string]any{"address": "127.0.0.1", "port_value": 15002}},
				"filter_chains": []any{map[string]any{"filters": []any{map[string]any{
					"name": "envoy.filters.network.tcp_proxy",
					"typed_config": map[string]any{
						"@type":       "type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy",
						"stat_prefix": "relay", "cluster": "countersign",
					},
				}}}},
			})
		}, want: failsContract, errHas: "\"envoy.filters.network.tcp_proxy\" is not an HTTP connection manager"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			broken := editedEgress(t, tc.at, tc.edit)
			got, err := runStages(broken)
			if got != tc.want {
				t.Fatalf("%s, want %s (error: %v)", got, tc.want, err)
			}
			if tc.want == passes {
				return
			}
			if tc.errHas == "" || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("error does not say %q:\n%v", tc.errHas, err)
			}
			if tc.contractHas != "" {
				b, err := parseBootstrap(broken)
				if err != nil {
					t.Fatal(err)
				}
				if err := checkContract(b); err == nil || !strings.Contains(err.Error(), tc.contractHas) {
					t.Errorf("contract does not say %q:\n%v", tc.contractHas, err)
				}
			}
			if tc.want == failsValidation && strings.Contains(tc.errHas, "<") {
				// The fault is inside an Any: the generated validation of
				// the outer message cannot see it.
				b, err := parseBootstrap(broken)
				if err != nil {
					t.Fatal(err)
				}
				if err := b.ValidateAll(); err != nil {
					t.Errorf("Bootstrap.ValidateAll already sees the fault, so the case does not test the walk: %v", err)
				}
			}
		})
	}
}

// editedEgress is the shipped egress.yaml, as JSON, with edit applied to
// the node at names.
func editedEgress(t *testing.T, at []any, edit func(map[string]any)) []byte {
	t.Helper()
	orig, err := os.ReadFile(egressConfig)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(orig, &doc); err != nil {
		t.Fatal(err)
	}
	edit(dig(t, doc, at...))
	broken, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return broken
}

// wantStage runs the stages on data and fails t unless the first to reject
// it is want, saying errHas when it is the contract.
func wantStage(t *testing.T, data []byte, want stage, errHas string) {
	t.Helper()
	got, err := runStages(data)
	if got != want {
		t.Fatalf("%s, want %s (error: %v)", got, want, err)
	}
	if want == failsContract && !strings.Contains(err.Error(), errHas) {
		t.Fatalf("the contract does not say %q:\n%v", errHas, err)
	}
}

// runStages reports the first stage that rejects data, and its error.
func runStages(data []byte) (stage, error) {
	b, err := parseBootstrap(data)
	if err != nil {
		return failsParse, err
	}
	if _, err := validateDeep(b); err != nil {
		return failsValidation, err
	}
	if err := checkContract(b); err != nil {
		return failsContract, err
	}
	return passes, nil
}

// named selects the element of a list whose "name" is the given value.
type named string

// dig walks a generic YAML document by map keys, list indexes and names,
// and returns the map found there.
func dig(t *testing.T, v any, path ...any) map[string]any {
	t.Helper()
	for i, p := range path {
		switch p := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok || m[p] == nil {
				t.Fatalf("no key %q at %v", p, path[:i])
			}
			v = m[p]
		case int:
			l, ok := v.([]any)
			if !ok || p >= len(l) {
				t.Fatalf("no index %d at %v", p, path[:i])
			}
			v = l[p]
		case named:
			l, _ := v.([]any)
			found := false
			for _, e := range l {
				if m, ok := e.(map[string]any); ok && m["name"] == string(p) {
					v, found = m, true
					break
				}
			}
			if !found {
				t.Fatalf("no element named %q at %v", p, path[:i])
			}
		default:
			t.Fatalf("bad path element %v", p)
		}
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%v is not a map", path)
	}
	return m
}

func set(k string, v any) func(map[string]any) { return func(m map[string]any) { m[k] = v } }

func del(k string) func(map[string]any) {
	return func(m map[string]any) {
		if _, ok := m[k]; !ok {
			panic("del: no key " + k)
		}
		delete(m, k)
	}
}

func rename(from, to string) func(map[string]any) {
	return func(m map[string]any) {
		v, ok := m[from]
		if !ok {
			panic("rename: no key " + from)
		}
		delete(m, from)
		m[to] = v
	}
}

func swapFilters(i, j int) func(map[string]any) {
	return func(m map[string]any) {
		l := m["http_filters"].([]any)
		l[i], l[j] = l[j], l[i]
	}
}
