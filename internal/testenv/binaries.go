package testenv

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BuildServices builds the service binaries (ingest, dispatcher, sinks)
// into a temporary directory and returns it (BuildCommands).
func BuildServices(t testing.TB) string {
	t.Helper()
	return BuildCommands(t, "ingest", "dispatcher", "sinks")
}

// BuildCommands builds the binaries of cmd/<name> for each name
// ("fairway", "ingest", ...) into a temporary directory and returns it
// (BuildCommandsIn).
func BuildCommands(t testing.TB, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	BuildCommandsIn(t, dir, names...)
	return dir
}

// BuildCommandsIn builds the binaries of cmd/<name> for each name into
// dir. They are built with the race detector when the test binary runs with it
// (RaceBuild), so a race in a service process fails the test that reads
// its logs as well.
func BuildCommandsIn(t testing.TB, dir string, names ...string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the binaries: %v", err)
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if RaceBuild {
		args = append(args, "-race")
	}
	for _, n := range names {
		args = append(args, "github.com/fairwayhq/fairway/cmd/"+n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, goBin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("built %s (race %v) in %s", strings.Join(names, ", "), RaceBuild, time.Since(start).Round(time.Millisecond))
}
