package operating

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fairwayhq/fairway/internal/testenv"
)

// natsScript runs scripts/nats.sh (what `make nats` and `make nats-stop`
// run) with env added to this process's environment and returns its
// output (stdout and stderr) and exit code.
func natsScript(t *testing.T, env []string, arg string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // start may go install nats-server
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(testenv.RepoRoot(t), "scripts", "nats.sh"), arg)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	case err != nil:
		t.Fatalf("scripts/nats.sh %s: %v\n%s", arg, err, out)
	}
	return string(out), 0
}

// readEnvFile reads NAME=value lines.
func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			out[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// `make nats` as a developer runs it, in a directory and on ports of its
// own (FAIRWAY_NATS_DIR, FAIRWAY_NATS_PORT, FAIRWAY_NATS_HTTP_PORT), so a
// developer's server keeps running: start prints each command's NATS_URL
// and writes them to urls.env; each user connects with its URL, and the
// ingest user may not publish work items; JetStream stores into the
// directory; start again while it runs changes nothing; stop stops it.
// A port another process holds stops start with a message naming it.
func TestMakeNATS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	port, httpPort := testenv.FreePort(t), testenv.FreePort(t)
	env := []string{"FAIRWAY_NATS_DIR=" + dir, fmt.Sprintf("FAIRWAY_NATS_PORT=%d", port), fmt.Sprintf("FAIRWAY_NATS_HTTP_PORT=%d", httpPort)}
	pidFile := filepath.Join(dir, "nats-server.pid")
	t.Cleanup(func() {
		// Whatever the test did, the server it started stops.
		if _, err := os.Stat(pidFile); err == nil {
			if out, code := natsScript(t, env, "stop"); code != 0 {
				t.Errorf("scripts/nats.sh stop at cleanup: exit %d\n%s", code, out)
			}
		}
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(dir, "nats-server.log")); err == nil {
				t.Logf("nats-server.log:\n%s", b)
			}
		}
	})

	began := time.Now()
	out, code := natsScript(t, env, "start")
	if code != 0 {
		t.Fatalf("scripts/nats.sh start: exit %d\n%s", code, out)
	}
	t.Logf("started in %s", time.Since(began).Round(time.Millisecond))
	urls := readEnvFile(t, filepath.Join(dir, "urls.env"))
	byUser := map[string]string{"ingest": "NATS_URL_INGEST", "dispatcher": "NATS_URL_DISPATCHER", "sinks": "NATS_URL_SINKS", "operator": "NATS_URL_OPERATOR"}
	for user, v := range byUser {
		url := urls[v]
		if !strings.HasPrefix(url, "nats://"+user+":") || !strings.HasSuffix(url, fmt.Sprintf("@127.0.0.1:%d", port)) {
			t.Errorf("urls.env: %s=%q, want nats://%s:<password>@127.0.0.1:%d", v, url, user, port)
		}
		if !strings.Contains(out, "NATS_URL="+url+"\n") {
			t.Errorf("start does not print NATS_URL=%s:\n%s", url, out)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	pid, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}

	for user, v := range byUser {
		nc, err := nats.Connect(urls[v], nats.Timeout(5*time.Second))
		if err != nil {
			t.Errorf("%s connecting with %s: %v", user, v, err)
			continue
		}
		if err := nc.Flush(); err != nil {
			t.Errorf("%s: %v", user, err)
		}
		nc.Close()
	}
	// Work items are the dispatcher's to publish.
	denied := make(chan error, 1)
	nc, err := nats.Connect(urls["NATS_URL_INGEST"], nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case denied <- err:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := nc.Publish("work.postgres.acme", []byte("x")); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	select {
	case err := <-denied:
		if !strings.Contains(err.Error(), `Permissions Violation for Publish to "work.postgres.acme"`) {
			t.Errorf("ingest publishing a work item: %v, want a permissions violation", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("ingest published a work item without a permissions violation")
	}
	nc.Close()
	// JetStream is on, storing into the directory (single.conf's store_dir
	// in it).
	if _, err := os.Stat(filepath.Join(dir, ".dev", "nats", "single", "jetstream")); err != nil {
		t.Errorf("no JetStream store in FAIRWAY_NATS_DIR: %v", err)
	}

	again, code := natsScript(t, env, "start")
	if code != 0 || !strings.Contains(again, fmt.Sprintf("already running (pid %s)", strings.TrimSpace(string(pid)))) {
		t.Errorf("start again: exit %d, want 0 and the running server's pid %s:\n%s", code, pid, again)
	}
	if after := readEnvFile(t, filepath.Join(dir, "urls.env")); fmt.Sprint(after) != fmt.Sprint(urls) {
		t.Errorf("start again changed urls.env: %v, was %v", after, urls)
	}

	// Another directory, the HTTP port taken by another process.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().(*net.TCPAddr).Port
	other := []string{"FAIRWAY_NATS_DIR=" + t.TempDir(), fmt.Sprintf("FAIRWAY_NATS_PORT=%d", testenv.FreePort(t)),
		fmt.Sprintf("FAIRWAY_NATS_HTTP_PORT=%d", taken)}
	busy, code := natsScript(t, other, "start")
	if code == 0 || !strings.Contains(busy, fmt.Sprintf("port %d on 127.0.0.1 is taken by another process", taken)) {
		t.Errorf("start with port %d taken: exit %d, want a failure naming the port:\n%s", taken, code, busy)
	}
	if code == 0 {
		natsScript(t, other, "stop")
	}

	stopped, code := natsScript(t, env, "stop")
	if code != 0 || !strings.Contains(stopped, "stopped nats-server (pid "+strings.TrimSpace(string(pid))+")") {
		t.Errorf("stop: exit %d\n%s", code, stopped)
	}
	// The process is gone, or a zombie its new parent has yet to reap.
	if stat, err := os.ReadFile("/proc/" + strings.TrimSpace(string(pid)) + "/stat"); err == nil {
		if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) == 0 || f[0] != "Z" {
			t.Errorf("nats-server (pid %s) runs after stop: %s", pid, stat)
		}
	}
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
		c.Close()
		t.Errorf("port %d still accepts connections after stop", port)
	}
	if _, err := os.Stat(pidFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("nats-server.pid after stop: %v", err)
	}
}
