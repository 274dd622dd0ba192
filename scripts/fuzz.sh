#!/usr/bin/env bash
# Runs every Go fuzz target in the module for FUZZTIME (default 5s) each.
# go test -fuzz takes one target per run, so they are found and run one by one.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-5s}"
count=0
while IFS=: read -r file _ line; do
	name=$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*)\(.*/\1/' <<<"$line")
	pkg="./$(dirname "$file")"
	echo "fuzz: $pkg $name ($fuzztime)"
	# go test -fuzz can end a clean run with "context deadline exceeded" when
	# the time runs out while a worker is busy (a toolchain race, no failing
	# input; likelier on a busy machine, where gathering the baseline
	# coverage takes most of the time). That one case is run again, up to
	# twice; any failing input fails.
	for try in 1 2 3; do
		if out=$(go test -run='^$' -fuzz="^${name}\$" -fuzztime="$fuzztime" "$pkg" 2>&1); then
			printf '%s\n' "$out"
			break
		fi
		printf '%s\n' "$out"
		if [ "$try" = 3 ] || ! grep -q 'context deadline exceeded' <<<"$out" || grep -q 'Failing input' <<<"$out"; then
			echo "fuzz: $pkg $name failed" >&2
			exit 1
		fi
		echo "fuzz: $pkg $name ended on the toolchain's deadline race with no failing input; running it again"
	done
	count=$((count + 1))
done < <(git grep -n -E '^func Fuzz[A-Za-z0-9_]*\(' -- '*_test.go' ':!gen/*' | sort)
if [ "$count" -eq 0 ]; then
	echo "fuzz: no fuzz targets found" >&2
	exit 1
fi
echo "fuzz: $count targets passed"
