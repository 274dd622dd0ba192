#!/usr/bin/env bash
# chart-test: lint charts/countersign, render it with its default values and
# with every charts/countersign/ci/*.yaml, and check each rendering with
# scripts/chartcheck: the invariants that keep the rail keys and the gRPC
# socket away from everything but Countersign and Envoy, Envoy's bootstrap
# parsed and validated the way Envoy would, and the real `countersign serve`
# started with the rendered environment and rails file. Then values the
# chart must refuse, each with its message.
#
# Offline: helm is built from the Go module proxy at a pinned version
# (scripts/tool.sh) into a cache outside the clone, once per version.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
CHART=charts/countersign
NAMESPACE=agents
# helm built by `go install` carries no default Kubernetes version (it says
# v1.20.0); render for a current one. The chart needs >= 1.30.
KUBE_VERSION=1.34.0

step_start=$SECONDS
step() {
	echo "chart-test: $* (+$((SECONDS - step_start))s)" >&2
}

# helm, at the pinned version, built once into the tool cache (scripts/tool.sh).
HELM=$(GO="$GO" bash scripts/tool.sh helm)
# Keep helm's own state out of the user's home directory.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export HELM_CACHE_HOME="$work/cache" HELM_CONFIG_HOME="$work/config" HELM_DATA_HOME="$work/data"

step "building scripts/chartcheck and countersign"
"$GO" build -o "$work/chartcheck" ./scripts/chartcheck
"$GO" build -o "$work/countersign" ./cmd/countersign

# Every values set the chart is tested with: the defaults, then ci/*.yaml.
sets=(default)
for f in "$CHART"/ci/*.yaml; do
	[[ -e "$f" ]] && sets+=("$f")
done

for s in "${sets[@]}"; do
	args=()
	name=default
	if [[ "$s" != default ]]; then
		args=(--values "$s")
		name=$(basename "$s" .yaml)
	fi
	step "$name: helm lint --strict"
	"$HELM" lint --strict "${args[@]}" --namespace "$NAMESPACE" --kube-version "$KUBE_VERSION" "$CHART"
	step "$name: helm template"
	out="$work/$name.yaml"
	"$HELM" template countersign "$CHART" "${args[@]}" --namespace "$NAMESPACE" --kube-version "$KUBE_VERSION" >"$out"
	step "$name: chartcheck (and countersign serve with the rendered settings)"
	"$work/chartcheck" -name "$name" -serve "$work/countersign" <"$out"
done

# Values the chart must refuse to render, each with the message it gives.
refuse() {
	local want=$1
	shift
	local log="$work/refused.log"
	if "$HELM" template countersign "$CHART" --namespace "$NAMESPACE" --kube-version "$KUBE_VERSION" "$@" >/dev/null 2>"$log"; then
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
refuse "may not set grpc-addr" --set countersign.settings.grpc-addr=0.0.0.0:9191
refuse "keySecret.name is required" --set-json "rails=[$(rail a stripe '')]"
refuse "is configured twice" --set-json "rails=[$(rail a one s),$(rail a two s)]"
refuse "is also accepted for" --set-json "rails=[$(rail a one s ',"hosts":["api.stripe.com"]'),$(rail b two s ',"hosts":["x.example"],"egress":{"name":"two","extraDomains":["countersign-one"]}')]"
refuse "tls may be false only for an MCP account" --set-json "rails=[$(rail a one s ',"egress":{"name":"one","upstream":{"tls":false}}')]"
refuse "fsGroup is required" --set podSecurityContext.fsGroup=null
refuse "rails must name at least one rail account" --set-json 'rails=[]'
refuse "egress/name.: .Stripe. does not match pattern" --set-json "rails=[$(rail a Stripe s)]"

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
