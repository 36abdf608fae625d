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
// into a temporary directory and returns it. They are built with the race
// detector when the test binary runs with it (RaceBuild), so a race in a
// service process fails the test that reads its logs as well.
func BuildServices(t testing.TB) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the service binaries: %v", err)
	}
	dir := t.TempDir()
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if RaceBuild {
		args = append(args, "-race")
	}
	args = append(args,
		"github.com/fairwayhq/fairway/cmd/ingest",
		"github.com/fairwayhq/fairway/cmd/dispatcher",
		"github.com/fairwayhq/fairway/cmd/sinks")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, goBin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Logf("built ingest, dispatcher and sinks (race %v) in %s", RaceBuild, time.Since(start).Round(time.Millisecond))
	return dir
}
