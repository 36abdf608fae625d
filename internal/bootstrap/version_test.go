package bootstrap

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// The version line takes the link-time version and commit first, then
// the go command's build information, and says when neither knows.
func TestVersionLine(t *testing.T) {
	t.Parallel()
	bi := &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "e99cf4d00000000000000000000000000000abcd"}, {Key: "vcs.modified", Value: "true"},
	}}
	go_ := " " + runtime.Version()
	for _, tc := range []struct {
		ldVersion, ldCommit string
		bi                  *debug.BuildInfo
		want                string
	}{
		{"", "", bi, "ingest version v1.2.3 commit e99cf4d00000000000000000000000000000abcd (modified)" + go_},
		{"v2.0.0", "0123abc", bi, "ingest version v2.0.0 commit 0123abc" + go_},
		{"", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "ingest version (devel) commit unknown" + go_},
		{"", "", nil, "ingest version (devel) commit unknown" + go_},
	} {
		if got := versionLine("ingest", tc.ldVersion, tc.ldCommit, tc.bi); got != tc.want {
			t.Errorf("versionLine(%q, %q): %q, want %q", tc.ldVersion, tc.ldCommit, got, tc.want)
		}
	}
}
