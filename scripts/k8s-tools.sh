#!/usr/bin/env bash
# k8s-tools.sh NAME: print the path of a real Kubernetes server binary for
# `make e2e-k8s` (NAME is etcd or kube-apiserver), building it once per version
# from its wrapper module under e2e/k8s/tools/NAME into the same cache as
# scripts/tool.sh: $COUNTERSIGN_TOOLS_CACHE, else
# $XDG_CACHE_HOME/countersign-tools, else ~/.cache/countersign-tools, each
# binary under NAME@VERSION/GOOS-GOARCH-GOVERSION/. The version is the one the
# wrapper's go.mod requires, so bumping it there rebuilds. kube-apiserver takes
# tens of minutes on two cores the first time; later runs start at once.
set -euo pipefail

GO=${GO:-go}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case "${1:-}" in
etcd) mod=go.etcd.io/etcd/server/v3 ;;
kube-apiserver) mod=k8s.io/kubernetes ;;
*)
	echo "k8s-tools.sh: usage: k8s-tools.sh etcd|kube-apiserver" >&2
	exit 2
	;;
esac
name=$1
src="$root/e2e/k8s/tools/$name"
ver=$(awk -v m="$mod" '$1 == "require" && $2 == m { print $3 } $1 == m { print $2 }' "$src/go.mod" | head -n1)
if [[ -z "$ver" ]]; then
	echo "k8s-tools.sh: $src/go.mod does not require $mod" >&2
	exit 1
fi
cache=${COUNTERSIGN_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/countersign-tools}
dir="$cache/$name@$ver/$("$GO" env GOOS)-$("$GO" env GOARCH)-$("$GO" env GOVERSION)"
bin="$dir/$name"
mkdir -p "$cache"
if [[ ! -x "$bin" ]] && command -v flock >/dev/null; then
	# One build at a time per binary: a second caller waits for the first's.
	exec 9>"$cache/.$name@$ver.lock"
	flock 9
fi
if [[ ! -x "$bin" ]]; then
	echo "k8s-tools.sh: building $name $ver into $dir (once per version; later runs reuse it)" >&2
	start=$SECONDS
	tmp=$(mktemp -d "$cache/.build.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	ldflags=
	if [[ $name == kube-apiserver ]]; then
		# What upstream's build stamps, so /version says which release this is.
		minor=${ver#v1.}
		minor=${minor%%.*}
		ldflags="-X k8s.io/component-base/version.gitVersion=$ver -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
	fi
	# Static, as upstream releases them; GOWORK=off so no workspace leaks in.
	(cd "$src" && CGO_ENABLED=0 GOWORK=off "$GO" build -buildvcs=false -ldflags "$ldflags" -o "$tmp/$name" .)
	mkdir -p "$dir"
	# A rename, so a run that is stopped half-way never leaves a broken binary.
	mv -f "$tmp/$name" "$bin"
	echo "k8s-tools.sh: built $name $ver in $((SECONDS - start))s" >&2
fi
echo "$bin"
