package testenv

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// natsChildEnv, when set, makes a test binary that imports testenv serve
// an embedded JetStream server storing into the directory it names instead
// of running tests (NATSProcess starts such a child).
const natsChildEnv = "FAIRWAY_TESTENV_NATS_CHILD"

func init() {
	if dir := os.Getenv(natsChildEnv); dir != "" {
		os.Exit(serveNATSChild(dir))
	}
}

// NATSChild is an embedded JetStream server running in a process of its
// own (NATSProcess).
type NATSChild struct {
	URL string // the client URL
	PID int

	stdin  io.WriteCloser
	lines  chan string // the child's stdout after its first line
	mu     sync.Mutex  // one command at a time on stdin
	cmd    *exec.Cmd
	exited chan struct{}
	once   sync.Once
	err    error
}

// NATSProcess starts an embedded JetStream server (the same nats-server/v2
// library and options as NATSServer) in a process of its own, storing into
// dir. Benchmarks use it where the server should not share the Go runtime
// of the code they measure: in production the server is a separate
// process, and an embedded one puts its heap (a million-event stream's
// dedup entries and caches) under every garbage collection the measured
// code triggers. The child is this test binary run again; it stops at
// Stop, when the test ends, or when this process dies (its stdin closes).
// env ("GOGC=400", say) is added to the child's environment.
func NATSProcess(tb testing.TB, dir string, env ...string) *NATSChild {
	tb.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), env...), natsChildEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatalf("nats child: %v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatalf("nats child: %v", err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start nats child %s: %v", os.Args[0], err)
	}
	c := &NATSChild{PID: cmd.Process.Pid, stdin: stdin, cmd: cmd, exited: make(chan struct{}), lines: make(chan string, 16)}
	line := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		s, _ := r.ReadString('\n')
		line <- s
		for {
			s, err := r.ReadString('\n')
			if err != nil {
				break
			}
			select {
			case c.lines <- strings.TrimSpace(s):
			default: // nobody asked
			}
		}
		_ = cmd.Wait()
		close(c.exited)
	}()
	tb.Cleanup(func() {
		if err := c.Stop(); err != nil {
			tb.Error(err)
		}
	})
	select {
	case s := <-line:
		url, ok := strings.CutPrefix(strings.TrimSpace(s), "nats-url ")
		if !ok {
			tb.Fatalf("nats child: want a first line \"nats-url <url>\", got %q (its errors are above)", s)
		}
		c.URL = url
		return c
	case <-time.After(30 * time.Second):
		tb.Fatalf("nats child did not serve within 30s")
	}
	return nil
}

// Stop shuts the server down and waits for the process to exit (30 s at
// most, then kills it). Calling it again does nothing.
func (c *NATSChild) Stop() error {
	c.once.Do(func() {
		_ = c.stdin.Close() // the child shuts its server down and exits
		select {
		case <-c.exited:
		case <-time.After(30 * time.Second):
			_ = c.cmd.Process.Kill()
			<-c.exited
			c.err = fmt.Errorf("nats child %d did not stop within 30s of its stdin closing; killed", c.PID)
		}
	})
	return c.err
}

// ProfileCPU has the child write a CPU profile of the server from now until
// stop is called to $FAIRWAY_BENCH_PROFILE_DIR/<name>.prof, when that
// variable is set (as ProfileCPU does for this process). Without the
// variable, or on a nil child, it does nothing.
func (c *NATSChild) ProfileCPU(tb testing.TB, name string) (stop func()) {
	tb.Helper()
	dir := os.Getenv("FAIRWAY_BENCH_PROFILE_DIR")
	if c == nil || dir == "" {
		return func() {}
	}
	if err := c.command("profile-start " + filepath.Join(dir, name+".prof")); err != nil {
		tb.Fatalf("nats child: %v", err)
	}
	return func() {
		if err := c.command("profile-stop"); err != nil {
			tb.Errorf("nats child: %v", err)
		}
	}
}

// command sends one line to the child and waits for its answer: "ok" or
// an error.
func (c *NATSChild) command(line string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := fmt.Fprintln(c.stdin, line); err != nil {
		return fmt.Errorf("%s: %w", line, err)
	}
	select {
	case ans := <-c.lines:
		if ans != "ok" {
			return fmt.Errorf("%s: %s", line, ans)
		}
		return nil
	case <-c.exited:
		return fmt.Errorf("%s: the child exited", line)
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s: no answer within 30s", line)
	}
}

// CPU returns the user and system CPU time the child has used so far.
func (c *NATSChild) CPU() (time.Duration, error) {
	used, _, err := ProcessCPU(c.PID)
	return used, err
}

// BenchNATSGOGC is the GOGC of a benchmark's server process: what
// deploy/nats recommends for nats-server. At Go's default of 100 the
// server collects often while a flood drains, and each collection drops
// the file store's block caches, so the writes after it reload their
// blocks and the server's stream requests stall: that would set the
// small tenants' p99 the benchmarks measure (deploy/nats/README.md,
// "Garbage collection").
const BenchNATSGOGC = "400"

// BenchNATS starts a benchmark's JetStream server: in a process of its own
// (FAIRWAY_BENCH_NATS=process, the default), as in production, so the
// server's heap is not marked by the garbage collections of the code
// measured; or embedded in this process (FAIRWAY_BENCH_NATS=embedded;
// child is then nil). stop shuts it down before the benchmark ends, when
// it should not outlive a phase.
//
// The child runs with GOGC=BenchNATSGOGC, as deploy/nats recommends
// running nats-server (its README, "Garbage collection"), unless
// FAIRWAY_BENCH_NATS_GOGC says otherwise (100 is Go's default).
func BenchNATS(tb testing.TB) (url string, child *NATSChild, stop func()) {
	tb.Helper()
	switch v := os.Getenv("FAIRWAY_BENCH_NATS"); v {
	case "", "process":
		gogc := cmp.Or(os.Getenv("FAIRWAY_BENCH_NATS_GOGC"), BenchNATSGOGC)
		c := NATSProcess(tb, tb.TempDir(), "GOGC="+gogc)
		return c.URL, c, func() {
			if err := c.Stop(); err != nil {
				tb.Error(err)
			}
		}
	case "embedded":
		srv := NATSServer(tb, tb.TempDir())
		return srv.ClientURL(), nil, func() { srv.Shutdown(); srv.WaitForShutdown() }
	default:
		tb.Fatalf("FAIRWAY_BENCH_NATS=%q: want process or embedded", v)
		return "", nil, nil
	}
}

// serveNATSChild is the child's side of NATSProcess: it serves until its
// stdin closes and returns the exit code.
func serveNATSChild(dir string) int {
	srv, err := server.NewServer(natsOptions(dir))
	if err != nil {
		fmt.Fprintf(os.Stderr, "nats child: %v\n", err)
		return 1
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		fmt.Fprintln(os.Stderr, "nats child: server not ready within 10s")
		return 1
	}
	fmt.Printf("nats-url %s\n", srv.ClientURL())
	// Commands, one per line, until stdin closes; each is answered with
	// one line on stdout.
	var prof *os.File
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		var err error
		switch cmd {
		case "profile-start":
			if prof, err = os.Create(arg); err == nil {
				err = pprof.StartCPUProfile(prof)
			}
		case "profile-stop":
			pprof.StopCPUProfile()
			if prof != nil {
				err, prof = prof.Close(), nil
			}
		default:
			err = fmt.Errorf("unknown command %q", cmd)
		}
		if err != nil {
			fmt.Printf("error: %v\n", err)
			continue
		}
		fmt.Println("ok")
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	return 0
}
