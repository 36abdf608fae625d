package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/fairwayhq/fairway/internal/testenv"
)

// BenchmarkEndToEnd measures issue #5's figure: events per second from
// ingest until all three destinations applied them, on the whole pipeline
// as `fairway demo` runs it (internal/pipeline with demoConfig) against
// the real servers, stood up by internal/testenv/pipelinetest: embedded
// JetStream with file storage in a temporary directory; fresh PostgreSQL
// and ClickHouse databases; the ingest API on a loopback port; the
// dispatcher and one sink runner per destination (postgres, clickhouse,
// b2b:partner with an in-process partner receiver). The demo's dashboard
// is not served.
//
// Each iteration starts a fresh pipeline (untimed), then 4 HTTP clients
// POST FAIRWAY_BENCH_E2E_EVENTS events (default 200,000; every one a new
// product with a 256-byte payload) spread over FAIRWAY_BENCH_E2E_TENANTS
// tenants (default 20; 1 is one tenant's bulk load) as NDJSON batches of
// 500 with the tenants' tokens, as an upstream system would.
// FAIRWAY_BENCH_E2E_CH_BATCH sets the dispatcher's batch size for
// clickhouse (default its own, dispatch.ClickHouseBatchDefault).
// The clock runs from the first POST until every destination applied every
// event (the sinks' applied counts, demo.Tracker); afterwards the
// destinations are checked to hold every product once and the dead-letter
// stream to be empty.
//
// Reported, each over the clock's start: ingest_events_per_s (until the
// last POST was answered, i.e. JetStream acknowledged every event),
// <dest>_events_per_s (until that destination had applied all), and
// e2e_events_per_s (until all three had: the target is ≥ 30,000
// on this 2-core machine), and clickhouse_inserts_per_run (the server's
// INSERT queries during a run: product_events and products_latest each
// count). The run fails if an event is dead-lettered,
// a POST fails, or the pipeline is not done within
// FAIRWAY_BENCH_E2E_DEADLINE (default 10m).
//
// Run: FAIRWAY_BENCH_E2E_EVENTS=200000 go test -run '^$' -bench BenchmarkEndToEnd -benchtime 1x -timeout 30m ./cmd/fairway/
func BenchmarkEndToEnd(b *testing.B) {
	benchE2E(b, func(ctx context.Context, load e2eLoad) (e2eSystem, string, func() error) {
		p, baseURL := e2ePipeline(b, load)
		return p, baseURL, func() error { return p.Close(ctx) }
	})
}

// BenchmarkEndToEndBare is BenchmarkEndToEnd's load through the bare
// system of e2e_bare_test.go: the same servers and destinations written
// without fairway (plain HTTP handler, one shared JetStream consumer per
// destination, plain SQL and signed POSTs). Its e2e_events_per_s is what
// this machine gives these writes with nothing of fairway's in the way;
// BenchmarkEndToEnd's figure is read against it.
//
// Run: go test -run '^$' -bench 'BenchmarkEndToEnd' -benchtime 1x -timeout 30m ./cmd/fairway/
func BenchmarkEndToEndBare(b *testing.B) {
	benchE2E(b, func(ctx context.Context, load e2eLoad) (e2eSystem, string, func() error) {
		s, baseURL := startBare(b, ctx)
		return s, baseURL, func() error { s.stop(); return nil }
	})
}

// benchE2E runs the end-to-end load b.N times against systems that start
// starts (untimed), verifies each run and reports the rates.
func benchE2E(b *testing.B, start func(context.Context, e2eLoad) (sys e2eSystem, baseURL string, stop func() error)) {
	load := e2eLoad{Events: testenv.EnvInt(b, "FAIRWAY_BENCH_E2E_EVENTS", 200_000), Tenants: testenv.EnvInt(b, "FAIRWAY_BENCH_E2E_TENANTS", 20), Batch: 500, Clients: 4,
		ClickHouseBatch: testenv.EnvInt(b, "FAIRWAY_BENCH_E2E_CH_BATCH", 0)}
	deadline := testenv.EnvDuration(b, "FAIRWAY_BENCH_E2E_DEADLINE", 10*time.Minute)
	ctx := context.Background()

	var ingest, all time.Duration
	applied := map[string]time.Duration{}
	var dests []string
	var inserts uint64
	for i := range b.N {
		b.StopTimer()
		sys, baseURL, stop := start(ctx, load)
		dests = sys.Destinations()
		before := clickHouseInserts(b, sys.Stores())
		b.StartTimer()
		res, err := runE2E(ctx, sys, baseURL, load, deadline)
		b.StopTimer()
		inserts += clickHouseInserts(b, sys.Stores()) - before
		if err != nil {
			b.Fatalf("run %d: %v", i+1, err)
		}
		if err := verifyE2E(ctx, sys, load); err != nil {
			b.Fatalf("run %d: every destination counted %d events applied, but: %v", i+1, load.Events, err)
		}
		if err := stop(); err != nil {
			b.Fatalf("run %d: %v", i+1, err)
		}
		ingest += res.Ingest
		all += res.All
		for d, t := range res.Applied {
			applied[d] += t
		}
		b.Logf("run %d: %s", i+1, e2eSummary(load, res, dests))
	}

	events := float64(load.Events * b.N)
	b.ReportMetric(events/ingest.Seconds(), "ingest_events_per_s")
	for _, d := range dests {
		b.ReportMetric(events/applied[d].Seconds(), strings.ReplaceAll(d, ":", "_")+"_events_per_s")
	}
	b.ReportMetric(events/all.Seconds(), "e2e_events_per_s")
	b.ReportMetric(float64(inserts)/float64(b.N), "clickhouse_inserts_per_run")
}

// clickHouseInserts is the ClickHouse server's count of INSERT queries so
// far (system.events; the whole server's, so nothing else should insert
// during a run): each is a part ClickHouse merges again and again, so
// fewer for the same events means less of its CPU.
func clickHouseInserts(b *testing.B, p e2eStores) uint64 {
	b.Helper()
	conn, err := ch.Open(&ch.Options{Addr: []string{p.ClickHouseAddr}, Auth: ch.Auth{Database: p.Database}, DialTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	var n uint64
	if err := conn.QueryRow(context.Background(), "SELECT sum(value) FROM system.events WHERE event = 'InsertQuery'").Scan(&n); err != nil {
		b.Fatalf("ClickHouse INSERT count: %v", err)
	}
	return n
}

// e2eSummary says what one run measured.
func e2eSummary(load e2eLoad, res e2eResult, dests []string) string {
	rate := func(d time.Duration) string { return fmt.Sprintf("%.0f events/s", float64(load.Events)/d.Seconds()) }
	var b strings.Builder
	fmt.Fprintf(&b, "%d events over %d tenants, %d clients posting batches of %d: ingested in %v (%s)",
		load.Events, load.Tenants, load.Clients, load.Batch, res.Ingest.Round(time.Millisecond), rate(res.Ingest))
	for _, d := range dests {
		fmt.Fprintf(&b, "; %s applied all in %v (%s)", d, res.Applied[d].Round(time.Millisecond), rate(res.Applied[d]))
	}
	fmt.Fprintf(&b, "; end to end %v (%s)", res.All.Round(time.Millisecond), rate(res.All))
	return b.String()
}
