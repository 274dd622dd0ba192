package envoyconfig

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// HeaderFaults lists the settings of the agents' connection manager under
// which a header name could mean one thing to Countersign and another to
// the rail: a name with an underscore must be refused, since servers that
// read headers as CGI variables (Rack, PHP-FPM, WSGI) read stripe_account
// as Stripe-Account, a header Countersign refuses by its dash spelling.
// Envoy's default lets such names through (headers_with_underscores_action
// ALLOW, envoy/config/core/v3/protocol.proto). Countersign refuses them too
// (rail.HeaderPolicy.Check); this keeps the first line in place.
func HeaderFaults(h *hcmv3.HttpConnectionManager) []string {
	if h.GetCommonHttpProtocolOptions().GetHeadersWithUnderscoresAction() != corev3.HttpProtocolOptions_REJECT_REQUEST {
		return []string{"common_http_protocol_options.headers_with_underscores_action must be REJECT_REQUEST: " +
			"servers reading headers as CGI variables read stripe_account as Stripe-Account"}
	}
	return nil
}
