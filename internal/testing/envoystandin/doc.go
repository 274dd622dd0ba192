// Package envoystandin is a stand-in for Envoy on the agent's egress path, for
// whole-process tests.
//
// It exists because no Envoy binary can be installed on the machines this
// project is built and tested on. Countersign's side of the contract is
// Envoy's ext_authz and ext_proc gRPC protocols, so this package plays
// Envoy's side of them with the go-control-plane types, following Envoy's
// source (extensions/filters/http/ext_authz, filters/common/ext_authz,
// extensions/filters/http/ext_proc, the router and the HTTP connection
// manager) point by point. Each modelled behaviour is documented beside its
// code with the Envoy configuration field it stands for, and tested.
//
// The filter chain is ext_authz, then ext_proc (when Config.ExtProc is
// set), then the router:
//
//	agent ──HTTP/1.1──▶ Proxy ──Check──▶ ext_authz service
//	                      │  ──Process (request_headers, request_body)──▶ ext_proc
//	                      ├──HTTP/1.1──▶ Route.Upstream (Host: Route.HostRewrite)
//	                      │  ──Process (response_headers, response_body)──▶ ext_proc
//	agent ◀───────────────┘
//
// Modelled:
//
//   - The connection manager: pseudo-headers, lower-case keys, hop-by-hop
//     headers dropped, x-forwarded-proto, x-request-id generated when
//     absent, a random stream id, server: envoy.
//   - Routes matched on the agent's authority (or a path prefix); no route
//     is a 404 and skips ext_authz. A route's direct_response (a catch-all
//     "*" route like envoy/egress.yaml's `unknown`, answering an unserved
//     host) is the router's local reply with the route's
//     response_headers_to_add, and disables ext_authz and ext_proc on that
//     route, as that route's typed_per_filter_config does.
//   - ext_authz: the CheckRequest as createHttpCheck builds it (id is the
//     stream id; headers merged with ","; host before the host rewrite;
//     body or raw_body; size; source and destination; per-route
//     context_extensions), with_request_body (max_request_bytes,
//     allow_partial_message, pack_as_bytes, x-envoy-auth-partial-body, 413),
//     OK responses (headers by append action or the deprecated append,
//     headers_to_remove, query parameters, response_headers_to_add, dynamic
//     metadata with ext_authz_duration), denied responses, error_response,
//     gRPC errors and the grpc_service timeout with failure_mode_allow and
//     status_on_error.
//   - ext_proc with SEND/BUFFERED/SEND/BUFFERED processing, the ext_authz
//     metadata namespace forwarded on every message, protocol_config on the
//     first, header mutations under the default mutation rules, body
//     mutations with Envoy's content-length check, CONTINUE_AND_REPLACE,
//     immediate responses in any phase, spurious messages, stream errors,
//     message_timeout, a server closing the stream early, and the graceful
//     half-close at the end of the exchange. Local replies pass through
//     ext_proc's encoder path unless Config.ExtProcSkipsLocalReplies.
//   - The router: host_rewrite_literal, x-envoy-expected-rq-timeout-ms,
//     x-envoy-upstream-service-time, the route timeout (504), connection
//     failures and resets before headers (503), resets after headers
//     (downstream reset), no redirects followed.
//
// Not modelled: HTTP/2 or HTTP/3 on either side, TLS (downstream or
// upstream origination: the proxy speaks plain HTTP/1.1 to the test rail),
// retries and hedging, STREAMED, BUFFERED_PARTIAL and FULL_DUPLEX_STREAMED
// body modes, trailers, mode_override, ext_proc attributes and
// receiving_namespaces, header mutation rules other than the defaults,
// encode_raw_headers, allowed/disallowed header matchers,
// per_connection_buffer_limit_bytes, clear_route_cache (routing is decided
// once), the ext_authz HTTP service, access logs and stats.
package envoystandin
