package testenv

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// DebianNATSServer is where Debian's nats-server package puts its binary:
// nats-server 2.9.10 in Debian 12, older than fairway's minimum
// (bootstrap.NATSVersionMin), which tests use as a real old server.
const DebianNATSServer = "/usr/sbin/nats-server"

// NATSBinaryServer is a nats-server binary running in a process of its
// own (StartNATSBinary).
type NATSBinaryServer struct {
	URL     string // nats://127.0.0.1:<port>
	Port    int
	Version string // as the binary reports it: "2.9.10"

	bin, dir  string
	env, args []string
	out       *Buffer // of every run (Restart)

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped bool
}

// StartNATSBinary runs the nats-server binary bin with args, listening on
// a free loopback port (StartNATSBinary adds -a 127.0.0.1 -p <port>), in
// working directory dir, with env added to its environment. It returns
// once the server accepts clients and stops it at cleanup; its output is
// logged when the test fails.
func StartNATSBinary(t testing.TB, bin, dir string, env []string, args ...string) *NATSBinaryServer {
	t.Helper()
	version := NATSBinaryVersion(t, bin)
	port := FreePort(t)
	args = append([]string{"-a", "127.0.0.1", "-p", fmt.Sprint(port)}, args...)
	s := &NATSBinaryServer{URL: fmt.Sprintf("nats://127.0.0.1:%d", port), Port: port, Version: version,
		bin: bin, dir: dir, env: env, args: args, out: &Buffer{}}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("%s %s:\n%s", bin, strings.Join(args, " "), s.out.String())
		}
	})
	s.launch(t)
	return s
}

// launch starts the process and waits until it accepts clients.
func (s *NATSBinaryServer) launch(t testing.TB) {
	t.Helper()
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), s.env...)
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", s.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited, s.stopped = cmd, exited, false
	s.mu.Unlock()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if serverInfo(s.URL) == nil {
			return
		}
		select {
		case <-exited:
			t.Fatalf("%s %s exited at start:\n%s", s.bin, strings.Join(s.args, " "), s.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s does not accept clients on port %d after 15s:\n%s", s.bin, strings.Join(s.args, " "), s.Port, s.out.String())
		}
	}
}

// Stop stops the server (SIGTERM, then SIGKILL after 10 s) and waits for
// its process to exit. Calling it again does nothing.
func (s *NATSBinaryServer) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.stopped {
		return
	}
	s.stopped = true
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// Restart stops the server (Stop) and starts it again as it was started:
// the same binary, arguments, port, working directory and environment. It
// returns once the server accepts clients. A test replaces a server this
// way, after removing its store in between.
func (s *NATSBinaryServer) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	s.launch(t)
}

// OldNATSServer starts Debian's nats-server (DebianNATSServer), a server
// older than fairway's minimum, with JetStream storing into a temporary
// directory, on a free loopback port. A test that needs it fails, saying
// how to install it, when the binary is missing.
func OldNATSServer(t testing.TB) *NATSBinaryServer {
	t.Helper()
	if _, err := os.Stat(DebianNATSServer); err != nil {
		t.Fatalf("this test runs fairway against a nats-server older than it needs: Debian's %s (2.9.10 in Debian 12) is missing (%v); make services installs it, or: sudo apt-get install -y nats-server", DebianNATSServer, err)
	}
	dir := t.TempDir()
	return StartNATSBinary(t, DebianNATSServer, dir, nil, "-js", "-sd", filepath.Join(dir, "jetstream"))
}

// NATSBinaryVersion returns the version bin --version reports ("2.15.2").
func NATSBinaryVersion(t testing.TB, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "--version").CombinedOutput()
	v, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "nats-server: v")
	if err != nil || !ok {
		t.Fatalf("%s --version: %q (%v)", bin, out, err)
	}
	return v
}

// RepoNATSServer returns bin/nats-server of the repository, the binary
// `make nats` runs, installing it first as `make nats` does
// (scripts/nats.sh install: go install of the version go.mod pins,
// skipped when it is there).
func RepoNATSServer(t testing.TB) string {
	t.Helper()
	root := RepoRoot(t)
	out, err := exec.Command("bash", filepath.Join(root, "scripts", "nats.sh"), "install").CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/nats.sh install (the install step of make nats): %v\n%s", err, out)
	}
	return filepath.Join(root, "bin", "nats-server")
}

// RepoRoot returns the directory of the repository's go.mod.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = up
	}
}

// serverInfo connects to a NATS server and reads its INFO line.
func serverInfo(url string) error {
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "nats://"), time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "INFO ") {
		return fmt.Errorf("first line %q, want INFO", line)
	}
	return nil
}
