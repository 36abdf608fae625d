package bootstrap

import (
	"cmp"
	"fmt"
	"runtime"
	"runtime/debug"
)

// version and commit are set at link time by `make build`
// (-ldflags "-X github.com/fairwayhq/fairway/internal/bootstrap.version=…"),
// for builds outside a git checkout; otherwise the build information the
// go command records is used.
var (
	version string
	commit  string
)

// Version is the line every fairway binary prints for --version: its name,
// the module version, the commit it was built from (with "modified" when
// the checkout had uncommitted changes) and the Go version.
func Version(name string) string {
	bi, _ := debug.ReadBuildInfo()
	return versionLine(name, version, commit, bi)
}

// versionLine prefers the link-time version and commit to bi's main
// module version and vcs.revision; either may be missing.
func versionLine(name, ldVersion, ldCommit string, bi *debug.BuildInfo) string {
	var modVersion, revision, modified string
	if bi != nil {
		modVersion = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = " (modified)"
				}
			}
		}
	}
	if ldCommit != "" {
		modified = ""
	}
	return fmt.Sprintf("%s version %s commit %s%s %s", name,
		cmp.Or(ldVersion, modVersion, "(devel)"), cmp.Or(ldCommit, revision, "unknown"), modified, runtime.Version())
}
