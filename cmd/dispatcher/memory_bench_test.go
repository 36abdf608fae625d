package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/testenv/benchload"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// BenchmarkDispatcherMemory measures the dispatcher binary's memory with
// a backlog of FAIRWAY_BENCH_EVENTS (default 1,000,000) events spread
// evenly over FAIRWAY_BENCH_TENANTS (default 2,000) tenants, interleaved
// in the stream, for the default destinations (postgres, clickhouse) and
// no sink taking work: the backfill indexes the whole backlog and holds
// bodies up to --body-budget (FAIRWAY_BENCH_BODY_BUDGET, default the
// dispatcher's). It reports the process's peak resident set (peak_rss_MB,
// VmHWM) once the backfill has delivered every event, and what that is
// per event of the backlog. The NATS server runs in a process of its own
// (testenv.BenchNATS).
func BenchmarkDispatcherMemory(b *testing.B) {
	n := testenv.EnvInt(b, "FAIRWAY_BENCH_EVENTS", 1_000_000)
	tenants := testenv.EnvInt(b, "FAIRWAY_BENCH_TENANTS", 2_000)
	budget := testenv.EnvInt(b, "FAIRWAY_BENCH_BODY_BUDGET", 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	bin := testenv.BuildServices(b)
	url, dsn, st, pubs, _ := benchSetup(b, ctx)
	for i := range tenants {
		if _, err := st.EnsureTenant(ctx, fmt.Sprintf("t%04d", i)); err != nil {
			b.Fatal(err)
		}
	}
	if _, _, err := benchload.Publish(ctx, pubs, n, func(i int) string { return fmt.Sprintf("t%04d", i%tenants) }); err != nil {
		b.Fatalf("publish: %v", err)
	}

	listen := freeAddr(b)
	args := []string{"--nats-url", url, "--database-url", dsn, "--listen", listen, "--log-level", "warn"}
	if budget != 0 {
		args = append(args, "--body-budget", strconv.Itoa(budget))
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "dispatcher"), args...)
	cmd.Stderr = os.Stderr
	b.ResetTimer()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	for backfilled(listen) < float64(n) {
		if ctx.Err() != nil {
			b.Fatalf("the backfill delivered %.0f of %d events", backfilled(listen), n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	indexed := time.Since(start)
	time.Sleep(2 * time.Second) // what the grants and the work window do next
	hwm, rss := procKB(b, cmd.Process.Pid, "VmHWM"), procKB(b, cmd.Process.Pid, "VmRSS")
	b.StopTimer()
	const mb = 1 << 20
	b.ReportMetric(float64(hwm)*1024/mb, "peak_rss_MB")
	b.ReportMetric(float64(rss)*1024/mb, "rss_MB")
	b.ReportMetric(float64(hwm)*1024/float64(n), "peak_bytes/event")
	b.ReportMetric(indexed.Seconds(), "indexed_s")
	b.ReportMetric(0, "ns/op")
	b.Logf("%d events over %d tenants indexed in %s; peak RSS %d MB, now %d MB", n, tenants, indexed.Round(time.Millisecond), hwm/1024, rss/1024)
}

// benchSetup starts a NATS server in a process of its own
// (testenv.BenchNATS) with PRODUCTS and WORK, and a fresh PostgreSQL
// database, migrated; it returns them with a store and 4 publishers, each
// on a connection of its own. Cleanup stops the server.
func benchSetup(b *testing.B, ctx context.Context) (url, dsn string, st *tenancy.Store, pubs []*events.Publisher, server *testenv.NATSChild) {
	b.Helper()
	pool, dsn := testenv.NewPool(b)
	if _, err := migrate.Up(ctx, dsn); err != nil {
		b.Fatalf("migrate: %v", err)
	}
	url, server, stop := testenv.BenchNATS(b)
	b.Cleanup(stop)
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		b.Fatal(err)
	}
	if _, err := work.EnsureStream(ctx, js, work.StreamConfig{}); err != nil {
		b.Fatal(err)
	}
	if st, err = tenancy.New(pool, &tenancy.Config{}); err != nil {
		b.Fatal(err)
	}
	pubs = make([]*events.Publisher, 4)
	for i := range pubs {
		c, err := nats.Connect(url)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		pjs, err := jetstream.New(c)
		if err != nil {
			b.Fatal(err)
		}
		if pubs[i], err = events.NewPublisher(pjs); err != nil {
			b.Fatal(err)
		}
	}
	return url, dsn, st, pubs, server
}

// backfilled returns the events the dispatcher's backfill delivered so
// far, from its metrics (0 while they cannot be read).
func backfilled(listen string) float64 {
	return metric(listen, `fairway_dispatcher_wakeups_total{source="backfill"} `)
}

// procKB reads a field of /proc/<pid>/status in kB.
func procKB(tb testing.TB, pid int, field string) int64 {
	tb.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			v, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return v
		}
	}
	tb.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
