package replay_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/replay"
	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/runner"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/testenv/benchload"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// BenchmarkReplayImpact measures what a large replay of one tenant costs the
// other tenants' live traffic and the tenant's own, all on real servers
// (embedded JetStream with file storage, the local PostgreSQL, the
// dispatcher and a sink runner):
//
//   - tenant "big" has FAIRWAY_BENCH_REPLAY_EVENTS (default 1,000,000)
//     events in PRODUCTS, already applied (its cursor is past them);
//   - 50 small tenants each publish 5 events/s from the start to the end,
//     and big publishes 10 live events/s throughout;
//   - one destination (postgres) with slot limits big 4, small tenants 1;
//     the dispatcher with its defaults (batch 500, Concurrency 16, replay
//     rate 2,500 events/s in replayed items of 100) except a 1 s poll; one
//     sink runner with 16 workers and a fake sink whose Apply holds 1 ms +
//     20 µs per event (a PostgreSQL upsert's round trip plus its per-row
//     cost). The runner reads every range back from PRODUCTS, as in
//     production;
//   - after a 2 s warm-up, replay.Service starts the replay of big's
//     events from its first; then the replay runs and stops in turns of
//     FAIRWAY_BENCH_WINDOW (default 3s) each (its lane ended, then started
//     again where it stopped: tenancy.EndReplay and Rewind) until all of
//     big's events have been applied again, plus one more window without
//     it. Alternating
//     gives the windows with and without the replay the same share of
//     whatever else the machine does meanwhile, where a single baseline
//     window would make the comparison depend on when a stray stall
//     happened to fall; the first 0.5 s of each window is left out. Short
//     windows split even a stall of some tens of seconds between both
//     sides, where with long ones it may fall on one side only and move
//     the pooled p99 by more than the replay does.
//
// Latency is a live event from the start of its publish to the end of the
// Apply that applied it. Reported: the small tenants' p50 and p99 in the
// windows without and with the replay, p99_ratio = with / without (the
// target: below 1.10), the same for big's own live events (own_base_p99_ms,
// own_replay_p99_ms, own_p99_ratio: below 1.10 too, as big's replay runs in
// a lane of its own), the replay's running time and rate. The same comparison window by window: window_p99_ratio_median is
// the median, over the windows with the replay, of a window's p99 over the
// mean p99 of the windows without it on either side, and
// windows_above_1.10_frac the share of those windows above 1.10. Both
// suit long windows (FAIRWAY_BENCH_WINDOW=10s); a 3 s window holds only
// about 600 small events, so its p99 is their sixth slowest and the share
// above 1.10 mostly noise: the pooled p99 is the figure.
// FAIRWAY_BENCH_REPLAY_RATE (events/s, or "unlimited") and
// FAIRWAY_BENCH_REPLAY_BATCH override the replay's rate and item size,
// FAIRWAY_BENCH_REPLAY_LOOKAHEAD the dispatcher's ReplayLookahead ("off":
// no replay feed), FAIRWAY_BENCH_CONCURRENCY its Concurrency. Also
// reported: the fraction of replayed events the sink runner read bare
// (replay_bare_frac), the CPU the replay added per
// replayed event (replay_cpu_us_per_event: CPU of this process and the
// server's in the windows with the replay less the same time's worth of
// the windows without), and p99s of the parts of a small tenant's latency
// (base_/replay_ ack, stored_to_item, item_to_apply, apply: see stages).
//
// The server runs in a process of its own by default, as in production
// (FAIRWAY_BENCH_NATS=embedded runs it in this one): embedded, its heap
// (the stream's dedup entries for every one of big's events) is marked by
// every garbage collection the dispatcher and the runner cause, and those
// collections, more frequent while the replay allocates, then make most of
// the small tenants' p99 rise. FAIRWAY_BENCH_PROFILE_DIR writes CPU
// profiles of the first window with the replay and the first without.
//
// Run: FAIRWAY_BENCH_REPLAY_EVENTS=200000 go test -run '^$' -bench BenchmarkReplayImpact -benchtime 1x ./internal/replay/
func BenchmarkReplayImpact(b *testing.B) {
	n := testenv.EnvInt(b, "FAIRWAY_BENCH_REPLAY_EVENTS", 1_000_000)
	rate := 0 // the dispatcher's default
	switch v := os.Getenv("FAIRWAY_BENCH_REPLAY_RATE"); v {
	case "":
	case "unlimited":
		rate = tenancy.ReplayUnthrottled
	default:
		rate = testenv.EnvInt(b, "FAIRWAY_BENCH_REPLAY_RATE", 0)
	}
	window := testenv.EnvDuration(b, "FAIRWAY_BENCH_WINDOW", 3*time.Second)
	lookahead := dispatch.ReplayLookaheadDefault
	switch v := os.Getenv("FAIRWAY_BENCH_REPLAY_LOOKAHEAD"); v {
	case "":
	case "off":
		lookahead = -1
	default:
		lookahead = testenv.EnvInt(b, "FAIRWAY_BENCH_REPLAY_LOOKAHEAD", 0)
	}
	const (
		bigTenant = "big"
		small     = 50
		perSec    = 5.0
		bigPerSec = 10.0
		workers   = 16
		warmUp    = 2 * time.Second
	)
	smalls := make([]string, small)
	for i := range smalls {
		smalls[i] = fmt.Sprintf("s%02d", i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	// big's events are older than the stream's duplicate window when the
	// replay begins, as a replay's events are in practice (it restores
	// what a destination lost hours or days ago): the benchmark's stream
	// keeps Nats-Msg-Ids for 5 s instead of 10 minutes and waits for big's
	// to expire before it starts. FAIRWAY_BENCH_REPLAY_RECENT=1 replays
	// events still in the default window instead: the server then holds a
	// dedup entry for each of them throughout.
	recent := os.Getenv("FAIRWAY_BENCH_REPLAY_RECENT") == "1"
	dedup := 5 * time.Second
	if recent {
		dedup = events.StreamDuplicatesDefault
	}
	e := newReplayBenchEnv(b, ctx, dedup)

	admin := e.store()
	e.setLimit(admin, bigTenant, 4)
	for _, s := range smalls {
		e.setLimit(admin, s, 1)
	}
	pubStart := time.Now()
	first, last := e.publishBulk(bigTenant, n, 4)
	pubTook := time.Since(pubStart)
	// A replay's events were written long before it in practice: their
	// writeback would fall into the first windows.
	testenv.SyncDisk()
	if !recent {
		time.Sleep(dedup + time.Second) // the server drops big's dedup entries
	}
	// Already applied: the cursor is past every one of big's events.
	if err := admin.SetCursor(ctx, bigTenant, tenancy.DestPostgres, last+1); err != nil {
		b.Fatal(err)
	}

	fs := &timedSink{big: bigTenant, bigLast: last, applied: map[uint64]applyTimes{}}
	reg, stop := e.startPipeline(b, fs, &dispatch.Config{Dests: []string{tenancy.DestPostgres}, Holder: "bench", PollInterval: time.Second,
		ReplayBatch:     testenv.EnvInt(b, "FAIRWAY_BENCH_REPLAY_BATCH", dispatch.ReplayBatchDefault),
		ReplayLookahead: lookahead, Concurrency: testenv.EnvInt(b, "FAIRWAY_BENCH_CONCURRENCY", 0)})
	defer stop()
	pub, err := events.NewPublisher(e.js(e.conn("trickle")))
	if err != nil {
		b.Fatal(err)
	}
	svc := &replay.Service{Store: admin, Pool: e.pools[0], JS: e.js(e.conn("replay")), Reader: work.NewReader(e.conn("reader"), "")}

	items := watchLiveItems(b, e.conn("watch"), bigTenant)

	b.ResetTimer()
	t0 := time.Now()
	tr := startLiveTrickle(ctx, pub, smalls, perSec, t0, benchload.Event)
	own := startLiveTrickle(ctx, pub, []string{bigTenant}, bigPerSec, t0, benchload.Event)
	time.Sleep(warmUp)

	// The replay runs and stops in turns of one window each, starting
	// stopped, so the windows with and without it share whatever else the
	// machine does over time. A stopped replay is taken up again where it
	// stopped. It ends at big's last bulk event: the cursor is past big's
	// live events too.
	resume := first
	replaying := func(on bool) {
		if on {
			if _, err := admin.Rewind(ctx, tenancy.Rewind{Tenant: bigTenant, Dest: tenancy.DestPostgres, From: resume, Last: last, Rate: rate}); err != nil {
				b.Fatal(err)
			}
			return
		}
		at, err := admin.EndReplay(ctx, bigTenant, tenancy.DestPostgres)
		if err != nil {
			b.Fatal(err)
		}
		if at != 0 {
			resume = at
		}
	}
	grantsBefore := grantSources(b, reg)
	replayFrom := time.Now()
	rs, err := svc.Start(ctx, replay.Request{Tenant: bigTenant, Dest: tenancy.DestPostgres, FromSeq: first, ToSeq: last, Rate: rate})
	if err != nil {
		b.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Total != uint64(n) {
		b.Fatalf("replay started %+v, want one replay of %d events", rs, n)
	}
	var (
		off, on []timeWindow
		onTime  time.Duration
		// CPU time of the NATS server, dispatcher and sink runner
		// (replayBenchEnv.cpu) in the windows with and without the
		// replay: what the replay costs the machine, which a p99 on a
		// shared 2-core machine shows only through its noise.
		onCPU, offCPU, offTime time.Duration
	)
	replayDeadline := replayFrom.Add(40 * time.Minute)
	done := func() bool { return fs.bigApplied.Load() >= int64(n) }
	for running := false; !done(); running = !running {
		if time.Now().After(replayDeadline) {
			b.Fatalf("replay not applied after %v: %d of %d events", time.Since(replayFrom), fs.bigApplied.Load(), n)
		}
		replaying(running)
		w := timeWindow{from: time.Now()}
		cpu0 := e.cpu(b)
		stopProfile := func() {}
		name, first := "replay-off", len(off) == 0
		if running {
			name, first = "replay-on", len(on) == 0
		}
		if first { // profile the first window of each kind
			stop, stopServer := testenv.ProfileCPU(b, name), e.nats.ProfileCPU(b, name+"-server")
			stopProfile = func() { stop(); stopServer() }
		}
		testenv.WaitUntil(ctx, w.from.Add(window), func() bool { return running && done() })
		stopProfile()
		w.to = time.Now()
		cpu := e.cpu(b) - cpu0
		if running {
			on, onTime, onCPU = append(on, w), onTime+w.to.Sub(w.from), onCPU+cpu
		} else {
			off, offTime, offCPU = append(off, w), offTime+w.to.Sub(w.from), offCPU+cpu
		}
	}
	replayTo := time.Now()
	grantsDuring := grantSources(b, reg)
	for k, v := range grantsBefore {
		grantsDuring[k] -= v
	}
	// One more window without the replay, so both sides have as many.
	if len(off) <= len(on) {
		w := timeWindow{from: time.Now()}
		time.Sleep(window)
		w.to = time.Now()
		off = append(off, w)
	}
	tr.stop()
	own.stop()
	deadline := time.Now().Add(2 * time.Minute)
	pubs, ownPubs := tr.records(), own.records()
	if !testenv.WaitUntil(ctx, deadline, func() bool { return fs.appliedCount() >= len(pubs)+len(ownPubs) }) {
		b.Errorf("live events: %d of %d applied %v after the replay", fs.appliedCount(), len(pubs)+len(ownPubs), time.Since(replayTo))
	}
	b.StopTimer()

	base, baseMissing := fs.latencies(pubs, off, settle, deadline)
	during, duringMissing := fs.latencies(pubs, on, settle, deadline)
	b.ReportMetric(testenv.Percentile(base, 50), "base_p50_ms")
	b.ReportMetric(testenv.Percentile(base, 99), "base_p99_ms")
	b.ReportMetric(testenv.Percentile(during, 50), "replay_p50_ms")
	b.ReportMetric(testenv.Percentile(during, 99), "replay_p99_ms")
	if p := testenv.Percentile(base, 99); p > 0 {
		b.ReportMetric(testenv.Percentile(during, 99)/p, "p99_ratio")
	}
	ownBase, _ := fs.latencies(ownPubs, off, settle, deadline)
	ownDuring, _ := fs.latencies(ownPubs, on, settle, deadline)
	b.ReportMetric(testenv.Percentile(ownBase, 99), "own_base_p99_ms")
	b.ReportMetric(testenv.Percentile(ownDuring, 99), "own_replay_p99_ms")
	if p := testenv.Percentile(ownBase, 99); p > 0 {
		b.ReportMetric(testenv.Percentile(ownDuring, 99)/p, "own_p99_ratio")
	}
	b.Logf("big's own live events: %d without the replay, p50 %.1fms p99 %.1fms; %d with it, p50 %.1fms p99 %.1fms",
		len(ownBase), testenv.Percentile(ownBase, 50), testenv.Percentile(ownBase, 99),
		len(ownDuring), testenv.Percentile(ownDuring, 50), testenv.Percentile(ownDuring, 99))
	// The same comparison window by window: each window with the replay
	// against the mean p99 of the windows without it on either side. A
	// pooled p99 is set by the few hundred slowest events of the run, and
	// a stall of the machine that happens to fall into one kind of window
	// moves it by more than the replay does; the median of the windows' ratios
	// is not moved by a few such windows, and pairs each window with its
	// own time's baseline.
	p99s := func(ws []timeWindow) []float64 {
		out := make([]float64, len(ws))
		for i, w := range ws {
			ds, _ := fs.latencies(pubs, []timeWindow{w}, settle, deadline)
			out[i] = testenv.Percentile(ds, 99)
		}
		return out
	}
	offP99, onP99 := p99s(off), p99s(on)
	ratios := windowRatios(offP99, onP99)
	if len(ratios) > 0 {
		b.ReportMetric(median(ratios), "window_p99_ratio_median")
		above := 0
		for _, r := range ratios {
			if r > 1.10 {
				above++
			}
		}
		b.ReportMetric(float64(above)/float64(len(ratios)), "windows_above_1.10_frac")
	}
	b.Logf("small tenants' p99 by window in ms, without the replay: %s; with it: %s; with / its neighbours without: %s",
		fmtFloats(offP99), fmtFloats(onP99), fmtFloats(ratios))
	offStages, onStages := fs.stages(pubs, off, items), fs.stages(pubs, on, items)
	for i, name := range stageNames {
		b.ReportMetric(testenv.Percentile(offStages[i], 99), "base_"+name+"_p99_ms")
		b.ReportMetric(testenv.Percentile(onStages[i], 99), "replay_"+name+"_p99_ms")
	}
	b.ReportMetric(onTime.Seconds(), "replay_s")
	b.ReportMetric(float64(n)/onTime.Seconds(), "replay_events_per_s")
	// CPU the replay added: the windows with it less what the same time
	// cost without it, per replayed event.
	extra := onCPU.Seconds() - offCPU.Seconds()/offTime.Seconds()*onTime.Seconds()
	b.ReportMetric(extra/float64(n)*1e6, "replay_cpu_us_per_event")
	bare, headers := readEvents(b, reg, "true")
	b.Logf("dispatcher grants by source from the replay's start to its end (replay and live): %v", grantsDuring)
	if bare+headers > 0 {
		b.ReportMetric(bare/(bare+headers), "replay_bare_frac")
	}
	b.ReportMetric(0, "ns/op")
	b.Logf("%d events of %s published in %v; %d windows of %v without the replay: %d small events (%d never applied), p50 %.1fms p90 %.1fms p99 %.1fms max %.1fms; "+
		"%d windows with it (%d events in %v running, %.0f events/s): %d small events (%d never applied), p50 %.1fms p90 %.1fms p99 %.1fms max %.1fms; "+
		"late publishes %d, publish errors %d, sink calls %d; replayed events read bare %.0f, with headers %.0f; "+
		"CPU (this process and the server) %.1f%% of a core without the replay, %.1f%% with it (%.1f µs per replayed event)",
		n, bigTenant, pubTook.Round(time.Millisecond), len(off), window, len(base), baseMissing,
		testenv.Percentile(base, 50), testenv.Percentile(base, 90), testenv.Percentile(base, 99), testenv.Percentile(base, 100),
		len(on), n, onTime.Round(time.Millisecond), float64(n)/onTime.Seconds(), len(during), duringMissing,
		testenv.Percentile(during, 50), testenv.Percentile(during, 90), testenv.Percentile(during, 99), testenv.Percentile(during, 100),
		tr.late.Load(), tr.errs.Load(), fs.calls.Load(), bare, headers,
		100*offCPU.Seconds()/offTime.Seconds(), 100*onCPU.Seconds()/onTime.Seconds(), extra/float64(n)*1e6)
	if n := tr.errs.Load() + own.errs.Load(); n > 0 {
		b.Errorf("%d live publishes failed", n)
	}
}

// replayBenchEnv is a fresh embedded JetStream (PRODUCTS, WORK, DLQ) and a
// fresh migrated database; each component gets its own connection and pool,
// as separate processes would. Everything closes in the benchmark's
// cleanup.
type replayBenchEnv struct {
	tb    testing.TB
	ctx   context.Context
	url   string
	nats  *testenv.NATSChild // nil: the server is embedded in this process
	dsn   string
	pools []*pgxpool.Pool
}

func newReplayBenchEnv(tb testing.TB, ctx context.Context, dedup time.Duration) *replayBenchEnv {
	tb.Helper()
	e := &replayBenchEnv{tb: tb, ctx: ctx, dsn: testenv.NewDatabase(tb)}
	if _, err := migrate.Up(ctx, e.dsn); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	e.url, e.nats, _ = testenv.BenchNATS(tb)
	js := e.js(e.conn("admin"))
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{Duplicates: dedup}); err != nil {
		tb.Fatal(err)
	}
	if _, err := work.EnsureStream(ctx, js, work.StreamConfig{}); err != nil {
		tb.Fatal(err)
	}
	if _, err := dlq.EnsureStream(ctx, js, dlq.StreamConfig{}); err != nil {
		tb.Fatal(err)
	}
	return e
}

// startPipeline runs the dispatcher (cfg) and a sink runner with 16
// workers applying to s, each on connections of its own, until stop; it
// returns the registry of their metrics.
func (e *replayBenchEnv) startPipeline(b *testing.B, s sink.Sink, cfg *dispatch.Config) (reg *prometheus.Registry, stop func()) {
	b.Helper()
	reg = prometheus.NewRegistry()
	r, err := runner.New(e.ctx, runner.Deps{JetStream: e.js(e.conn("sink")), Sink: s, Leases: e.store(), Registry: reg},
		&runner.Config{Concurrency: 16})
	if err != nil {
		b.Fatal(err)
	}
	disp, err := dispatch.New(dispatch.Deps{Store: e.store(), NATS: e.conn("dispatcher"), Registry: reg}, cfg)
	if err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := disp.Run(runCtx); err != nil {
			b.Errorf("dispatcher: %v", err)
		}
	})
	wg.Go(func() {
		if err := r.Run(runCtx); err != nil {
			b.Errorf("runner: %v", err)
		}
	})
	return reg, func() { cancel(); wg.Wait() }
}

// cpu returns the CPU time the benchmark's processes have used: this one
// (dispatcher, sink runner, publishers) and the server's when it runs in
// its own.
func (e *replayBenchEnv) cpu(tb testing.TB) time.Duration {
	tb.Helper()
	d := processCPU(tb)
	if e.nats != nil {
		c, err := e.nats.CPU()
		if err != nil {
			tb.Fatal(err)
		}
		d += c
	}
	return d
}

func (e *replayBenchEnv) conn(name string) *nats.Conn {
	e.tb.Helper()
	nc, err := nats.Connect(e.url, nats.Name(name))
	if err != nil {
		e.tb.Fatalf("connect %s: %v", name, err)
	}
	e.tb.Cleanup(nc.Close)
	return nc
}

func (e *replayBenchEnv) js(nc *nats.Conn) jetstream.JetStream {
	e.tb.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		e.tb.Fatal(err)
	}
	return js
}

// store opens a new pool and a Store on it.
func (e *replayBenchEnv) store() *tenancy.Store {
	e.tb.Helper()
	pool, err := pgxpool.New(e.ctx, e.dsn)
	if err != nil {
		e.tb.Fatal(err)
	}
	e.tb.Cleanup(pool.Close)
	e.pools = append(e.pools, pool)
	st, err := tenancy.New(pool, nil)
	if err != nil {
		e.tb.Fatal(err)
	}
	return st
}

func (e *replayBenchEnv) setLimit(st *tenancy.Store, tenant string, limit int) {
	e.tb.Helper()
	if _, err := st.EnsureTenant(e.ctx, tenant); err != nil {
		e.tb.Fatal(err)
	}
	if err := st.SetLimit(e.ctx, tenant, tenancy.DestPostgres, limit); err != nil {
		e.tb.Fatal(err)
	}
}

// publishBulk publishes n events of tenant with publishers goroutines and
// returns the lowest and highest sequence stored.
func (e *replayBenchEnv) publishBulk(tenant string, n, publishers int) (first, last uint64) {
	e.tb.Helper()
	pubs := make([]*events.Publisher, publishers)
	for p := range pubs {
		pub, err := events.NewPublisher(e.js(e.conn(fmt.Sprintf("bulk-%d", p))))
		if err != nil {
			e.tb.Fatal(err)
		}
		pubs[p] = pub
	}
	first, last, err := benchload.Publish(e.ctx, pubs, n, func(int) string { return tenant })
	if err != nil {
		e.tb.Fatalf("publish: %v", err)
	}
	return first, last
}

// timedSink is a sink.Sink that holds 1 ms + 20 µs per record and records
// when each live event (a small tenant's, or big's after its bulk) was
// first applied; big's replayed records are only counted.
type timedSink struct {
	big        string
	bigLast    uint64        // big's events up to here are the replayed ones
	perEvent   time.Duration // what Apply holds per record besides 1 ms (0: 20 µs)
	calls      atomic.Int64
	bigApplied atomic.Int64
	mu         sync.Mutex
	applied    map[uint64]applyTimes // live events by sequence
}

// applyTimes is when JetStream stored a live event (as the
// runner gave it) and when the Apply that first applied it began and ended.
type applyTimes struct{ stored, start, end time.Time }

var _ sink.Sink = (*timedSink)(nil)

func (s *timedSink) Name() string { return tenancy.DestPostgres }

func (s *timedSink) Apply(ctx context.Context, batch []sink.Record) ([]error, error) {
	s.calls.Add(1)
	start := time.Now()
	t := time.NewTimer(time.Millisecond + time.Duration(len(batch))*cmp.Or(s.perEvent, 20*time.Microsecond))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	now := time.Now()
	bigN := 0
	s.mu.Lock()
	for _, r := range batch {
		if r.Event.Tenant == s.big && r.Seq <= s.bigLast {
			bigN++
			continue
		}
		if _, ok := s.applied[r.Seq]; !ok {
			s.applied[r.Seq] = applyTimes{stored: r.PublishedAt, start: start, end: now}
		}
	}
	s.mu.Unlock()
	s.bigApplied.Add(int64(bigN))
	return make([]error, len(batch)), nil
}

func (s *timedSink) appliedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.applied)
}

// liveItems records when each small-tenant event first appeared in a work
// item on WORK (a core subscription sees the dispatcher's publish).
type liveItems struct {
	mu   sync.Mutex
	seen map[uint64]time.Time
}

func watchLiveItems(tb testing.TB, nc *nats.Conn, big string) *liveItems {
	tb.Helper()
	li := &liveItems{seen: map[uint64]time.Time{}}
	sub, err := nc.Subscribe(work.SubjectPrefix+".>", func(m *nats.Msg) {
		at := time.Now()
		it, err := work.Decode(m.Data)
		if err != nil || it.Tenant == big {
			return
		}
		li.mu.Lock()
		defer li.mu.Unlock()
		add := func(seq uint64) {
			if _, ok := li.seen[seq]; !ok {
				li.seen[seq] = at
			}
		}
		if len(it.Seqs) > 0 {
			for _, seq := range it.Seqs {
				add(seq)
			}
			return
		}
		for seq := it.FromSeq; seq <= it.ToSeq; seq++ {
			add(seq)
		}
	})
	if err != nil {
		tb.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		tb.Fatal(err)
	}
	return li
}

// stageNames name the parts of a small tenant's latency stages returns.
var stageNames = []string{"ack", "stored_to_item", "item_to_apply", "apply"}

// stages splits the latency of every event in pubs published in windows
// (past settle) into: publish → acknowledged, stored → its work item on
// WORK (the dispatcher), work item → Apply began (the runner's fetch, read
// and decode), Apply's own time. Events missing a time are left out.
func (s *timedSink) stages(pubs []livePub, windows []timeWindow, li *liveItems) [][]time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	li.mu.Lock()
	defer li.mu.Unlock()
	out := make([][]time.Duration, len(stageNames))
	for _, p := range pubs {
		in := false
		for _, w := range windows {
			in = in || (!p.at.Before(w.from.Add(settle)) && p.at.Before(w.to))
		}
		at, ok := s.applied[p.seq]
		seen, ok2 := li.seen[p.seq]
		if !in || !ok || !ok2 {
			continue
		}
		for i, d := range []time.Duration{p.acked.Sub(p.at), seen.Sub(at.stored), at.start.Sub(seen), at.end.Sub(at.start)} {
			out[i] = append(out[i], d)
		}
	}
	for _, ds := range out {
		slices.Sort(ds)
	}
	return out
}

// windowRatios pairs each window with the replay with the windows without
// it that came right before and after it (the windows alternate, starting
// and ending without it: off[i] < on[i] < off[i+1]) and returns on's p99
// over the mean of those two. A window without a neighbour on one side is
// compared with the other alone; windows with no events (p99 0) are left
// out.
func windowRatios(off, on []float64) []float64 {
	var out []float64
	for i, p := range on {
		var sum float64
		var n int
		for _, j := range []int{i, i + 1} {
			if j < len(off) && off[j] > 0 {
				sum, n = sum+off[j], n+1
			}
		}
		if n == 0 || p == 0 {
			continue
		}
		out = append(out, p/(sum/float64(n)))
	}
	return out
}

// median returns the median of xs (0 for none); xs is not changed.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func fmtFloats(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(parts, " ")
}

// timeWindow is [from, to).
type timeWindow struct{ from, to time.Time }

// settle is how much of the start of each window latencies leave out:
// the replay's items dispatched before a pause still finish then.
const settle = 500 * time.Millisecond

// latencies returns, sorted, publish → applied of every event in pubs whose
// publish began in one of the windows, skipping the first skip of each. An
// event never applied counts as applied at deadline, and is counted in
// missing.
func (s *timedSink) latencies(pubs []livePub, windows []timeWindow, skip time.Duration, deadline time.Time) (ds []time.Duration, missing int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range pubs {
		in := false
		for _, w := range windows {
			in = in || (!p.at.Before(w.from.Add(skip)) && p.at.Before(w.to))
		}
		if !in {
			continue
		}
		at, ok := s.applied[p.seq]
		if !ok {
			missing++
			at.end = deadline
		}
		ds = append(ds, at.end.Sub(p.at))
	}
	slices.Sort(ds)
	return ds, missing
}

// livePub is one small-tenant event: its sequence, when its publish began
// and when it was acknowledged.
type livePub struct {
	seq   uint64
	at    time.Time
	acked time.Time // when the publish was acknowledged
}

// liveTrickle publishes perSec events per second for each tenant, each on
// its own schedule with a random phase, until stop.
type liveTrickle struct {
	mu     sync.Mutex
	pubs   []livePub
	errs   atomic.Int64
	late   atomic.Int64 // publishes that began more than 50ms after their slot
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startLiveTrickle(ctx context.Context, pub *events.Publisher, tenants []string, perSec float64, start time.Time, event func(tenant string) events.Event) *liveTrickle {
	ctx, cancel := context.WithCancel(ctx)
	tr := &liveTrickle{cancel: cancel}
	every := time.Duration(float64(time.Second) / perSec)
	for _, tenant := range tenants {
		phase := rand.N(every)
		tr.wg.Go(func() {
			for k := 0; ; k++ {
				due := start.Add(phase + time.Duration(k)*every)
				t := time.NewTimer(time.Until(due))
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				at := time.Now()
				if at.Sub(due) > 50*time.Millisecond {
					tr.late.Add(1)
				}
				r := pub.PublishOne(context.WithoutCancel(ctx), event(tenant))
				if r.Err != nil {
					tr.errs.Add(1)
					continue
				}
				tr.mu.Lock()
				tr.pubs = append(tr.pubs, livePub{r.Seq, at, time.Now()})
				tr.mu.Unlock()
			}
		})
	}
	return tr
}

// stop ends the publishing and waits for publishes in progress.
func (tr *liveTrickle) stop() { tr.cancel(); tr.wg.Wait() }

func (tr *liveTrickle) records() []livePub {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.pubs)
}

// readEvents returns the sink runner's events read bare and with headers
// (fairway_sink_read_events_total) for replayed items (replay "true") or
// live ones ("false").
func readEvents(tb testing.TB, reg prometheus.Gatherer, replay string) (bare, headers float64) {
	tb.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "fairway_sink_read_events_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["replay"] != replay {
				continue
			}
			switch labels["mode"] {
			case "bare":
				bare += m.GetCounter().GetValue()
			case "headers":
				headers += m.GetCounter().GetValue()
			}
		}
	}
	return bare, headers
}

// processCPU returns the user and system CPU time this process has used.
func processCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// grantSources returns fairway_dispatcher_grants_total by source.
func grantSources(tb testing.TB, reg prometheus.Gatherer) map[string]float64 {
	tb.Helper()
	return testenv.CounterBy(tb, "fairway_dispatcher_grants_total", "source", reg)
}
