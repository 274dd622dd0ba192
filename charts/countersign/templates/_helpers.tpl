{{/*
Names.
*/}}
{{- define "countersign.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "countersign.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "countersign.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "countersign.selectorLabels" -}}
app.kubernetes.io/name: {{ include "countersign.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "countersign.labels" -}}
helm.sh/chart: {{ include "countersign.chart" . }}
{{ include "countersign.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "countersign.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "countersign.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
Fixed paths. The gRPC socket's directory is an emptyDir mounted into the
countersign and envoy containers only; rail keys are mounted under
railKeyDir in the countersign container only, and so is the audit signing
key under auditKeyDir.
*/}}
{{- define "countersign.socketDir" -}}/var/run/countersign{{- end -}}
{{- define "countersign.socketPath" -}}{{ include "countersign.socketDir" . }}/envoy.sock{{- end -}}
{{- define "countersign.apiSocketPath" -}}{{ include "countersign.socketDir" . }}/api.sock{{- end -}}
{{- define "countersign.railsDir" -}}/etc/countersign{{- end -}}
{{- define "countersign.railKeyDir" -}}/var/run/secrets/countersign/rails{{- end -}}
{{- define "countersign.auditKeyDir" -}}/var/run/secrets/countersign/audit{{- end -}}
{{- define "countersign.envoyConfigDir" -}}/etc/envoy-countersign{{- end -}}

{{/*
Images: repository:tag or repository@digest; never `latest`, never untagged.
Call with (dict "image" .Values.image "default" .Chart.AppVersion "what" "image").
*/}}
{{- define "countersign.imageRef" -}}
{{- $tag := default .default .image.tag | toString -}}
{{- if not .image.repository -}}
{{- fail (printf "%s.repository is required" .what) -}}
{{- end -}}
{{- if or (eq $tag "latest") (hasSuffix ":latest" .image.repository) -}}
{{- fail (printf "%s.tag must not be latest: pin a version (or a digest)" .what) -}}
{{- end -}}
{{- if .image.digest -}}
{{- if not (hasPrefix "sha256:" .image.digest) -}}
{{- fail (printf "%s.digest must be sha256:…, got %q" .what .image.digest) -}}
{{- end -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- if not $tag -}}
{{- fail (printf "%s.tag is required" .what) -}}
{{- end -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}
{{- end -}}

{{- define "countersign.image" -}}
{{- include "countersign.imageRef" (dict "image" .Values.image "default" .Chart.AppVersion "what" "image") -}}
{{- end -}}

{{- define "countersign.envoyImage" -}}
{{- include "countersign.imageRef" (dict "image" .Values.envoy.image "default" "" "what" "envoy.image") -}}
{{- end -}}

{{/*
The Service, and Envoy virtual host, of one rail: <fullname>-<egress.name>.
Call with (dict "root" $ "rail" $r).
*/}}
{{- define "countersign.railServiceName" -}}
{{- printf "%s-%s" (include "countersign.fullname" .root) .rail.egress.name -}}
{{- end -}}

{{/* The upstream host Envoy sends a rail's calls to. */}}
{{- define "countersign.upstreamHost" -}}
{{- $up := .egress.upstream | default dict -}}
{{- default (first .hosts) $up.host -}}
{{- end -}}

{{/*
Validation of everything the schema cannot say. Rendered (as nothing) by
the Deployment, so every install and template run goes through it.
*/}}
{{- define "countersign.validate" -}}
{{- if not .Values.database.existingSecret -}}
{{- fail "database.existingSecret is required: the name of a Secret holding the PostgreSQL URL" -}}
{{- end -}}
{{- if not .Values.database.key -}}
{{- fail "database.key is required" -}}
{{- end -}}
{{- if not .Values.rails -}}
{{- fail "rails must name at least one rail account" -}}
{{- end -}}
{{- $accounts := dict -}}
{{- $egress := dict -}}
{{- $domains := dict -}}
{{- range $i, $r := .Values.rails -}}
{{- $where := printf "rails[%d] (%s)" $i ($r.account | default "") -}}
{{- if not (regexMatch "^[A-Za-z0-9_.:-]{1,128}$" ($r.account | default "")) -}}
{{- fail (printf "%s: account must be 1–128 of [A-Za-z0-9_.:-]" $where) -}}
{{- end -}}
{{- if hasKey $accounts $r.account -}}
{{- fail (printf "%s: account %q is configured twice" $where $r.account) -}}
{{- end -}}
{{- $_ := set $accounts $r.account true -}}
{{- if not $r.hosts -}}
{{- fail (printf "%s: hosts is empty" $where) -}}
{{- end -}}
{{- if not (and $r.keySecret $r.keySecret.name) -}}
{{- fail (printf "%s: keySecret.name is required: the Secret holding the rail's secret key" $where) -}}
{{- end -}}
{{- if not $r.keySecret.key -}}
{{- fail (printf "%s: keySecret.key is required" $where) -}}
{{- end -}}
{{- $en := "" -}}
{{- if $r.egress -}}{{- $en = $r.egress.name | default "" -}}{{- end -}}
{{- if not (regexMatch "^[a-z]([-a-z0-9]*[a-z0-9])?$" $en) -}}
{{- fail (printf "%s: egress.name %q must be a DNS label (a-z, 0-9, -; starting with a letter)" $where $en) -}}
{{- end -}}
{{- if eq $en "unknown" -}}
{{- fail (printf "%s: egress.name \"unknown\" is Envoy's catch-all virtual host" $where) -}}
{{- end -}}
{{- if hasKey $egress $en -}}
{{- fail (printf "%s: egress.name %q is configured twice" $where $en) -}}
{{- end -}}
{{- $_ := set $egress $en true -}}
{{- $svc := include "countersign.railServiceName" (dict "root" $ "rail" $r) -}}
{{- if gt (len $svc) 63 -}}
{{- fail (printf "%s: Service name %q is longer than 63 characters: shorten egress.name or fullnameOverride" $where $svc) -}}
{{- end -}}
{{- $up := $r.egress.upstream | default dict -}}
{{- if and (not $r.mcp) (eq (toString $up.tls) "false") -}}
{{- fail (printf "%s: egress.upstream.tls may be false only for an MCP account: a rail's REST API is reached over verified TLS" $where) -}}
{{- end -}}
{{- if and (eq $.Values.mode "injector") (eq (toString $up.tls) "false") -}}
{{- fail (printf "%s: egress.upstream.tls may not be false in mode injector: Envoy runs in the agent's pod, whose /etc/hosts the agent can write (as root) and whose resolver its pod spec chooses, so a plain-HTTP upstream could be steered to the agent with the rail key; reach the MCP server over verified TLS" $where) -}}
{{- end -}}
{{- range $d := include "countersign.railDomains" (dict "root" $ "rail" $r) | fromYamlArray -}}
{{- if hasKey $domains $d -}}
{{- fail (printf "%s: Host %q is also accepted for %s" $where $d (get $domains $d)) -}}
{{- end -}}
{{- $_ := set $domains $d $r.account -}}
{{- end -}}
{{- end -}}
{{- /*
What the chart sets itself and values may not set again: the kubelet keeps
the last definition of a name, chartcheck would read another, so a second
COUNTERSIGN_ENVOY_ADDR (with the unsafe TCP flag) or ENVOY_TLS_* would put
the listener whose ALLOW carries the rail keys on the network unchecked.
*/ -}}
{{- $managed := list "COUNTERSIGN_DATABASE_URL" "COUNTERSIGN_GRPC_ADDR" "COUNTERSIGN_HTTP_ADDR" "COUNTERSIGN_RAILS_FILE" "COUNTERSIGN_CONFIG" "COUNTERSIGN_AUDIT_SIGNING_KEY" "COUNTERSIGN_ENVOY_ADDR" "COUNTERSIGN_UNSAFE_ENVOY_TCP_EXPOSES_RAIL_KEYS" "COUNTERSIGN_ENVOY_TLS_CERT" "COUNTERSIGN_ENVOY_TLS_KEY" "COUNTERSIGN_ENVOY_CLIENT_CA" -}}
{{- with .Values.countersign.auditSigningKey -}}
{{- if and .existingSecret (not .key) -}}
{{- fail "countersign.auditSigningKey.key is required with existingSecret" -}}
{{- end -}}
{{- end -}}
{{- $fromSettings := dict -}}
{{- range $k, $v := .Values.countersign.settings -}}
{{- $env := printf "COUNTERSIGN_%s" ($k | upper | replace "-" "_") -}}
{{- if has $env $managed -}}
{{- fail (printf "countersign.settings may not set %s (%s): the chart sets it" $k $env) -}}
{{- end -}}
{{- if hasKey $fromSettings $env -}}
{{- fail (printf "countersign.settings %s and %s both set %s" (get $fromSettings $env) $k $env) -}}
{{- end -}}
{{- $_ := set $fromSettings $env $k -}}
{{- end -}}
{{- $extra := dict -}}
{{- range $e := .Values.countersign.extraEnv -}}
{{- if has $e.name $managed -}}
{{- fail (printf "countersign.extraEnv may not set %s: the chart sets it" $e.name) -}}
{{- end -}}
{{- if hasKey $fromSettings $e.name -}}
{{- fail (printf "countersign.extraEnv may not set %s: countersign.settings.%s sets it" $e.name (get $fromSettings $e.name)) -}}
{{- end -}}
{{- if hasKey $extra $e.name -}}
{{- fail (printf "countersign.extraEnv sets %s twice" $e.name) -}}
{{- end -}}
{{- $_ := set $extra $e.name true -}}
{{- end -}}
{{- if eq (int .Values.countersign.httpPort) (int .Values.envoy.port) -}}
{{- fail "countersign.httpPort and envoy.port must differ" -}}
{{- end -}}
{{- if eq (int .Values.envoy.adminPort) (int .Values.envoy.port) -}}
{{- fail "envoy.adminPort and envoy.port must differ" -}}
{{- end -}}
{{- if not .Values.podSecurityContext.fsGroup -}}
{{- fail "podSecurityContext.fsGroup is required: it is how Envoy reaches Countersign's 0660 socket" -}}
{{- end -}}
{{- if not (has .Values.migrations.mode (list "hook" "initContainer")) -}}
{{- fail (printf "migrations.mode must be hook or initContainer, got %q" .Values.migrations.mode) -}}
{{- end -}}
{{- end -}}

{{/*
The Host values Envoy accepts for one rail, as a YAML list: the Service's
names, with and without the Service port, then egress.extraDomains.
Call with (dict "root" $ "rail" $r).
*/}}
{{- define "countersign.railDomains" -}}
{{- $svc := include "countersign.railServiceName" . -}}
{{- $ns := .root.Release.Namespace -}}
{{- $port := int .root.Values.service.port -}}
{{- $names := list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .root.Values.clusterDomain) -}}
{{- $out := list -}}
{{- range $n := $names -}}
{{- $out = append $out $n -}}
{{- $out = append $out (printf "%s:%d" $n $port) -}}
{{- end -}}
{{- range $d := .rail.egress.extraDomains | default list -}}
{{- $out = append $out $d -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/*
Injector mode. The injected Envoy's listener is fixed by the injector
(internal/inject EnvoyPort, 127.0.0.1 only); each rail's base URL host is
<egress.name>.egress.local, aliased to 127.0.0.1 in the agent pod.
*/}}
{{- define "countersign.sidecarEnvoyPort" -}}15001{{- end -}}

{{- define "countersign.sidecarHost" -}}{{ .egress.name }}.egress.local{{- end -}}

{{/* The Host values an injected Envoy accepts for one rail, as a YAML list. */}}
{{- define "countersign.sidecarDomains" -}}
{{- $h := include "countersign.sidecarHost" .rail -}}
{{- toYaml (list $h (printf "%s:%s" $h (include "countersign.sidecarEnvoyPort" .root))) -}}
{{- end -}}

{{/* A rail's base URL in an agent pod, as the injector's --base-url sets it. */}}
{{- define "countersign.sidecarBaseURL" -}}
{{- $u := printf "http://%s:%s" (include "countersign.sidecarHost" .rail) (include "countersign.sidecarEnvoyPort" .root) -}}
{{- if .rail.mcp -}}{{- $u = printf "%s%s" $u (.rail.mcp.endpoint | default "/mcp") -}}{{- end -}}
{{- $u -}}
{{- end -}}

{{- define "countersign.injectorName" -}}
{{- printf "%s-injector" (include "countersign.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "countersign.injectorSelectorLabels" -}}
{{ include "countersign.selectorLabels" . }}
app.kubernetes.io/component: injector
{{- end -}}

{{/* The ConfigMaps the injected sidecars read, in each agent namespace. */}}
{{- define "countersign.sidecarEnvoyConfigMap" -}}{{ include "countersign.fullname" . }}-envoy-sidecar{{- end -}}
{{- define "countersign.sidecarRailsConfigMap" -}}{{ include "countersign.fullname" . }}-rails{{- end -}}

{{/* The webhook's serving certificate: the Secret the injector mounts. */}}
{{- define "countersign.injectorTLSSecret" -}}
{{- if eq .Values.injector.tls.mode "secret" -}}
{{- .Values.injector.tls.secret.name -}}
{{- else -}}
{{- include "countersign.injectorName" . }}-tls
{{- end -}}
{{- end -}}

{{/* The DNS names the API server calls the injector's Service by. */}}
{{- define "countersign.injectorDNSNames" -}}
{{- $svc := include "countersign.injectorName" . -}}
{{- $ns := .Release.Namespace -}}
{{- toYaml (list (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain)) -}}
{{- end -}}

{{/*
Validation of injector mode beyond the schema. Rendered (as nothing) by the
injector's Deployment.
*/}}
{{- define "countersign.validateInjector" -}}
{{- $inj := .Values.injector -}}
{{- if eq .Release.Namespace "kube-system" -}}
{{- fail "mode injector: install the injector in a namespace of its own, not kube-system" -}}
{{- end -}}
{{- range $ns := $inj.agentNamespaces -}}
{{- if or (eq $ns $.Release.Namespace) (eq $ns "kube-system") -}}
{{- fail (printf "injector.agentNamespaces: %q is never injected (kube-system and the injector's own namespace are excluded)" $ns) -}}
{{- end -}}
{{- end -}}
{{- $egress := $inj.closeEgress -}}
{{- if $egress.enabled -}}
{{- if not $egress.image.repository -}}
{{- fail "injector.closeEgress.enabled needs injector.closeEgress.image.repository: an image with /bin/sh, iptables and ip6tables" -}}
{{- end -}}
{{- if not (or $egress.image.tag $egress.image.digest) -}}
{{- fail "injector.closeEgress.enabled needs injector.closeEgress.image.tag or .digest: pin the iptables image" -}}
{{- end -}}
{{- if not $egress.agentUID -}}
{{- fail "injector.closeEgress.enabled needs injector.closeEgress.agentUID: the UID every agent container runs as, which the rules match" -}}
{{- end -}}
{{- if not (or $egress.hosts $egress.cidrs) -}}
{{- fail "injector.closeEgress.enabled needs injector.closeEgress.hosts or .cidrs: the rail hosts or ranges to close" -}}
{{- end -}}
{{- end -}}
{{- if ne .Values.migrations.mode "hook" -}}
{{- fail "mode injector: migrations.mode must be hook (the injected countersign containers never migrate; the Job runs in the injector's namespace)" -}}
{{- end -}}
{{- $envs := dict -}}
{{- range $i, $r := .Values.rails -}}
{{- if not $r.baseURLEnv -}}
{{- fail (printf "rails[%d] (%s): baseURLEnv is required in mode injector: the environment variable the agent's SDK reads the rail's base URL from" $i $r.account) -}}
{{- end -}}
{{- if hasKey $envs $r.baseURLEnv -}}
{{- fail (printf "rails[%d] (%s): baseURLEnv %q is also %s's" $i $r.account $r.baseURLEnv (get $envs $r.baseURLEnv)) -}}
{{- end -}}
{{- $_ := set $envs $r.baseURLEnv $r.account -}}
{{- /* The injected countersign runs with in-agent-pod: the agent shares its loopback and /etc/hosts, so it refuses a rail URL that is not https. */ -}}
{{- $urls := dict "baseURL" ($r.baseURL | default "") -}}
{{- if $r.mcp -}}{{- $_ := set $urls "mcp.base_url" ($r.mcp.base_url | default "") -}}{{- end -}}
{{- range $field, $u := $urls -}}
{{- if and $u (not (hasPrefix "https://" (lower $u))) -}}
{{- fail (printf "rails[%d] (%s): %s %q must be https in mode injector: the injected countersign runs in the agent's pod (in-agent-pod), whose loopback and /etc/hosts the agent shares, and refuses a plain-HTTP rail URL, which would carry the rail key to whatever answers" $i $r.account $field $u) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if eq $inj.tls.mode "secret" -}}
{{- if not $inj.tls.secret.name -}}
{{- fail "injector.tls.secret.name is required with injector.tls.mode=secret: a kubernetes.io/tls Secret for the injector's Service name" -}}
{{- end -}}
{{- if not $inj.tls.secret.caBundle -}}
{{- fail "injector.tls.secret.caBundle is required with injector.tls.mode=secret: the base64 PEM of the CA that signed the Secret's certificate" -}}
{{- end -}}
{{- if not (contains "BEGIN CERTIFICATE" (b64dec $inj.tls.secret.caBundle)) -}}
{{- fail "injector.tls.secret.caBundle must be base64 of a PEM certificate (base64 -w0 ca.crt)" -}}
{{- end -}}
{{- end -}}
{{- end -}}
