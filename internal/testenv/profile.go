package testenv

import (
	"os"
	"path/filepath"
	"runtime/pprof"
	"testing"
)

// ProfileCPU writes a CPU profile from now until stop is called to
// $FAIRWAY_BENCH_PROFILE_DIR/<name>.prof when that variable is set, so a
// benchmark can profile its timed part alone (go test -cpuprofile also
// covers the setup: publishing a backlog, say). Without the variable it
// does nothing.
func ProfileCPU(tb testing.TB, name string) (stop func()) {
	tb.Helper()
	dir := os.Getenv("FAIRWAY_BENCH_PROFILE_DIR")
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, name+".prof"))
	if err != nil {
		tb.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		tb.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			tb.Error(err)
		}
	}
}
