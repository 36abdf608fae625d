package operating

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/jackc/pgx/v5/pgxpool"
)

// binDir holds the binaries every test of the package runs, built once
// (binaries).
var (
	binDir    string
	buildOnce sync.Once
	buildOK   bool
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fairway-operating-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// binaries builds ingest, dispatcher, sinks and fairway (once per test
// binary) and returns their directory.
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		testenv.BuildCommandsIn(t, binDir, "ingest", "dispatcher", "sinks", "fairway")
		buildOK = true
	})
	if !buildOK {
		t.Fatal("building the binaries failed (see the first test that built them)")
	}
	return binDir
}

// users are deploy/nats/accounts.conf's users, by the variable holding
// each one's password.
var users = map[string]string{
	"sys":            "FAIRWAY_SYS_PASSWORD",
	"ingest":         "FAIRWAY_INGEST_PASSWORD",
	"dispatcher":     "FAIRWAY_DISPATCHER_PASSWORD",
	"sinks":          "FAIRWAY_SINKS_PASSWORD",
	"operator":       "FAIRWAY_OPERATOR_PASSWORD",
	"publisher-acme": "FAIRWAY_PUBLISHER_ACME_PASSWORD",
}

// natsServer is bin/nats-server (installed as `make nats` does) running
// deploy/nats/single.conf with fresh passwords, on free ports, storing
// into a temporary directory.
type natsServer struct {
	*testenv.NATSBinaryServer
	passwords map[string]string
	store     string // the JetStream store directory
}

func startNATS(t *testing.T) *natsServer {
	t.Helper()
	bin := testenv.RepoNATSServer(t)
	conf := filepath.Join(testenv.RepoRoot(t), "deploy", "nats", "single.conf")
	s := &natsServer{passwords: map[string]string{}}
	var env []string
	for user, v := range users {
		pw := "p" + randHex(16) // letters and digits, starting with a letter (accounts.conf)
		s.passwords[user] = pw
		env = append(env, v+"="+pw)
	}
	// store_dir in single.conf is relative to the working directory.
	dir := t.TempDir()
	s.store = filepath.Join(dir, ".dev", "nats", "single")
	s.NATSBinaryServer = testenv.StartNATSBinary(t, bin, dir, env,
		"-c", conf, "-m", fmt.Sprint(testenv.FreePort(t)))
	return s
}

// url is the NATS_URL of user.
func (s *natsServer) url(user string) string {
	return strings.Replace(s.URL, "nats://", "nats://"+user+":"+s.passwords[user]+"@", 1)
}

// env is the environment of a service that connects as user, with the
// database at dsn.
func (s *natsServer) env(dsn, user string) []string {
	return []string{"DATABASE_URL=" + dsn, "NATS_URL=" + s.url(user)}
}

// freeAddr is a loopback address with a free port, for a --listen.
func freeAddr(t *testing.T) string { return fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)) }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// proc is one binary running in a process of its own.
type proc struct {
	name   string
	cmd    *exec.Cmd
	out    testenv.Buffer
	exited chan struct{}
	err    error // of cmd.Wait, once exited is closed

	termOnce sync.Once
}

// start runs bin with args and env (added to this process's environment,
// overriding it) until stop or the test's end; its output is logged when
// the test fails.
func start(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: filepath.Base(bin) + " " + strings.Join(args, " "), exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.signal()
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("%s:\n%s", p.name, p.out.String())
		}
	})
	return p
}

// wait waits at most d for the process to exit and returns its error
// (nil: exit status 0); ok is false when it still runs.
func (p *proc) wait(d time.Duration) (err error, ok bool) {
	select {
	case <-p.exited:
		return p.err, true
	case <-time.After(d):
		return nil, false
	}
}

// signal sends SIGTERM once: the way to stop a service (a second one
// may kill it).
func (p *proc) signal() {
	p.termOnce.Do(func() { _ = p.cmd.Process.Signal(syscall.SIGTERM) })
}

// stop sends SIGTERM (unless signal did) and expects a clean exit within
// 30 s.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	p.signal()
	err, ok := p.wait(30 * time.Second)
	switch {
	case !ok:
		t.Errorf("%s still runs 30s after SIGTERM", p.name)
	case err != nil:
		t.Errorf("%s exited with %v after SIGTERM:\n%s", p.name, err, p.out.String())
	}
}

// run runs bin with args and env to its end (at most a minute) and
// returns its stdout; a failure fails the test with its output.
func run(t *testing.T, bin string, env []string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("%s %s: %v", filepath.Base(bin), strings.Join(args, " "), err)
		}
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// waitProduct waits until catalog.products in pool holds tenant's product.
func waitProduct(ctx context.Context, t *testing.T, pool *pgxpool.Pool, tenant, product string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "the event in PostgreSQL", func() error {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM catalog.products WHERE tenant_id = $1 AND product_id = $2", tenant, product).Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("%d rows of %s/%s", n, tenant, product)
		}
		return nil
	})
}

// postEvents posts body (a JSON array of events) for tenant to ingest at
// addr with header's fields too (nil: none), retrying while ingest does
// not listen yet (30 s at most), and expects 202.
func postEvents(ctx context.Context, t *testing.T, addr, tenant, token, body string, header http.Header) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, "ingest to take events", func() error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/tenants/"+tenant+"/events", strings.NewReader(body))
		for k, vs := range header {
			req.Header[k] = vs
		}
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err // ingest does not listen yet
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST events: %d %s", resp.StatusCode, b)
		}
		return nil
	})
}

// acmeStack is what a test of the services needs before it starts them:
// the binaries, a NATS server of deploy/nats, acme's database, and the
// address ingest is to listen on.
type acmeStack struct {
	bin        string
	nats       *natsServer
	dsn        string
	pool       *pgxpool.Pool
	token      string
	ingestAddr string
}

func newAcmeStack(ctx context.Context, t *testing.T) *acmeStack {
	t.Helper()
	s := &acmeStack{bin: binaries(t), nats: startNATS(t), ingestAddr: freeAddr(t)}
	s.dsn, s.pool, s.token = acmeDatabase(ctx, t)
	return s
}

// start runs the binary name, connected as the NATS user of that name.
func (s *acmeStack) start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return start(t, filepath.Join(s.bin, name), s.nats.env(s.dsn, name), args...)
}

// startIngest runs ingest on s.ingestAddr.
func (s *acmeStack) startIngest(t *testing.T) *proc {
	return s.start(t, "ingest", "--listen", s.ingestAddr)
}

// postChairAndTable posts acme's p1 and p2, version 1 each.
func (s *acmeStack) postChairAndTable(ctx context.Context, t *testing.T) {
	t.Helper()
	postEvents(ctx, t, s.ingestAddr, "acme", s.token, `[{"product_id":"p1","version":1,"op":"upsert","payload":{"name":"Chair"}},
		{"product_id":"p2","version":1,"op":"upsert","payload":{"name":"Table"}}]`, nil)
}

// acmeDatabase is a migrated database of its own with tenant acme: its
// address, a pool on it (closed when the test ends) and acme's token.
func acmeDatabase(ctx context.Context, t *testing.T) (dsn string, pool *pgxpool.Pool, token string) {
	t.Helper()
	dsn = testenv.NewDatabase(t)
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	store, err := tenancy.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, token, err = store.CreateTenant(ctx, "acme", "acme"); err != nil {
		t.Fatal(err)
	}
	return dsn, pool, token
}
