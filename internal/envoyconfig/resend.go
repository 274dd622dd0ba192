package envoyconfig

import (
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// OnceWhy is the refusal of fields set on a rail route or its virtual
// host: a rail request leaves Envoy once, as decided. A retry or a hedge is
// a second rail call on one decision and one attempt row (the blind retry
// I3 forbids; an MCP server without an idempotency key pays twice); a
// mirror sends the ALLOWed request, the rail key that ext_authz set
// included, to another cluster; a request header a route adds or removes
// is applied by the router after ext_authz, over its stamps
// (Idempotency-Key, Authorization); an internal redirect sends the request
// again, elsewhere. The Envoy contract test and chartcheck both refuse them.
func OnceWhy(fields string) string {
	return fields + " must be unset: a rail request leaves Envoy once, as decided " +
		"(a retry, hedge or internal redirect is a second rail call on one decision, a mirror copies it with the rail key to another cluster, " +
		"a request header added or removed after ext_authz overwrites its stamps)"
}

// VirtualHostResends are a virtual host's settings that would send its
// routes' requests again, elsewhere or changed after the decision.
func VirtualHostResends(vh *routev3.VirtualHost) []string {
	var out []string
	if vh.GetRetryPolicy() != nil || vh.GetRetryPolicyTypedConfig() != nil {
		out = append(out, "retry_policy")
	}
	if vh.GetHedgePolicy() != nil {
		out = append(out, "hedge_policy")
	}
	if len(vh.GetRequestMirrorPolicies()) > 0 {
		out = append(out, "request_mirror_policies")
	}
	if len(vh.GetRequestHeadersToAdd()) > 0 {
		out = append(out, "request_headers_to_add")
	}
	if len(vh.GetRequestHeadersToRemove()) > 0 {
		out = append(out, "request_headers_to_remove")
	}
	return out
}

// RouteResends are the same settings of a rail route and its action.
func RouteResends(rt *routev3.Route, ra *routev3.RouteAction) []string {
	var out []string
	if ra.GetRetryPolicy() != nil || ra.GetRetryPolicyTypedConfig() != nil {
		out = append(out, "retry_policy")
	}
	if ra.GetHedgePolicy() != nil {
		out = append(out, "hedge_policy")
	}
	if len(ra.GetRequestMirrorPolicies()) > 0 {
		out = append(out, "request_mirror_policies")
	}
	//nolint:staticcheck // the deprecated fields still turn internal redirects on
	if ra.GetInternalRedirectPolicy() != nil || ra.GetMaxInternalRedirects() != nil ||
		ra.GetInternalRedirectAction() != routev3.RouteAction_PASS_THROUGH_INTERNAL_REDIRECT {
		out = append(out, "internal_redirect_policy")
	}
	if len(rt.GetRequestHeadersToAdd()) > 0 {
		out = append(out, "request_headers_to_add")
	}
	if len(rt.GetRequestHeadersToRemove()) > 0 {
		out = append(out, "request_headers_to_remove")
	}
	return out
}
