package envoyconfig

import (
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	customheaderv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/original_ip_detection/custom_header/v3"
)

// InternalTrust lists the settings of h under which Envoy could take an
// agent's request for internal; a shipped config has none.
//
// Envoy's router obeys x-envoy-* request headers that send the allowed
// request again (x-envoy-retry-on, -max-retries, -retriable-status-codes,
// -hedge-on-per-try-timeout) or cut it short (-upstream-rq-timeout-ms,
// -upstream-rq-per-try-timeout-ms). Its connection manager strips them
// only from a request it does not take for internal, and a request is
// internal only if an original-IP detector found its address and allowed
// it to be trusted, and that address is internal (envoyproxy/envoy at
// 8179eba, 1.37-dev: conn_manager_utility.cc:163-188, 231-233, 246-251,
// cleanInternalHeaders 319-356). With use_remote_address unset the address
// is the agent's own X-Forwarded-For. Envoy's default detector trusts a
// one-address X-Forwarded-For, and its default internal set was RFC 1918
// and loopback before 1.33 (1.33-1.35: until the runtime flag
// explicit_internal_address_config is set false); an internal_address_config
// with no cidr_ranges is that set still (http_connection_manager/config.h:
// 106-117), and one with ranges names addresses the agent can write. So the
// one detector is X-Forwarded-For read by the custom-header detector, which
// never trusts what it reads (custom_header.cc:15, 41): no request is
// internal on any Envoy since 1.19 (the detectors' release), whatever its
// runtime or internal_address_config says. Countersign refuses every
// x-envoy-* control it is shown as well (rail.HeaderPolicy), including
// x-envoy-upstream-stream-duration-ms, which Envoy never strips.
func InternalTrust(h *hcmv3.HttpConnectionManager) []string {
	var out []string
	// Envoy refuses a detector together with either of these
	// (http_connection_manager/config.cc:505-514); they are named here so
	// that the reason is ours.
	if h.GetUseRemoteAddress().GetValue() {
		out = append(out, "use_remote_address must be unset: the original-IP detector below decides, and never trusts")
	}
	if h.GetXffNumTrustedHops() != 0 {
		out = append(out, "xff_num_trusted_hops must be 0: no hop in front of Envoy is trusted")
	}
	if h.GetInternalAddressConfig() != nil {
		out = append(out, "internal_address_config must be unset: with no cidr_ranges it trusts RFC 1918 and loopback addresses, with some it trusts addresses the agent can put in X-Forwarded-For")
	}
	det := h.GetOriginalIpDetectionExtensions()
	ch := &customheaderv3.CustomHeaderConfig{}
	if len(det) != 1 || det[0].GetTypedConfig().UnmarshalTo(ch) != nil || ch.GetAllowExtensionToSetAddressAsTrusted() {
		out = append(out, "original_ip_detection_extensions must be one custom_header detector with allow_extension_to_set_address_as_trusted: false; "+
			"otherwise Envoy may take an agent's request for internal and obey its x-envoy-* request headers (x-envoy-retry-on sends the payment again)")
	}
	return out
}

// EveryHeaderWhy refuses ext_authz's allowed_headers and disallowed_headers,
// which choose the request headers the check is shown
// (check_request_utils.cc, setHttpRequest): Countersign classifies every
// header of the request (rail.HeaderPolicy refuses Envoy's x-envoy-*
// controls among them), and a header it is not shown would reach the rail
// unclassified.
const EveryHeaderWhy = "allowed_headers and disallowed_headers must be unset: Countersign classifies every request header (it refuses Envoy's x-envoy-* retries and timeouts among them), so it must be shown them all"
