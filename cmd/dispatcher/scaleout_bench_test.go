package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/testenv/benchload"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// BenchmarkDispatchersScaleOut runs 1, 2 and 3 dispatcher binaries as
// separate processes (FAIRWAY_BENCH_DISPATCHERS: a comma-separated list)
// on one workload, each on a fresh PostgreSQL database and NATS server (a
// process of its own, testenv.BenchNATS): FAIRWAY_BENCH_EVENTS (default
// 1,000,000) events of 200 flooding tenants, interleaved one by one in a
// stream of 8 partitions and queued before the dispatchers start, and 100
// small tenants publishing live while they drain (2 events/s each);
// destination postgres, slot limits (64) and leases (10 minutes) that
// never bind, as no sink takes the work, and no bound on the work waiting
// for a sink (--work-without-sink -1). The clock runs from the
// dispatchers' start until their work items cover every event
// (fairway_dispatcher_events_total summed over them). It reports the
// drain's events/s, each dispatcher's share, the dispatchers' CPU (user
// + system) per event, flat as dispatchers are added when each reads only
// its partitions, the NATS server's, and the small tenants' latency from
// the store of an item's oldest event to the item's dispatch (p50, p99).
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
	const floods, small, smallEvery = 200, 100, 500 * time.Millisecond
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
	if _, _, err := benchload.Publish(ctx, pubs, n, func(i int) string { return tenant(i % floods) }); err != nil {
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
			"--dest", "postgres", "--holder", fmt.Sprintf("scale-%d", i+1), "--lease-ttl", "10m", "--work-without-sink", "-1")
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
	// The small tenants publish live, each every smallEvery, until the
	// floods are drained.
	liveCtx, stopLive := context.WithCancel(ctx)
	var live sync.WaitGroup
	var published atomic.Int64
	for i := range small {
		live.Go(func() {
			t := time.NewTicker(smallEvery)
			defer t.Stop()
			pub := pubs[i%len(pubs)]
			for {
				select {
				case <-liveCtx.Done():
					return
				case <-t.C:
				}
				if r := pub.Publish(liveCtx, []events.Event{benchload.Event(tenant(floods + i))}); r[0].Err == nil {
					published.Add(1)
				}
			}
		})
	}
	defer func() { stopLive(); live.Wait() }()
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
		sum, _ := dispatched()
		if sum >= float64(n) && liveCtx.Err() == nil {
			stopLive() // the floods are drained, or nearly: the last small events follow
			live.Wait()
		}
		if liveCtx.Err() != nil && sum >= float64(n)+float64(published.Load()) {
			break
		}
		if ctx.Err() != nil {
			sum, each := dispatched()
			b.Fatalf("the dispatchers dispatched %.0f of %d events (%v)", sum, n+int(published.Load()), each)
		}
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(start)
	b.StopTimer()
	total := n + int(published.Load())
	p50, p99, slowest := smallLatency(b, ctx, url, tenant, floods, small, start)
	b.ReportMetric(p50, "small_p50_ms")
	b.ReportMetric(p99, "small_p99_ms")
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
		waits := fmt.Sprintf("backfill waits %.0f, body waits %.0f, bodies refilled %.0f, events read %.0f",
			metric(ds[i].listen, `fairway_dispatcher_backfill_waits_total{dest="postgres"} `),
			metric(ds[i].listen, `fairway_dispatcher_body_waits_total{dest="postgres"} `),
			metric(ds[i].listen, `fairway_dispatcher_bodies_refilled_total `),
			metric(ds[i].listen, `fairway_dispatcher_read_events_total{dest="postgres"} `))
		shares = append(shares, fmt.Sprintf("scale-%d %.0f (%.0f/s; grants: %s; %s)", i+1, v, v/took.Seconds(), strings.Join(sources, ", "), waits))
	}
	b.Logf("%d dispatchers: %d events (%d of them small tenants' live; %.0f dispatched) in %s, %.0f events/s; dispatchers' CPU %s, %.2f µs/event; NATS server's CPU %s, %.2f µs/event; small tenants' store to dispatch p50 %.1f ms, p99 %.1f ms (slowest: %s); per dispatcher: %s",
		count, total, published.Load(), sum, took.Round(time.Millisecond), float64(total)/took.Seconds(), cpu.Round(time.Millisecond),
		float64(cpu.Microseconds())/float64(total), serverCPU.Round(time.Millisecond), float64(serverCPU.Microseconds())/float64(total), p50, p99, slowest, strings.Join(shares, ", "))
}

// smallLatency reads the small tenants' work items from WORK (no sink took
// them) and returns the p50 and p99, in milliseconds, of the time from the
// store of an item's oldest event in PRODUCTS to the item's dispatch.
func smallLatency(b *testing.B, ctx context.Context, url string, tenant func(int) string, floods, small int, start time.Time) (p50, p99 float64, slowest string) {
	b.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	products, err := js.Stream(ctx, events.StreamName)
	if err != nil {
		b.Fatal(err)
	}
	var subjects []string
	for i := range small {
		subjects = append(subjects, work.Subject(tenancy.DestPostgres, tenant(floods+i)))
	}
	// WORK is a work queue: its consumers ack explicitly, and no other
	// consumer filters these subjects here.
	cons, err := js.CreateConsumer(ctx, work.StreamName, jetstream.ConsumerConfig{
		FilterSubjects: subjects, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: -1,
	})
	if err != nil {
		b.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	type sample struct {
		ms     float64
		stored time.Time
	}
	var lat []sample
	for left := info.NumPending; left > 0; {
		batch, err := cons.Fetch(int(min(left, 500)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		for m := range batch.Messages() {
			left--
			it, err := work.Decode(m.Data())
			if err != nil {
				b.Fatal(err)
			}
			var stored time.Time
			switch {
			case len(it.Bodies) > 0:
				stored = time.UnixMilli(it.Bodies[0].StoredMs)
			case it.Times != nil:
				stored = it.Times.At(0)
			default:
				raw, err := products.GetMsg(ctx, it.FromSeq)
				if err != nil {
					b.Fatal(err)
				}
				stored = raw.Time
			}
			lat = append(lat, sample{float64(it.DispatchedAt.Sub(stored).Microseconds()) / 1000, stored})
		}
		if err := batch.Error(); err != nil {
			b.Fatal(err)
		}
	}
	if len(lat) == 0 {
		b.Fatal("no small tenant's work item in WORK")
	}
	slices.SortFunc(lat, func(a, b sample) int { return cmp.Compare(a.ms, b.ms) })
	var worst []string
	for _, l := range slices.Backward(lat[max(len(lat)-5, 0):]) {
		worst = append(worst, fmt.Sprintf("%.0f ms stored at +%.1fs", l.ms, l.stored.Sub(start).Seconds()))
	}
	return lat[len(lat)/2].ms, lat[len(lat)*99/100].ms, strings.Join(worst, ", ")
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
