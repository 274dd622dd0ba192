#!/usr/bin/env bash
# chart-test: lint charts/countersign, render it with its default values and
# with every charts/countersign/ci/*.yaml, and check each rendering with
# scripts/chartcheck, in both modes. mode egress: the invariants that keep
# the rail keys and the gRPC socket away from everything but Countersign and
# Envoy, Envoy's bootstrap parsed and validated the way Envoy would, and the
# real `countersign serve` started with the rendered environment and rails
# file. mode injector (ci/injector*.yaml): the webhooks fail closed and
# never reach kube-system or the injector's namespace, they call the
# Service and port the injector listens on, no RBAC and no Secret but its
# certificate, the sidecars' Envoy bootstrap and rails file fit what the
# injector wires, and the real `countersign inject` started with the
# rendered flags guards a pod. Every rendering is also validated against
# the Kubernetes OpenAPI schema (kubeconform, strict), and so is every pod
# the injector's golden cases mutate (scripts/mutatedpods: the golden patch
# applied to the case's pod). Then values the chart must refuse, each with
# its message.
#
# Offline: helm and kubeconform are built from the Go module proxy at pinned
# versions (scripts/tool.sh) into a cache outside the clone, once per
# version; so are the JSON schemas (scripts/kubeschema, from the
# k8s.io/kubernetes module's api/openapi-spec/swagger.json).
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
CHART=charts/countersign
NAMESPACE=agents
# mode injector installs into a namespace of its own, never injected.
INJECTOR_NAMESPACE=countersign-system
# helm built by `go install` carries no default Kubernetes version (it says
# v1.20.0); render for a current one. The chart needs >= 1.30. The schemas
# are this version's.
KUBE_VERSION=1.34.0

step_start=$SECONDS
step() {
	echo "chart-test: $* (+$((SECONDS - step_start))s)" >&2
}

# helm, at the pinned version, built once into the tool cache (scripts/tool.sh).
HELM=$(GO="$GO" bash scripts/tool.sh helm)
KUBECONFORM=$(GO="$GO" bash scripts/tool.sh kubeconform)
# Keep helm's own state out of the user's home directory.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export HELM_CACHE_HOME="$work/cache" HELM_CONFIG_HOME="$work/config" HELM_DATA_HOME="$work/data"

step "building scripts/chartcheck, scripts/mutatedpods and countersign"
"$GO" build -o "$work/chartcheck" ./scripts/chartcheck
"$GO" build -o "$work/mutatedpods" ./scripts/mutatedpods
"$GO" build -o "$work/countersign" ./cmd/countersign

# kubeconform's schemas for KUBE_VERSION, generated once into the tool cache
# from k8s.io/kubernetes's OpenAPI document (in the Go module cache).
cache=${COUNTERSIGN_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/countersign-tools}
schemas="$cache/kube-schemas@v$KUBE_VERSION"
if [[ ! -e "$schemas/.complete" ]]; then
	step "generating the Kubernetes v$KUBE_VERSION JSON schemas into $schemas (once per version)"
	# Outside this module: the download must not touch go.mod.
	moddir=$(cd "$work" && GOFLAGS= "$GO" mod download -json "k8s.io/kubernetes@v$KUBE_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	swagger="$moddir/api/openapi-spec/swagger.json"
	[[ -f "$swagger" ]] || {
		echo "chart-test: no $swagger" >&2
		exit 1
	}
	mkdir -p "$cache"
	tmp=$(mktemp -d "$cache/.schemas.XXXXXX")
	"$GO" run ./scripts/kubeschema -swagger "$swagger" -out "$tmp"
	touch "$tmp/.complete"
	rm -rf "$schemas"
	mv "$tmp" "$schemas"
fi

# Every values set the chart is tested with: the defaults, then ci/*.yaml.
sets=(default)
for f in "$CHART"/ci/*.yaml; do
	[[ -e "$f" ]] && sets+=("$f")
done

for s in "${sets[@]}"; do
	args=()
	name=default
	ns=$NAMESPACE
	if [[ "$s" != default ]]; then
		args=(--values "$s")
		name=$(basename "$s" .yaml)
		if grep -q '^mode: injector' "$s"; then
			ns=$INJECTOR_NAMESPACE
		fi
	fi
	step "$name: helm lint --strict"
	"$HELM" lint --strict "${args[@]}" --namespace "$ns" --kube-version "$KUBE_VERSION" "$CHART"
	step "$name: helm template"
	out="$work/$name.yaml"
	"$HELM" template countersign "$CHART" "${args[@]}" --namespace "$ns" --kube-version "$KUBE_VERSION" >"$out"
	# cert-manager's Issuer and Certificate are not Kubernetes API kinds:
	# reported as skipped, never passed unseen.
	step "$name: kubeconform (Kubernetes v$KUBE_VERSION OpenAPI schema, strict)"
	"$KUBECONFORM" -strict -summary -skip Certificate,Issuer \
		-schema-location "$schemas/{{.ResourceKind}}{{.KindSuffix}}.json" "$out"
	step "$name: chartcheck (and countersign serve or inject with the rendered settings)"
	"$work/chartcheck" -name "$name" -serve "$work/countersign" <"$out"
done

# The schema validation must be able to fail: a misspelt field is caught.
step "kubeconform refuses a misspelt field"
sed 's/failurePolicy: Fail/failurPolicy: Fail/' "$work/injector-values.yaml" >"$work/misspelt.yaml"
if "$KUBECONFORM" -strict -skip Certificate,Issuer -schema-location "$schemas/{{.ResourceKind}}{{.KindSuffix}}.json" \
	"$work/misspelt.yaml" >"$work/misspelt.log" 2>&1; then
	echo "chart-test: kubeconform accepted failurPolicy; the schemas are not strict" >&2
	exit 1
fi

# Every pod the injector's golden cases admit with a patch, mutated by that
# patch, is a valid v1 Pod for the same Kubernetes version, strictly.
step "mutated pods: kubeconform (Kubernetes v$KUBE_VERSION OpenAPI schema, strict)"
pods="$work/mutated-pods"
n=$("$work/mutatedpods" "$pods")
files=("$pods"/*.json)
if [[ "$n" -lt 1 || "${#files[@]}" -ne "$n" ]]; then
	echo "chart-test: mutatedpods reported $n pods, wrote ${#files[@]} files" >&2
	exit 1
fi
"$KUBECONFORM" -strict -summary -schema-location "$schemas/{{.ResourceKind}}{{.KindSuffix}}.json" "$pods"
echo "chart-test: $n mutated pods valid (internal/inject/testdata)" >&2

# That validation must be able to fail: a misspelt field in every container
# of a mutated pod, the agent's and the sidecars', is caught.
step "kubeconform refuses a mutated pod with a misspelt container field"
mkdir "$work/misspelt-pod"
sed 's/"image":/"imag":/' "${files[0]}" >"$work/misspelt-pod/pod.json"
if "$KUBECONFORM" -strict -schema-location "$schemas/{{.ResourceKind}}{{.KindSuffix}}.json" \
	"$work/misspelt-pod/pod.json" >"$work/misspelt-pod.log" 2>&1; then
	echo "chart-test: kubeconform accepted a container's imag; the pod schema is not strict" >&2
	exit 1
fi
for c in containers/0 initContainers/0; do
	grep -q "/spec/$c': additional properties 'imag' not allowed" "$work/misspelt-pod.log" || {
		echo "chart-test: kubeconform did not report /spec/$c's imag:" >&2
		cat "$work/misspelt-pod.log" >&2
		exit 1
	}
done

# Values the chart must refuse to render, each with the message it gives.
refuse() {
	local want=$1
	shift
	local log="$work/refused.log"
	local ns=$NAMESPACE
	if [[ "${1:-}" == --namespace ]]; then
		ns=$2
		shift 2
	fi
	if "$HELM" template countersign "$CHART" --namespace "$ns" --kube-version "$KUBE_VERSION" "$@" >/dev/null 2>"$log"; then
		echo "chart-test: helm template $* rendered; it must be refused ($want)" >&2
		exit 1
	fi
	if ! grep -q -- "$want" "$log"; then
		echo "chart-test: helm template $* was refused, but not with \"$want\":" >&2
		cat "$log" >&2
		exit 1
	fi
}
step "refusals"
rail() { # a rails entry as JSON: account, egress name, key Secret name[, extra JSON members]
	printf '{"account":"%s","rail":"stripe","hosts":["api.stripe.com"],"keySecret":{"name":"%s","key":"key"},"egress":{"name":"%s"}%s}' "$1" "$3" "$2" "${4:-}"
}
refuse "database.existingSecret is required" --set database.existingSecret=
refuse "image.tag must not be latest" --set image.tag=latest
refuse "envoy.image.tag must not be latest" --set envoy.image.tag=latest
refuse "may not set COUNTERSIGN_GRPC_ADDR" --set-json 'countersign.extraEnv=[{"name":"COUNTERSIGN_GRPC_ADDR","value":"0.0.0.0:9191"}]'
refuse "may not set envoy-addr" --set countersign.settings.envoy-addr=0.0.0.0:9192
refuse "may not set COUNTERSIGN_RAIL_SETTLE_TIME: countersign.settings.rail-settle-time sets it" --set-json 'countersign.extraEnv=[{"name":"COUNTERSIGN_RAIL_SETTLE_TIME","value":"1s"}]'
refuse "may not set grpc-addr" --set countersign.settings.grpc-addr=0.0.0.0:9191
refuse "may not set audit-signing-key" --set countersign.settings.audit-signing-key=/etc/key
refuse "auditSigningKey.key is required" --set countersign.auditSigningKey.existingSecret=audit --set countersign.auditSigningKey.key=
refuse "keySecret.name is required" --set-json "rails=[$(rail a stripe '')]"
refuse "is configured twice" --set-json "rails=[$(rail a one s),$(rail a two s)]"
refuse "is also accepted for" --set-json "rails=[$(rail a one s ',"hosts":["api.stripe.com"]'),$(rail b two s ',"hosts":["x.example"],"egress":{"name":"two","extraDomains":["countersign-one"]}')]"
refuse "tls may be false only for an MCP account" --set-json "rails=[$(rail a one s ',"egress":{"name":"one","upstream":{"tls":false}}')]"
refuse "fsGroup is required" --set podSecurityContext.fsGroup=null
refuse "rails must name at least one rail account" --set-json 'rails=[]'
refuse "egress/name.: .Stripe. does not match pattern" --set-json "rails=[$(rail a Stripe s)]"
refuse "/mode.: value must be one of 'egress', 'injector'" --set mode=sidecar
# mode injector
inj=(--namespace "$INJECTOR_NAMESPACE" --set mode=injector)
refuse "not kube-system" --namespace kube-system --set mode=injector
refuse "\"$INJECTOR_NAMESPACE\" is never injected" "${inj[@]}" --set "injector.agentNamespaces={agents,$INJECTOR_NAMESPACE}"
refuse "baseURLEnv is required in mode injector" "${inj[@]}" --set-json "rails=[$(rail a stripe s)]"
refuse "baseURLEnv .STRIPE_API_BASE. is also" "${inj[@]}" --set-json "rails=[$(rail a one s ',"baseURLEnv":"STRIPE_API_BASE"'),$(rail b two t ',"baseURLEnv":"STRIPE_API_BASE"')]"
refuse "baseURLEnv.: 'not' failed" "${inj[@]}" --set-json "rails=[$(rail a stripe s ',"baseURLEnv":"COUNTERSIGN_BASE"')]"
refuse "migrations.mode must be hook" "${inj[@]}" --set migrations.mode=initContainer
refuse "egress.upstream.tls may not be false in mode injector" "${inj[@]}" --set-json "rails=[$(rail a one s ',"baseURLEnv":"ONE_URL","mcp":{"preset":"stripe","endpoint":"/mcp"},"egress":{"name":"one","upstream":{"port":8080,"tls":false}}')]"
refuse "injector.tls.secret.name is required" "${inj[@]}" --set injector.tls.mode=secret
refuse "injector.tls.secret.caBundle is required" "${inj[@]}" --set injector.tls.mode=secret --set injector.tls.secret.name=tls
refuse "caBundle must be base64 of a PEM certificate" "${inj[@]}" --set injector.tls.mode=secret --set injector.tls.secret.name=tls --set injector.tls.secret.caBundle=bm90IGEgY2VydA==
refuse "/injector/timeoutSeconds.: maximum: got 31, want 30" "${inj[@]}" --set injector.timeoutSeconds=31
refuse "/injector/tls/mode.: value must be one of" "${inj[@]}" --set injector.tls.mode=vault
egress=(--set injector.closeEgress.enabled=true --set injector.closeEgress.image.repository=registry.example.com/iptables --set injector.closeEgress.image.tag=1.8.11)
refuse "injector.closeEgress.enabled needs injector.closeEgress.image.repository" "${inj[@]}" --set injector.closeEgress.enabled=true
refuse "injector.closeEgress.enabled needs injector.closeEgress.image.tag or .digest" "${inj[@]}" "${egress[@]}" --set injector.closeEgress.image.tag=
refuse "injector.closeEgress.image.tag must not be latest" "${inj[@]}" "${egress[@]}" --set injector.closeEgress.image.tag=latest --set injector.closeEgress.agentUID=10001 --set 'injector.closeEgress.cidrs={203.0.113.0/24}'
refuse "injector.closeEgress.enabled needs injector.closeEgress.agentUID" "${inj[@]}" "${egress[@]}" --set 'injector.closeEgress.hosts={api.stripe.com}'
refuse "injector.closeEgress.enabled needs injector.closeEgress.hosts or .cidrs" "${inj[@]}" "${egress[@]}" --set injector.closeEgress.agentUID=10001
refuse "/injector/closeEgress/agentUID.: 'not' failed" "${inj[@]}" "${egress[@]}" --set injector.closeEgress.agentUID=65532 --set 'injector.closeEgress.cidrs={203.0.113.0/24}'
refuse "/injector/closeEgress/hosts/0.: .API.stripe.com. does not match pattern" "${inj[@]}" "${egress[@]}" --set injector.closeEgress.agentUID=10001 --set 'injector.closeEgress.hosts={API.stripe.com}'

# A setting the chart renders but Countersign refuses must fail the check.
step "a setting serve refuses"
"$HELM" template countersign "$CHART" --namespace "$NAMESPACE" --kube-version "$KUBE_VERSION" \
	--set countersign.settings.log-level=verbose >"$work/bad-setting.yaml"
if "$work/chartcheck" -name bad-setting -serve "$work/countersign" <"$work/bad-setting.yaml" >"$work/bad-setting.log" 2>&1; then
	echo "chart-test: countersign serve accepted log-level=verbose; the check must fail" >&2
	exit 1
fi
grep -q 'log-level (COUNTERSIGN_LOG_LEVEL) must be' "$work/bad-setting.log" || {
	cat "$work/bad-setting.log" >&2
	exit 1
}

step "ok"
