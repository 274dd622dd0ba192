#!/usr/bin/env bash
# tool.sh NAME: print the path of a pinned tool that is not a go.mod tool
# (its own module graph would clash with ours), building it once per version
# into a cache outside the clone, so a fresh clone on a machine that built it
# before starts at once. The cache is $COUNTERSIGN_TOOLS_CACHE, else
# $XDG_CACHE_HOME/countersign-tools, else ~/.cache/countersign-tools; each
# binary sits under NAME@VERSION/GOOS-GOARCH-GOVERSION/.
set -euo pipefail

GO=${GO:-go}
case "${1:-}" in
golangci-lint) pkg=github.com/golangci/golangci-lint/v2/cmd/golangci-lint ver=v2.15.0 ;;
helm) pkg=helm.sh/helm/v3/cmd/helm ver=v3.22.0 ;;
kubeconform) pkg=github.com/yannh/kubeconform/cmd/kubeconform ver=v0.8.0 ;;
*)
	echo "tool.sh: usage: tool.sh golangci-lint|helm|kubeconform" >&2
	exit 2
	;;
esac
name=$1
cache=${COUNTERSIGN_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/countersign-tools}
dir="$cache/$name@$ver/$("$GO" env GOOS)-$("$GO" env GOARCH)-$("$GO" env GOVERSION)"
bin="$dir/$name"
if [[ ! -x "$bin" ]]; then
	mkdir -p "$cache"
	echo "tool.sh: building $name $ver into $dir (once per version; later runs reuse it)" >&2
	start=$SECONDS
	tmp=$(mktemp -d "$cache/.build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	GOBIN="$tmp" "$GO" install "$pkg@$ver"
	mkdir -p "$dir"
	# A rename, so a run that is stopped half-way never leaves a broken binary.
	mv -f "$tmp/$name" "$bin"
	echo "tool.sh: built $name $ver in $((SECONDS - start))s" >&2
fi
echo "$bin"
