package envoyconfig

import (
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
)

// RouteTimeoutFaults lists the settings of a rail route's action under
// which its timeout is not the route's own timeout: a shipped config has
// none. The contract bounds that timeout by countersign's
// --rail-settle-time (a listing proves an attempt absent only once the rail
// can no longer apply it), and a call cut short is an ambiguous attempt.
//
// Envoy times a request by its grpc-timeout header, the agent's to set,
// where the route has max_grpc_timeout (router.cc,
// FilterUtility::finalTimeout, for a request whose content-type says gRPC;
// grpc_timeout_offset is taken off it there) or
// max_stream_duration.grpc_timeout_header_max (conn_manager_impl.cc,
// ActiveStream::refreshDurationTimeout, for any request that carries the
// header; grpc_timeout_header_offset is taken off it there). Either way the
// agent picks the moment the rail call is cut short, an ambiguous outcome
// on purpose, or with a cap of 0 lets it run unbounded. And any
// max_stream_duration turns the route's timeout off in the router
// (config_impl.cc, using_new_timeouts_ is has_max_stream_duration();
// finalTimeout reads route.timeout() only without it), leaving the call
// bounded by a stream duration the contract does not read, or by nothing.
// Countersign also refuses a request that carries grpc-timeout (it means
// nothing to a rail: rail.HeaderPolicy), a second layer behind this one.
func RouteTimeoutFaults(ra *routev3.RouteAction) []string {
	var grpc []string
	//nolint:staticcheck // the deprecated fields still hand the timeout to the request
	if ra.GetMaxGrpcTimeout() != nil {
		grpc = append(grpc, "max_grpc_timeout")
	}
	//nolint:staticcheck // likewise
	if ra.GetGrpcTimeoutOffset() != nil {
		grpc = append(grpc, "grpc_timeout_offset")
	}
	msd := ra.GetMaxStreamDuration()
	if msd.GetGrpcTimeoutHeaderMax() != nil {
		grpc = append(grpc, "max_stream_duration.grpc_timeout_header_max")
	}
	if msd.GetGrpcTimeoutHeaderOffset() != nil {
		grpc = append(grpc, "max_stream_duration.grpc_timeout_header_offset")
	}
	var out []string
	if len(grpc) > 0 {
		out = append(out, strings.Join(grpc, ", ")+" must be unset: Envoy would time the rail call by the request's grpc-timeout header, "+
			"so the agent would choose when the call is cut short (an ambiguous attempt on purpose) or that it never is")
	}
	if msd != nil {
		out = append(out, "max_stream_duration must be unset: with it Envoy's router ignores the route's timeout, "+
			"the bound countersign's --rail-settle-time is checked against")
	}
	return out
}
