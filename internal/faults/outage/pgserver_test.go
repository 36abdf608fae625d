package outage_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/jackc/pgx/v5"
)

const pgInstallHint = "the PostgreSQL restart test starts a private server from Debian's binaries " +
	"(/usr/lib/postgresql/*/bin/initdb and pg_ctl); install them with `apt-get install postgresql` " +
	"(the test never touches the shared server on 5432)"

// pgServer is a private PostgreSQL cluster in t.TempDir(), on a free
// loopback port, trust authentication, TCP only. The test may stop and
// start it; it is stopped at cleanup.
type pgServer struct {
	t     testing.TB
	bin   string // /usr/lib/postgresql/<major>/bin
	data  string
	log   string
	port  int
	asPG  bool // we are root: run the server as the postgres system user
	alive bool
}

// pgBinDir returns the newest /usr/lib/postgresql/*/bin that has initdb, as
// scripts/dev-services.sh picks it.
func pgBinDir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	major := func(p string) int {
		n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p))))
		return n
	}
	slices.SortFunc(dirs, func(a, b string) int { return major(a) - major(b) })
	for i := len(dirs) - 1; i >= 0; i-- {
		if fi, err := os.Stat(dirs[i]); err == nil && fi.Mode()&0o111 != 0 {
			return filepath.Dir(dirs[i])
		}
	}
	return ""
}

// startPGServer runs initdb and starts the server.
func startPGServer(t testing.TB) *pgServer {
	t.Helper()
	bin := pgBinDir()
	if bin == "" {
		t.Fatalf("no PostgreSQL server binaries: %s", pgInstallHint)
	}
	base := t.TempDir()
	s := &pgServer{t: t, bin: bin, data: filepath.Join(base, "data"), log: filepath.Join(base, "postgres.log"), asPG: os.Geteuid() == 0}
	if s.asPG {
		// initdb refuses to run as root: the cluster belongs to the
		// postgres system user, who must be able to reach base.
		pg, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root, and there is no postgres system user to own the private cluster (%v): %s", err, pgInstallHint)
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		// t.TempDir() is <per-test dir, 0700>/<NNN>: let others traverse it.
		if err := os.Chmod(filepath.Dir(base), 0o711); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(base, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	s.port = freePort(t)
	s.run(2*time.Minute, "initdb", "-D", s.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
	conf := fmt.Sprintf("\n# private server of %s\nport = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\n"+
		"max_connections = 100\nfsync = off\nlogging_collector = off\n", t.Name(), s.port)
	f, err := os.OpenFile(filepath.Join(s.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(conf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s.alive {
			_, _ = s.ctl(time.Minute, "stop", "-m", "immediate", "-w")
		}
	})
	s.Start()
	return s
}

// URL is the connection URL of the postgres database.
func (s *pgServer) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// Start starts the server on its port and waits until it takes
// connections.
func (s *pgServer) Start() {
	s.t.Helper()
	if out, err := s.ctl(2*time.Minute, "start", "-w", "-t", "120", "-l", s.log); err != nil {
		logTail, _ := os.ReadFile(s.log)
		s.t.Fatalf("pg_ctl start on port %d: %v\n%s\nserver log:\n%s", s.port, err, out, tail(string(logTail), 20))
	}
	s.alive = true
	testenv.Eventually(s.t, time.Minute, fmt.Sprintf("the private PostgreSQL started to answer on port %d", s.port), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, s.URL())
		if err != nil {
			return err
		}
		return c.Close(ctx)
	})
}

// Stop stops the server with mode ("fast": disconnect clients, checkpoint)
// and waits until it is gone.
func (s *pgServer) Stop(mode string) {
	s.t.Helper()
	if out, err := s.ctl(2*time.Minute, "stop", "-m", mode, "-w", "-t", "120"); err != nil {
		s.t.Fatalf("pg_ctl stop -m %s: %v\n%s", mode, err, out)
	}
	s.alive = false
}

func (s *pgServer) ctl(timeout time.Duration, args ...string) ([]byte, error) {
	return s.cmd(timeout, "pg_ctl", append([]string{"-D", s.data}, args...)...)
}

// run runs a PostgreSQL program and fails the test if it fails.
func (s *pgServer) run(timeout time.Duration, prog string, args ...string) {
	s.t.Helper()
	if out, err := s.cmd(timeout, prog, args...); err != nil {
		s.t.Fatalf("%s %s: %v\n%s", prog, strings.Join(args, " "), err, out)
	}
}

func (s *pgServer) cmd(timeout time.Duration, prog string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	name, argv := filepath.Join(s.bin, prog), args
	if s.asPG {
		name, argv = "runuser", append([]string{"-u", "postgres", "--", name}, args...)
	}
	c := exec.CommandContext(ctx, name, argv...)
	c.Dir = os.TempDir() // the postgres user may not read our working directory
	return c.CombinedOutput()
}

// freePort returns a loopback TCP port nobody listens on right now.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
