#!/usr/bin/env bash
# chromium.sh makes headless Chromium available and prints its path on
# stdout (last line). It installs Debian's `chromium` package with apt-get
# when no chromium is on PATH: as root, or through `sudo -n` otherwise. It
# exits non-zero with a message on stderr when it cannot. The dashboard's
# browser test (internal/dashboard/browser_test.go) calls it.
set -euo pipefail

find_chromium() {
	local c
	for c in chromium chromium-browser google-chrome-stable google-chrome; do
		if command -v "$c" >/dev/null 2>&1; then
			command -v "$c"
			return 0
		fi
	done
	return 1
}

if p=$(find_chromium); then
	echo "$p"
	exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
	echo "chromium.sh: no chromium on PATH and no apt-get to install it; install Chromium and put it on PATH" >&2
	exit 1
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then
	if ! command -v sudo >/dev/null 2>&1 || ! sudo -n true 2>/dev/null; then
		echo "chromium.sh: no chromium on PATH; installing needs root: run 'sudo apt-get install -y chromium' (passwordless sudo was not available)" >&2
		exit 1
	fi
	as_root=(sudo -n)
fi

# One install at a time: parallel test binaries may call this together.
lock=${TMPDIR:-/tmp}/fairway-chromium-install.lock
exec 9>"$lock"
flock 9
if p=$(find_chromium); then
	echo "$p"
	exit 0
fi

echo "chromium.sh: installing Debian's chromium package (once per machine, a minute or two)..." >&2
export DEBIAN_FRONTEND=noninteractive
if ! "${as_root[@]}" apt-get update -qq >&2; then
	echo "chromium.sh: apt-get update failed" >&2
	exit 1
fi
if ! "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-liberation >&2; then
	echo "chromium.sh: apt-get install chromium failed" >&2
	exit 1
fi
if ! p=$(find_chromium); then
	echo "chromium.sh: chromium was installed but is not on PATH" >&2
	exit 1
fi
echo "$p"
