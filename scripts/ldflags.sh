#!/bin/sh
# Prints the -ldflags for `go build` that stamp the version and commit of
# this checkout into the binaries (what --version prints; see
# internal/bootstrap/version.go). The go command's own stamping misses git
# worktrees and builds with -buildvcs=false. Outside a git checkout it
# prints nothing and --version falls back to the go command's build
# information.
cd "$(dirname "$0")/.." || exit 1
commit=$(git rev-parse HEAD 2>/dev/null) || exit 0
version=$(git describe --tags --always --dirty 2>/dev/null)
pkg=github.com/fairwayhq/fairway/internal/bootstrap
echo "-X $pkg.version=$version -X $pkg.commit=$commit"
