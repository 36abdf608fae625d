#!/usr/bin/env bash
# fuzz.sh FUZZTIME — runs every Fuzz* target in the module for FUZZTIME
# each (go test -fuzz takes one target at a time). `make test` runs it
# briefly; `make fuzz FUZZTIME=10m` runs it longer.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-1m}
mapfile -t targets < <(grep -rl --include='*_test.go' '^func Fuzz' . | grep -v '^./.dev/' | sort)
[[ ${#targets[@]} -gt 0 ]] || { echo "fuzz: no fuzz targets found" >&2; exit 1; }
for file in "${targets[@]}"; do
	pkg=./$(dirname "${file#./}")
	for fn in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | cut -d' ' -f2); do
		echo "fuzz: $pkg $fn ($fuzztime)"
		go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$fuzztime" "$pkg" >/tmp/fairway-fuzz.$$ 2>&1 || {
			cat /tmp/fairway-fuzz.$$; rm -f /tmp/fairway-fuzz.$$
			echo "fuzz: $fn in $pkg failed; the failing input is under $pkg/testdata/fuzz/$fn" >&2
			exit 1
		}
	done
done
rm -f /tmp/fairway-fuzz.$$
echo "fuzz: ${#targets[@]} files, all targets passed"
