package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/testenv/benchload"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// BenchmarkHighDuringImport measures what a tenant's urgent changes wait
// while the tenant imports a catalog, on the harness of
// BenchmarkReplayImpact (real JetStream in a process of its own, the local
// PostgreSQL, the real dispatcher with its defaults and a sink runner):
//
//   - tenant "big" (4 slots) imports FAIRWAY_BENCH_IMPORT_EVENTS (default
//     200,000) bulk events, published as fast as the stream takes them in
//     rounds of 500, as a CSV import is;
//   - meanwhile it publishes 5 high events/s, and, as the baseline, 5
//     bulk events/s: what its urgent changes would wait without
//     priorities, behind its own import;
//   - the sink holds 1 ms + FAIRWAY_BENCH_IMPORT_EVENT_US (default 200) µs
//     per event, a destination that takes the import in about 10 s.
//
// Latency is an event's time from publish to applied, for the trickles'
// events published while the import is being applied. Reported: high_p50_ms
// and high_p99_ms (the target: p99 ≤ 250 ms), bulk_p99_ms (the baseline),
// and bulk_over_high_p99, how many times longer the baseline waits.
//
// Run: go test -run '^$' -bench BenchmarkHighDuringImport -benchtime 1x ./internal/replay/
func BenchmarkHighDuringImport(b *testing.B) {
	n := testenv.EnvInt(b, "FAIRWAY_BENCH_IMPORT_EVENTS", 200_000)
	perEvent := time.Duration(testenv.EnvInt(b, "FAIRWAY_BENCH_IMPORT_EVENT_US", 200)) * time.Microsecond
	const (
		tenant = "big"
		perSec = 5.0
		round  = 500
	)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	e := newReplayBenchEnv(b, ctx, events.StreamDuplicatesDefault)
	admin := e.store()
	e.setLimit(admin, tenant, 4)
	fs := &timedSink{perEvent: perEvent, applied: map[uint64]applyTimes{}}
	_, stop := e.startPipeline(b, fs, &dispatch.Config{Dests: []string{tenancy.DestPostgres}, Holder: "bench", PollInterval: time.Second})
	defer stop()
	pub, err := events.NewPublisher(e.js(e.conn("trickle")))
	if err != nil {
		b.Fatal(err)
	}
	of := func(p events.Priority) func(string) events.Event {
		return func(t string) events.Event {
			ev := benchload.Event(t)
			ev.Priority = p
			return ev
		}
	}

	b.ResetTimer()
	t0 := time.Now()
	high := startLiveTrickle(ctx, pub, []string{tenant}, perSec, t0, of(events.PriorityHigh))
	bulk := startLiveTrickle(ctx, pub, []string{tenant}, perSec, t0, of(events.PriorityBulk))
	time.Sleep(time.Second)

	imp, err := events.NewPublisher(e.js(e.conn("import")))
	if err != nil {
		b.Fatal(err)
	}
	w := timeWindow{from: time.Now()}
	evs := make([]events.Event, 0, round)
	var importSeqs []uint64
	for sent := 0; sent < n; sent += round {
		evs = evs[:0]
		for range min(round, n-sent) {
			evs = append(evs, of(events.PriorityBulk)(tenant))
		}
		for _, res := range imp.Publish(ctx, evs) {
			if res.Err != nil {
				b.Fatalf("import: %v", res.Err)
			}
			importSeqs = append(importSeqs, res.Seq)
		}
	}
	published := time.Since(w.from)
	if !testenv.WaitUntil(ctx, time.Now().Add(10*time.Minute), func() bool { return fs.appliedAll(importSeqs) }) {
		b.Fatalf("the import was not applied within 10 minutes")
	}
	w.to = time.Now()
	high.stop()
	bulk.stop()
	deadline := time.Now().Add(time.Minute)
	highPubs, bulkPubs := high.records(), bulk.records()
	testenv.WaitUntil(ctx, deadline, func() bool { return fs.appliedCount() >= n+len(highPubs)+len(bulkPubs) })
	b.StopTimer()

	hs, hMissing := fs.latencies(highPubs, []timeWindow{w}, 0, deadline)
	bs, bMissing := fs.latencies(bulkPubs, []timeWindow{w}, 0, deadline)
	b.ReportMetric(testenv.Percentile(hs, 50), "high_p50_ms")
	b.ReportMetric(testenv.Percentile(hs, 99), "high_p99_ms")
	b.ReportMetric(testenv.Percentile(bs, 99), "bulk_p99_ms")
	if p := testenv.Percentile(hs, 99); p > 0 {
		b.ReportMetric(testenv.Percentile(bs, 99)/p, "bulk_over_high_p99")
	}
	b.ReportMetric(float64(n)/w.to.Sub(w.from).Seconds(), "import_events_per_s")
	b.ReportMetric(0, "ns/op")
	b.Logf("%d bulk events imported (published in %v, applied in %v); during it %d high events: p50 %.1fms p99 %.1fms max %.1fms (%d never applied); %d bulk events: p50 %.1fms p99 %.1fms (%d never applied)",
		n, published.Round(time.Millisecond), w.to.Sub(w.from).Round(time.Millisecond),
		len(hs), testenv.Percentile(hs, 50), testenv.Percentile(hs, 99), testenv.Percentile(hs, 100), hMissing,
		len(bs), testenv.Percentile(bs, 50), testenv.Percentile(bs, 99), bMissing)
	if n := high.errs.Load() + bulk.errs.Load(); n > 0 {
		b.Errorf("%d trickle publishes failed", n)
	}
	if len(hs) < 10 {
		b.Errorf("only %d high events during the import: too short to tell", len(hs))
	}
}

// appliedAll says whether every one of seqs was applied.
func (s *timedSink) appliedAll(seqs []uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range seqs {
		if _, ok := s.applied[q]; !ok {
			return false
		}
	}
	return true
}
