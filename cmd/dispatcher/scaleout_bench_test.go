package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/testenv/benchload"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// BenchmarkDispatchersScaleOut runs 1, 2 and 3 dispatcher binaries as
// separate processes (FAIRWAY_BENCH_DISPATCHERS: a comma-separated list)
// on one backlog, each on a fresh PostgreSQL database and NATS server (a
// process of its own, testenv.BenchNATS): FAIRWAY_BENCH_EVENTS (default
// 1,000,000) events of 200 flooding tenants and 100 small ones (10 events
// each), interleaved one by one in a stream of 8 partitions, queued before
// the dispatchers start; destination postgres, slot limits (64) and leases
// (10 minutes) that never bind, as no sink takes the work. The clock runs
// from the dispatchers' start until their work items cover every event
// (fairway_dispatcher_events_total summed over them). It reports the
// drain's events/s, each dispatcher's share, the dispatchers' CPU (user
// + system) per event, flat as dispatchers are added when each reads only
// its partitions, and the NATS server's.
func BenchmarkDispatchersScaleOut(b *testing.B) {
	n := testenv.EnvInt(b, "FAIRWAY_BENCH_EVENTS", 1_000_000)
	counts := []int{1, 2, 3}
	if v := os.Getenv("FAIRWAY_BENCH_DISPATCHERS"); v != "" {
		counts = nil
		for _, f := range strings.Split(v, ",") {
			c, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || c < 1 {
				b.Fatalf("FAIRWAY_BENCH_DISPATCHERS=%q: want a list of counts", v)
			}
			counts = append(counts, c)
		}
	}
	bin := testenv.BuildServices(b)
	for _, c := range counts {
		b.Run(fmt.Sprintf("dispatchers=%d", c), func(b *testing.B) {
			for range b.N {
				scaleOut(b, bin, c, n)
			}
		})
	}
}

func scaleOut(b *testing.B, bin string, count, n int) {
	const floods, small, smallEvents = 200, 100, 10
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	b.StopTimer()
	url, dsn, st, pubs, server := benchSetup(b, ctx)
	tenant := func(i int) string { return fmt.Sprintf("t%03d", i) }
	for i := range floods + small {
		if _, err := st.EnsureTenant(ctx, tenant(i)); err != nil {
			b.Fatal(err)
		}
		if err := st.SetLimit(ctx, tenant(i), tenancy.DestPostgres, 64); err != nil {
			b.Fatal(err)
		}
	}
	// One small tenant's event in every (n / (small*smallEvents))th place,
	// the floods round robin in between.
	every := max(n/(small*smallEvents), 2)
	total := n
	if _, _, err := benchload.Publish(ctx, pubs, total, func(i int) string {
		if i%every == every-1 && i/every < small*smallEvents {
			return tenant(floods + (i/every)%small)
		}
		return tenant(i % floods)
	}); err != nil {
		b.Fatalf("publish: %v", err)
	}

	type disp struct {
		cmd    *exec.Cmd
		listen string
	}
	ds := make([]disp, count)
	for i := range ds {
		ds[i].listen = freeAddr(b)
		ds[i].cmd = exec.CommandContext(ctx, filepath.Join(bin, "dispatcher"),
			"--nats-url", url, "--database-url", dsn, "--listen", ds[i].listen, "--log-level", "warn",
			"--dest", "postgres", "--holder", fmt.Sprintf("scale-%d", i+1), "--lease-ttl", "10m")
		ds[i].cmd.Stderr = os.Stderr
	}
	var serverFrom time.Duration
	if server != nil {
		serverFrom, _ = server.CPU()
	}
	b.StartTimer()
	start := time.Now()
	for i := range ds {
		if err := ds[i].cmd.Start(); err != nil {
			b.Fatal(err)
		}
	}
	defer func() {
		for _, d := range ds {
			_ = d.cmd.Process.Kill()
			_ = d.cmd.Wait()
		}
	}()
	dispatched := func() (sum float64, each []float64) {
		for _, d := range ds {
			v := metric(d.listen, `fairway_dispatcher_events_total{dest="postgres"} `)
			each = append(each, v)
			sum += v
		}
		return sum, each
	}
	for {
		if sum, _ := dispatched(); sum >= float64(total) {
			break
		}
		if ctx.Err() != nil {
			sum, each := dispatched()
			b.Fatalf("the dispatchers dispatched %.0f of %d events (%v)", sum, total, each)
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(start)
	b.StopTimer()
	sum, each := dispatched()
	var cpu time.Duration
	for _, d := range ds {
		used, _, err := testenv.ProcessCPU(d.cmd.Process.Pid)
		if err != nil {
			b.Fatal(err)
		}
		cpu += used
	}
	var serverCPU time.Duration
	if server != nil {
		if to, err := server.CPU(); err == nil {
			serverCPU = to - serverFrom
			b.ReportMetric(float64(serverCPU.Microseconds())/float64(total), "server_cpu_us/event")
		}
	}
	b.ReportMetric(float64(total)/took.Seconds(), "events/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(total), "cpu_us/event")
	b.ReportMetric(took.Seconds(), "drain_s")
	b.ReportMetric(0, "ns/op")
	var shares []string
	for i, v := range each {
		var sources []string
		for _, src := range []string{"index", "dense", "read"} {
			sources = append(sources, fmt.Sprintf("%s %.0f", src, metric(ds[i].listen, `fairway_dispatcher_grants_total{dest="postgres",source="`+src+`"} `)))
		}
		shares = append(shares, fmt.Sprintf("scale-%d %.0f (%.0f/s; grants: %s)", i+1, v, v/took.Seconds(), strings.Join(sources, ", ")))
	}
	b.Logf("%d dispatchers: %d events (%.0f dispatched) in %s, %.0f events/s; dispatchers' CPU %s, %.2f µs/event; NATS server's CPU %s, %.2f µs/event; per dispatcher: %s",
		count, total, sum, took.Round(time.Millisecond), float64(total)/took.Seconds(), cpu.Round(time.Millisecond),
		float64(cpu.Microseconds())/float64(total), serverCPU.Round(time.Millisecond), float64(serverCPU.Microseconds())/float64(total), strings.Join(shares, ", "))
}

// metric reads one sample (the line's prefix up to the value) from a
// process's /metrics (0 while it cannot be read).
func metric(listen, prefix string) float64 {
	resp, err := http.Get("http://" + listen + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			v, _ := strconv.ParseFloat(rest, 64)
			return v
		}
	}
	return 0
}
