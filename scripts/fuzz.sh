#!/usr/bin/env bash
# fuzz.sh FUZZTIME — runs every Fuzz* target in the module for FUZZTIME
# each (go test -fuzz takes one target at a time). `make test` runs it
# briefly; `make fuzz FUZZTIME=10m` runs it longer.
#
# A target that fails with "context deadline exceeded" and writes no
# failing input under testdata/fuzz/ hit a race in Go's fuzz coordinator
# at the end of -fuzztime (go.dev/issue/75804, fixed in Go 1.27; a CI run
# on go1.26.8 hit it), not a bug of ours: it is run once more. Any failure that writes an input, or fails twice, fails.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-1m}
out=/tmp/fairway-fuzz.$$
trap 'rm -f "$out"' EXIT
mapfile -t targets < <(grep -rl --include='*_test.go' '^func Fuzz' . | grep -v '^./.dev/' | sort)
[[ ${#targets[@]} -gt 0 ]] || { echo "fuzz: no fuzz targets found" >&2; exit 1; }

# inputs lists the failing inputs go test has written for a target.
inputs() { ls "$1/testdata/fuzz/$2" 2>/dev/null | sort || true; }

for file in "${targets[@]}"; do
	pkg=./$(dirname "${file#./}")
	for fn in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$file" | cut -d' ' -f2); do
		for try in 1 2; do
			echo "fuzz: $pkg $fn ($fuzztime)"
			before=$(inputs "$pkg" "$fn")
			if go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$fuzztime" "$pkg" >"$out" 2>&1; then
				break
			fi
			if [[ $try == 1 && "$(inputs "$pkg" "$fn")" == "$before" ]] && grep -q 'context deadline exceeded' "$out"; then
				echo "fuzz: $fn stopped on Go's fuzz-deadline race (go.dev/issue/75804) without a failing input; once more" >&2
				continue
			fi
			cat "$out"
			if [[ "$(inputs "$pkg" "$fn")" == "$before" ]]; then
				echo "fuzz: $fn in $pkg failed without writing a failing input (output above)" >&2
			else
				echo "fuzz: $fn in $pkg failed; the failing input is under $pkg/testdata/fuzz/$fn" >&2
			fi
			exit 1
		done
	done
done
echo "fuzz: ${#targets[@]} files, all targets passed"
