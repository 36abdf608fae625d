package dispatch_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Multi-process tests re-execute this test binary as dispatcher processes.
const (
	envHelper     = "FAIRWAY_DISPATCH_HELPER"
	envNATS       = "FAIRWAY_DISPATCH_NATS"
	envDSN        = "FAIRWAY_DISPATCH_DSN"
	envTTL        = "FAIRWAY_DISPATCH_TTL"
	envCrashAfter = "FAIRWAY_DISPATCH_CRASH_AFTER" // SIGKILL itself after this many commits, before publishing
)

// TestHelperProcess is not a test: it is the body of dispatcher processes.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(envHelper) == "" {
		return
	}
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "helper:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv(envDSN))
	if err != nil {
		fail(err)
	}
	ttl, _ := time.ParseDuration(os.Getenv(envTTL))
	st, err := tenancy.New(pool, &tenancy.Config{LeaseTTL: ttl})
	if err != nil {
		fail(err)
	}
	nc, err := nats.Connect(os.Getenv(envNATS))
	if err != nil {
		fail(err)
	}
	lv := slog.LevelWarn
	if os.Getenv("FAIRWAY_DISPATCH_DEBUG") != "" {
		lv = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv})).With("pid", os.Getpid())
	d, err := dispatch.New(dispatch.Deps{Store: st, NATS: nc, Logger: log}, &dispatch.Config{
		Holder: "helper-" + strconv.Itoa(os.Getpid()), Dests: []string{pg}, BatchSize: 20,
		RecoverInterval: 200 * time.Millisecond, PollInterval: 2 * time.Second,
	})
	if err != nil {
		fail(err)
	}
	if n, _ := strconv.Atoi(os.Getenv(envCrashAfter)); n > 0 {
		var commits atomic.Int32
		d.SetAfterCommit(func([]tenancy.Lease) {
			if int(commits.Add(1)) == n {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		})
	}
	if err := d.Run(ctx); err != nil {
		fail(err)
	}
	nc.Close()
	pool.Close()
	os.Exit(0)
}

func (e *env) startDispatcherProcess(ttl time.Duration, extra ...string) *exec.Cmd {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envHelper+"=1", envNATS+"="+e.url, envDSN+"="+e.dsn, envTTL+"="+ttl.String())
	cmd.Env = append(cmd.Env, extra...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// Two and three dispatcher processes on the same tenants dispatch every
// sequence exactly once, and the batch log agrees with the work items.
func TestSeveralProcesses(t *testing.T) {
	t.Parallel()
	for _, procs := range []int{2, 3} {
		t.Run(strconv.Itoa(procs), func(t *testing.T) {
			t.Parallel()
			e := setup(t, time.Minute)
			seqs := map[string][]uint64{}
			for i := range 6 {
				id := fmt.Sprintf("t%d", i)
				e.tenant(id, 1+i%3, 2, pg)
				seqs[id] = e.publish(id, 600)
			}
			s := e.startSink(pg, 6, nil, func() time.Duration { return 0 })
			for range procs {
				e.startDispatcherProcess(time.Minute)
			}
			// More events while they run: the doorbells must race too.
			for id := range seqs {
				seqs[id] = append(seqs[id], e.publish(id, 200)...)
			}
			e.waitFor("every event dispatched", func() bool {
				for id := range seqs {
					if s.distinct(id) < len(seqs[id]) {
						return false
					}
				}
				return true
			})
			items := s.snapshot()
			checkExactlyOnce(t, items, seqs, false)
			var logged, holders int
			if err := e.pool.QueryRow(e.ctx, `SELECT count(*), count(DISTINCT holder) FROM fairway.batches`).Scan(&logged, &holders); err != nil {
				t.Fatal(err)
			}
			if logged != len(items) {
				t.Errorf("batch log holds %d batches, WORK delivered %d items", logged, len(items))
			}
			t.Logf("%d processes: %d items, %d holders in the batch log", procs, len(items), holders)
		})
	}
}

// A dispatcher killed with SIGKILL right after committing a batch and
// before publishing it, then one killed at a random point mid-flood: after
// restarts nothing is lost, and the only duplicates are re-dispatches of
// an identical range under a new lease.
func TestKillDashNine(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	e := setup(t, ttl)
	seqs := map[string][]uint64{}
	for i := range 4 {
		id := fmt.Sprintf("k%d", i)
		e.tenant(id, 1, 2, pg)
		seqs[id] = e.publish(id, 1000)
	}
	s := e.startSink(pg, 4, nil, func() time.Duration { return time.Millisecond })
	crashed := e.startDispatcherProcess(ttl, envCrashAfter+"=7")
	if err := crashed.Wait(); err == nil {
		t.Fatal("the crashing dispatcher exited cleanly")
	}
	// The 7th batch was committed and never published.
	var lost int
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM fairway.slots WHERE from_seq IS NOT NULL AND expires_at IS NOT NULL`).Scan(&lost); err != nil {
		t.Fatal(err)
	}
	random := e.startDispatcherProcess(ttl)
	e.waitFor("some progress", func() bool { return len(s.snapshot()) >= 30 })
	_ = random.Process.Signal(syscall.SIGKILL)
	_ = random.Wait()
	e.startDispatcherProcess(ttl)
	e.waitFor("every event dispatched", func() bool {
		for id := range seqs {
			if s.distinct(id) < len(seqs[id]) {
				return false
			}
		}
		return true
	})
	// Let recovery finish anything still in flight, then check.
	e.waitFor("no orphans left", func() bool {
		var n int
		_ = e.pool.QueryRow(e.ctx, `SELECT count(*) FROM fairway.orphans`).Scan(&n)
		return n == 0
	})
	dups := checkExactlyOnce(t, s.snapshot(), seqs, true)
	var recovered int
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM (SELECT 1 FROM fairway.batches GROUP BY tenant, dest, from_seq, to_seq HAVING count(*) > 1) x`).Scan(&recovered); err != nil {
		t.Fatal(err)
	}
	if recovered == 0 {
		t.Fatal("no batch was re-dispatched: the crash after commit left nothing to recover?")
	}
	t.Logf("leases left by the crash %d, ranges re-dispatched %d, duplicate work items %d", lost, recovered, dups)
}
