// Package systemd_test checks the unit files and the environment file
// example of deploy/systemd against the binaries they run.
package systemd_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fairwayhq/fairway/internal/testenv"
)

// unit is a unit file, the binary it runs and the instances it is checked
// with (a template's %i).
type unit struct {
	file, binary string
	instances    []string
}

var units = []unit{
	{"fairway-ingest.service", "ingest", []string{""}},
	{"fairway-dispatcher.service", "dispatcher", []string{""}},
	{"fairway-sinks@.service", "sinks", []string{"postgres", "clickhouse", "b2b:erp"}},
}

// Each unit runs its binary from /usr/local/bin with the settings of
// /etc/fairway/fairway.env, and the binary accepts the command line the
// unit gives it (for every instance of the template). Every variable the
// environment file example names is one a binary reads. When
// systemd-analyze is installed it verifies the units; without it the test
// says so and checks the rest.
func TestUnits(t *testing.T) {
	t.Parallel()
	bin := testenv.BuildServices(t)
	help := map[string]string{}
	for _, u := range units {
		service := serviceSection(t, u.file)
		start, envFiles := service["ExecStart"], service["EnvironmentFile"]
		if len(start) != 1 || !strings.HasPrefix(start[0], "/usr/local/bin/"+u.binary) {
			t.Errorf("%s: ExecStart %q, want /usr/local/bin/%s", u.file, start, u.binary)
			continue
		}
		if len(envFiles) == 0 || envFiles[0] != "/etc/fairway/fairway.env" {
			t.Errorf("%s: EnvironmentFile %q, want /etc/fairway/fairway.env first", u.file, envFiles)
		}
		for _, inst := range u.instances {
			line := strings.NewReplacer("%I", inst, "%i", inst).Replace(start[0])
			args := append(strings.Fields(line)[1:], "--help")
			out, errOut, code := testenv.RunCommand(t, filepath.Join(bin, u.binary), nil, args...)
			if code != 0 {
				t.Errorf("%s (instance %q): %s %s: exit %d\n%s", u.file, inst, u.binary, strings.Join(args, " "), code, errOut)
			}
			help[u.binary] += out
		}
	}

	all := help["ingest"] + help["dispatcher"] + help["sinks"]
	for _, name := range exampleVariables(t) {
		if !strings.Contains(all, "(env "+name) && !strings.Contains(all, "  "+name+"  ") {
			t.Errorf("fairway.env.example sets %s, which no service reads (see their --help)", name)
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze is not installed: the unit files are not verified (apt-get install systemd)")
		return
	}
	verify(t, analyze, bin)
}

// verify runs systemd-analyze verify on copies of the units whose
// ExecStart points to the binaries just built (it checks that the
// program exists). Any output, a warning about an unknown key included,
// fails the test.
func verify(t *testing.T, analyze, bin string) {
	dir := t.TempDir()
	var paths []string
	for _, u := range units {
		b, err := os.ReadFile(u.file)
		if err != nil {
			t.Fatal(err)
		}
		b = []byte(strings.ReplaceAll(string(b), "/usr/local/bin/", bin+string(filepath.Separator)))
		if err := os.WriteFile(filepath.Join(dir, u.file), b, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, inst := range u.instances {
			// verify reads FILE:ALIAS, so an instance with a colon is
			// given escaped (\x3a); %I unescapes it as systemd does.
			name := strings.Replace(u.file, "@.", "@"+strings.ReplaceAll(inst, ":", `\x3a`)+".", 1)
			paths = append(paths, filepath.Join(dir, name))
		}
	}
	out, err := exec.Command(analyze, append([]string{"verify", "--man=no"}, paths...)...).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	t.Logf("systemd-analyze verify: %d units ok", len(paths))
}

// serviceSection returns the [Service] settings of a unit file, each key
// with its values in order.
func serviceSection(t *testing.T, file string) map[string][]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	settings := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			k, v, _ := strings.Cut(line, "=")
			settings[k] = append(settings[k], v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return settings
}

// exampleVariables returns the variables fairway.env.example sets or
// shows commented out.
func exampleVariables(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("fairway.env.example")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^#?([A-Z][A-Z0-9_]*)=`).FindAllStringSubmatch(string(b), -1) {
		names = append(names, m[1])
	}
	if len(names) < 5 {
		t.Fatalf("fairway.env.example names %d variables: %q", len(names), names)
	}
	return names
}
