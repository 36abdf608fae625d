#!/usr/bin/env bash
# build.sh OUTPUT PACKAGE builds PACKAGE into OUTPUT (go build -v) and shows
# what it compiles as it goes: a first build compiles every dependency,
# minutes on a small machine; a later one only what changed. On a terminal
# one line counts the packages; otherwise a line every 25 packages.
# The binary is stamped with the version and commit of this checkout
# (--version) by the -ldflags of scripts/ldflags.sh, as `make build` does.
# GO names the go command (default go); GOFLAGS (-race, ...) passes on to
# it as usual.
set -euo pipefail
shopt -s lastpipe # the loop below runs in this shell: n is seen after it

[[ $# -eq 2 ]] || {
	echo "usage: build.sh OUTPUT PACKAGE" >&2
	exit 2
}
out=$1 pkg=$2
GO=${GO:-go}
ldflags=$(sh "$(dirname -- "${BASH_SOURCE[0]}")/ldflags.sh")

total=$("$GO" list -deps "$pkg" | wc -l)
echo "building $out: $pkg and its dependencies, $total packages (compiled once, then cached)"
tty=
[[ -t 1 ]] && tty=1
start=$SECONDS
n=0
set +e
"$GO" build -v -ldflags "$ldflags" -o "$out" "$pkg" 2>&1 | while IFS= read -r line; do
	# A package path is progress; anything else (a compiler error) is
	# printed as it is.
	if [[ ! $line =~ ^[A-Za-z0-9_.~/+-]+$ ]]; then
		[[ -n $tty ]] && printf '\r\033[K'
		printf '%s\n' "$line"
		continue
	fi
	n=$((n + 1))
	if [[ -n $tty ]]; then
		printf '\r\033[K  compiling %d of at most %d: %.60s' "$n" "$total" "$line"
	elif ((n % 25 == 0)); then
		printf '  compiled %d of at most %d packages (%ds)\n' "$n" "$total" $((SECONDS - start))
	fi
done
status=${PIPESTATUS[0]}
set -e
[[ -n $tty && $n -gt 0 ]] && printf '\r\033[K'
if ((status != 0)); then
	echo "building $out failed" >&2
	exit "$status"
fi
((n == 0)) || echo "  compiled $n package$( ((n == 1)) || echo s) in $((SECONDS - start))s"
