package testenv

import (
	"bytes"
	"context"
	"errors"
	"os"
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
// dir, stamped with the version and commit as `make build` stamps them.
// They are built with the race detector when the test binary runs with it
// (RaceBuild), so a race in a service process fails the test that reads
// its logs as well.
func BuildCommandsIn(t testing.TB, dir string, names ...string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the binaries: %v", err)
	}
	args := []string{"build", "-o", dir + string(filepath.Separator), "-ldflags", ldflags(t, goBin)}
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

// ldflags returns the -ldflags `make build` uses, from scripts/ldflags.sh:
// the version and commit --version prints.
func ldflags(t testing.TB, goBin string) string {
	t.Helper()
	gomod, err := exec.Command(goBin, "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	script := filepath.Join(filepath.Dir(strings.TrimSpace(string(gomod))), "scripts", "ldflags.sh")
	out, err := exec.Command("sh", script).Output()
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	return strings.TrimSpace(string(out))
}

// RunCommand runs the binary bin with args in an environment of PATH and
// env (NAME=value) alone, and returns its stdout, stderr and exit
// code. It is for commands that exit by themselves (--help, --version, a
// bad flag) within a minute.
func RunCommand(t testing.TB, bin string, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("%s %s: %v", filepath.Base(bin), strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), code
}

// CheckVersion fails t unless out is the --version line of command name
// built from this checkout: its name, a version, and the commit git says
// HEAD is ("unknown" outside a git checkout).
func CheckVersion(t testing.TB, name, out string) {
	t.Helper()
	rev := "unknown"
	if b, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		rev = strings.TrimSpace(string(b))
	}
	if !strings.HasPrefix(out, name+" version ") || !strings.Contains(out, " commit "+rev) || strings.Count(out, "\n") != 1 {
		t.Errorf("--version printed %q, want one line %q with commit %s", out, name+" version …", rev)
	}
}
