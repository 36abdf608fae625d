package clickhouse_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/sinks/clickhouse"
)

const benchBatch = 10_000

var benchPayload = json.RawMessage(`{"name":"Espresso machine","price":{"amount":41900,"currency":"EUR"},"tags":["kitchen","coffee"],"stock":17}`)

func benchRecords(n int) []sink.Record {
	out := make([]sink.Record, benchBatch)
	at := time.Unix(1_700_000_000, 0)
	for j := range out {
		out[j] = sink.Record{Seq: uint64(n*benchBatch + j), PublishedAt: at, Event: events.Event{
			Tenant:     fmt.Sprintf("tenant-%d", j%50),
			ProductID:  fmt.Sprintf("p%06d", (n*benchBatch+j)%100_000),
			Version:    int64(n + 1),
			Op:         events.OpUpsert,
			OccurredAt: at,
			Payload:    benchPayload,
		}}
	}
	return out
}

func report(b *testing.B) {
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "rows/s")
}

// BenchmarkSink measures Sink.Apply of 10k-row batches (validation, one
// INSERT into product_events and one into products_latest).
func BenchmarkSink(b *testing.B) {
	s, _ := setup(b, clickhouse.Config{})
	n := 0
	for b.Loop() {
		if _, err := s.Apply(context.Background(), benchRecords(n)); err != nil {
			b.Fatal(err)
		}
		n++
	}
	report(b)
}

// BenchmarkBarePrepareBatch is the baseline: the same two INSERTs through
// PrepareBatch+Send straight from the benchmark, without the sink.
func BenchmarkBarePrepareBatch(b *testing.B) {
	_, r := setup(b, clickhouse.Config{}) // creates the tables
	ctx := context.Background()
	n := 0
	for b.Loop() {
		batch := benchRecords(n)
		n++
		now := time.Now()
		ev, err := r.conn.PrepareBatch(ctx, "INSERT INTO product_events (tenant_id, product_id, version, deleted, payload, occurred_at, occurred_at_ns, idempotency_key, seq, published_at, applied_at)")
		if err != nil {
			b.Fatal(err)
		}
		lt, err := r.conn.PrepareBatch(ctx, "INSERT INTO products_latest (tenant_id, product_id, version, deleted, payload, occurred_at, occurred_at_ns, applied_at)")
		if err != nil {
			b.Fatal(err)
		}
		for _, rec := range batch {
			e := rec.Event
			if err := ev.Append(e.Tenant, e.ProductID, e.Version, uint8(0), string(e.Payload), e.OccurredAt, e.OccurredAt.UnixNano(), e.IdempotencyKey, rec.Seq, rec.PublishedAt, now); err != nil {
				b.Fatal(err)
			}
			if err := lt.Append(e.Tenant, e.ProductID, e.Version, uint8(0), string(e.Payload), e.OccurredAt, e.OccurredAt.UnixNano(), now); err != nil {
				b.Fatal(err)
			}
		}
		if err := ev.Send(); err != nil {
			b.Fatal(err)
		}
		if err := lt.Send(); err != nil {
			b.Fatal(err)
		}
	}
	report(b)
}

// BenchmarkGroupCommit measures many concurrent one-event applies (8
// goroutines, a dozen tenants, as the demo's small tenants make them): with
// group commit as configured by default, without the linger, and off (every
// Apply its own INSERTs); and with 32 goroutines, as a sink runner with
// --concurrency 32 would call it. items/s is Apply calls per second,
// inserts/s insert rounds (one INSERT per table) per second.
func BenchmarkGroupCommit(b *testing.B) {
	for _, c := range []struct {
		name    string
		workers int
		cfg     clickhouse.Config
	}{
		{"on-8", 8, clickhouse.Config{}},
		{"no-linger-8", 8, clickhouse.Config{Linger: -1}},
		{"off-8", 8, clickhouse.Config{Linger: -1, GroupRows: -1}},
		{"on-32", 32, clickhouse.Config{}},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, _ := setup(b, c.cfg)
			at := time.Unix(1_700_000_000, 0)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range c.workers {
				wg.Go(func() {
					for {
						n := next.Add(1)
						if n > int64(b.N) {
							return
						}
						rec := sink.Record{Seq: uint64(n), PublishedAt: at, Event: events.Event{
							Tenant:     fmt.Sprintf("tenant-%02d", n%12),
							ProductID:  fmt.Sprintf("p%07d", n),
							Version:    1,
							Op:         events.OpUpsert,
							OccurredAt: at,
							Payload:    benchPayload,
						}}
						if _, err := s.Apply(context.Background(), []sink.Record{rec}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			sec := b.Elapsed().Seconds()
			inserts := float64(clickhouse.Inserts(s))
			b.ReportMetric(float64(b.N)/sec, "items/s")
			b.ReportMetric(inserts/sec, "inserts/s")
			b.ReportMetric(float64(b.N)/inserts, "items/insert")
		})
	}
}
