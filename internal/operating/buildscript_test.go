package operating

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/testenv"
)

// `make demo` builds bin/fairway with scripts/build.sh: that binary says
// the version and commit of the checkout, stamped by scripts/ldflags.sh as
// `make build` stamps them. The go command's own stamping is off
// (-buildvcs=false, as where it cannot read the checkout), so neither can
// come from it.
func TestBuildScriptStampsTheVersion(t *testing.T) {
	t.Parallel()
	binaries(t) // the same packages, compiled once for both
	root := testenv.RepoRoot(t)
	out := filepath.Join(t.TempDir(), "fairway")
	goflags := "-buildvcs=false"
	if testenv.RaceBuild {
		goflags += " -race" // as binaries built them: only the link is left
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "build.sh"), out, "./cmd/fairway")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOFLAGS="+goflags)
	began := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/build.sh: %v\n%s", err, b)
	}
	t.Logf("scripts/build.sh built fairway in %s", time.Since(began).Round(time.Millisecond))
	version, errOut, code := testenv.RunCommand(t, out, nil, "--version")
	if code != 0 || errOut != "" {
		t.Fatalf("fairway --version: exit %d, stderr %q", code, errOut)
	}
	testenv.CheckVersion(t, "fairway", version)
	if strings.Contains(version, "(devel)") {
		t.Errorf("fairway --version printed %q: no version stamped", version)
	}
}
