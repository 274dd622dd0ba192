{{- /*
Envoy's bootstrap, for both modes. Call with (dict "root" $ "sidecar" bool).

sidecar true (mode: injector): envoy/egress.yaml's shape, for an Envoy the
injector puts into an agent pod: the listener on 127.0.0.1 (the agent
shares the pod's loopback), admin a 0600 socket in the private emptyDir,
each rail's virtual host <egress.name>.egress.local[:15001] (the injector's
--base-url hosts, aliased to 127.0.0.1), ext_authz and ext_proc on the
socket the injector wires (/var/run/countersign/envoy.sock).

sidecar false (mode: egress): envoy/egress.yaml adapted to an egress
service. Differences from egress.yaml, and only these:
  - the listener is on the pod network (0.0.0.0:envoy.port), because the
    agents are in other pods; every rail Service targets it;
  - each rail's virtual host answers to its Service's names
    (<fullname>-<egress.name>[.<ns>[.svc[.<clusterDomain>]]][:<service.port>])
    instead of <rail>.egress.local;
  - the `countersign` cluster is the Unix socket (pipe) in the emptyDir that
    only the envoy and countersign containers mount, not 127.0.0.1:9191;
  - the access log also records the calling agent pod's address;
  - MCP accounts get the two routes of docs/mcp.md.
Everything else (filters, their order and settings, TLS, timeouts, the
access log) is egress.yaml's; see envoy/README.md for why each is set.
*/ -}}
{{- define "countersign.envoyBootstrap" -}}
{{- $sidecar := .sidecar -}}
{{- $root := .root -}}
{{- with .root -}}
{{- $fullname := include "countersign.fullname" . -}}
node:
  id: {{ $fullname }}{{ if $sidecar }}-sidecar{{ end }}
  cluster: agent-egress

admin:
  {{- if $sidecar }}
  # The agent shares this pod's loopback: admin is a socket on the private
  # volume, owner only (0600, in decimal).
  address:
    pipe: { path: {{ include "countersign.socketDir" . }}/envoy-admin.sock, mode: 384 }
  {{- else }}
  # Loopback of this pod only: no agent shares it.
  address:
    socket_address: { address: 127.0.0.1, port_value: {{ int .Values.envoy.adminPort }} }
  {{- end }}

static_resources:
  listeners:
  - name: egress
    address:
      {{- if $sidecar }}
      # The agent's containers share this loopback; nothing else reaches it.
      socket_address: { address: 127.0.0.1, port_value: {{ include "countersign.sidecarEnvoyPort" . }} }
      {{- else }}
      socket_address: { address: 0.0.0.0, port_value: {{ int .Values.envoy.port }} }
      {{- end }}
    per_connection_buffer_limit_bytes: 4194304
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: egress
          codec_type: AUTO
          normalize_path: true
          merge_slashes: true
          path_with_escaped_slashes_action: REJECT_REQUEST
          common_http_protocol_options:
            headers_with_underscores_action: REJECT_REQUEST
          # No request is internal, so Envoy strips the x-envoy-* retries and
          # timeouts an agent sends (envoy/egress.yaml says why).
          original_ip_detection_extensions:
          - name: envoy.http.original_ip_detection.custom_header
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.http.original_ip_detection.custom_header.v3.CustomHeaderConfig
              header_name: x-forwarded-for
              allow_extension_to_set_address_as_trusted: false
          stream_idle_timeout: 300s
          access_log:
          - name: envoy.access_loggers.stdout
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.access_loggers.stream.v3.StdoutAccessLog
              log_format:
                json_format:
                  time: "%START_TIME%"
                  request_id: "%REQ(X-REQUEST-ID)%"
                  method: "%REQ(:METHOD)%"
                  # The path Envoy routed: an x-envoy-* header is the agent's.
                  path: "%REQ(:PATH)%"
                  authority: "%REQ(:AUTHORITY)%"
                  {{- if not $sidecar }}
                  client: "%DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT%"
                  {{- end }}
                  rail: "%UPSTREAM_CLUSTER%"
                  upstream: "%UPSTREAM_HOST%"
                  status: "%RESPONSE_CODE%"
                  flags: "%RESPONSE_FLAGS%"
                  details: "%RESPONSE_CODE_DETAILS%"
                  duration_ms: "%DURATION%"
                  bytes_in: "%BYTES_RECEIVED%"
                  bytes_out: "%BYTES_SENT%"
                  sik: "%DYNAMIC_METADATA(envoy.filters.http.ext_authz:countersign:sik)%"
                  attempt: "%DYNAMIC_METADATA(envoy.filters.http.ext_authz:countersign:attempt_seq)%"
                  authz_ms: "%DYNAMIC_METADATA(envoy.filters.http.ext_authz:ext_authz_duration)%"
          http_filters:
          - name: envoy.filters.http.ext_authz
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
              grpc_service:
                envoy_grpc: { cluster_name: countersign }
                timeout: 5s
              transport_api_version: V3
              failure_mode_allow: false
              status_on_error: { code: 503 }
              with_request_body:
                max_request_bytes: 65536
                allow_partial_message: true
                pack_as_bytes: true
              clear_route_cache: false
              encode_raw_headers: false
              validate_mutations: true
              decoder_header_mutation_rules:
                allow_all_routing: false
                allow_envoy: false
                disallow_system: true
                disallow_is_error: true
          - name: envoy.filters.http.ext_proc
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor
              grpc_service:
                envoy_grpc: { cluster_name: countersign }
              failure_mode_allow: false
              processing_mode:
                request_header_mode: SEND
                response_header_mode: SEND
                request_body_mode: BUFFERED
                response_body_mode: BUFFERED
                request_trailer_mode: SEND
                response_trailer_mode: SKIP
              message_timeout: 5s
              metadata_options:
                forwarding_namespaces:
                  untyped: ["envoy.filters.http.ext_authz"]
              mutation_rules:
                allow_all_routing: false
                allow_envoy: false
                disallow_system: true
                disallow_is_error: true
              allow_mode_override: false
              disable_immediate_response: false
              observability_mode: false
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
              suppress_envoy_headers: true
          route_config:
            name: rails
            virtual_hosts:
            {{- range $r := .Values.rails }}
            {{- $host := include "countersign.upstreamHost" $r }}
            {{- $timeout := $r.egress.timeout | default "60s" }}
            - name: {{ $r.egress.name }}
              domains:
              {{- if $sidecar }}
              {{- include "countersign.sidecarDomains" (dict "root" $root "rail" $r) | nindent 14 }}
              {{- else }}
              {{- include "countersign.railDomains" (dict "root" $root "rail" $r) | nindent 14 }}
              {{- end }}
              routes:
              {{- if $r.mcp }}
              {{- $endpoint := $r.mcp.endpoint | default "/mcp" }}
              # The MCP server's SSE stream carries no money and never
              # ends: not buffered by ext_proc, no route timeout.
              - match:
                  path: {{ $endpoint | quote }}
                  headers: [{ name: ":method", string_match: { exact: GET } }]
                route: { cluster: rail-{{ $r.egress.name }}, host_rewrite_literal: {{ $host }}, timeout: 0s }
                typed_per_filter_config:
                  envoy.filters.http.ext_authz:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute
                    check_settings:
                      context_extensions: { rail_account: {{ $r.account | quote }}, rail_host: {{ $host }} }
                  envoy.filters.http.ext_proc:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute
                    disabled: true
              # JSON-RPC messages: buffered and committed like a rail call.
              - match: { path: {{ $endpoint | quote }} }
                route: { cluster: rail-{{ $r.egress.name }}, host_rewrite_literal: {{ $host }}, timeout: {{ $timeout }} }
                typed_per_filter_config:
                  envoy.filters.http.ext_authz:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute
                    check_settings:
                      context_extensions: { rail_account: {{ $r.account | quote }}, rail_host: {{ $host }} }
              {{- else }}
              - match: { prefix: "/" }
                route: { cluster: rail-{{ $r.egress.name }}, host_rewrite_literal: {{ $host }}, timeout: {{ $timeout }} }
                typed_per_filter_config:
                  envoy.filters.http.ext_authz:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute
                    check_settings:
                      context_extensions: { rail_account: {{ $r.account | quote }}, rail_host: {{ $host }} }
              {{- end }}
            {{- end }}
            - name: unknown
              domains: ["*"]
              routes:
              - match: { prefix: "/" }
                direct_response:
                  status: 404
                  body: { inline_string: "countersign egress: no rail is configured for this host\n" }
                typed_per_filter_config:
                  envoy.filters.http.ext_authz:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthzPerRoute
                    disabled: true
                  envoy.filters.http.ext_proc:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute
                    disabled: true

  clusters:
  # Countersign, over the Unix socket in the emptyDir shared by these
  # two containers only: ext_authz and ext_proc on one gRPC server, so
  # HTTP/2.
  - name: countersign
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options: {}
    load_assignment:
      cluster_name: countersign
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              pipe: { path: {{ include "countersign.socketPath" . }} }
  {{- range $r := .Values.rails }}
  {{- $host := include "countersign.upstreamHost" $r }}
  {{- $up := $r.egress.upstream | default dict }}
  {{- $tls := ne (toString $up.tls) "false" }}

  - name: rail-{{ $r.egress.name }}
    type: LOGICAL_DNS
    dns_lookup_family: V4_PREFERRED
    connect_timeout: 5s
    load_assignment:
      cluster_name: rail-{{ $r.egress.name }}
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: { address: {{ $host }}, port_value: {{ int ($up.port | default 443) }} }
    {{- if $tls }}
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: {{ $host }}
        common_tls_context:
          tls_params:
            tls_minimum_protocol_version: TLSv1_2
          validation_context:
            trusted_ca: { filename: {{ $root.Values.envoy.caBundle }} }
            match_typed_subject_alt_names:
            - san_type: DNS
              matcher: { exact: {{ $host }} }
    {{- end }}
  {{- end }}
{{- end -}}
{{- end -}}
