package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
)

const (
	benchItem    = 500 // events per work item
	benchTenants = 32
	benchWorkers = 4 // runner Concurrency and bare writers alike
)

var benchPayload = json.RawMessage(`{"name":"Espresso machine","price":{"amount":41900,"currency":"EUR"},"tags":["kitchen","coffee"],"stock":17}`)

// benchEvents is item n: 500 distinct products of one tenant at version
// n/benchTenants+1, so that every item really writes.
func benchEvents(n int) []events.Event {
	tenant := fmt.Sprintf("t%02d", n%benchTenants)
	out := make([]events.Event, benchItem)
	for i := range out {
		out[i] = events.Event{Tenant: tenant, ProductID: fmt.Sprintf("p%04d", i), Version: int64(n/benchTenants + 1),
			Op: events.OpUpsert, OccurredAt: base, Payload: benchPayload}
	}
	return out
}

// BenchmarkApply compares, in one run, the PostgreSQL sink's bare Apply of
// 500-event batches (4 writers, nothing read from JetStream), the same
// writes fed by a plain shared JetStream consumer ("consumer": what a
// worker pool without fairway does), and the whole runtime applying work
// items of 500 events (Concurrency 4): fetch, direct-get read, decode,
// apply, lease release, ack — the items carrying their events' store
// times ("runner": bodies read without headers), without them
// ("runner_headers"), or carrying the events themselves as the
// dispatcher's items cut from its doorbell do ("runner_carried": nothing
// read from PRODUCTS). Reports events/s for each. JetStream runs in a
// process of its own (testenv.BenchNATS).
func BenchmarkApply(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		e := setup(b)
		batches := make([][]sink.Record, b.N)
		for n := range batches {
			evs := benchEvents(n)
			batches[n] = make([]sink.Record, len(evs))
			for i, ev := range evs {
				batches[n][i] = sink.Record{Seq: uint64(n*benchItem + i + 1), Event: ev, PublishedAt: time.Now()}
			}
		}
		var next atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		for range benchWorkers {
			wg.Go(func() {
				for {
					n := int(next.Add(1)) - 1
					if n >= b.N {
						return
					}
					if _, err := e.pg.Apply(context.Background(), batches[n]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		b.ReportMetric(float64(b.N*benchItem)/b.Elapsed().Seconds(), "events/s")
	})
	b.Run("consumer", benchConsumer)
	b.Run("runner", func(b *testing.B) { benchRunner(b, "runner") })
	b.Run("runner_headers", func(b *testing.B) { benchRunner(b, "runner-headers") })
	b.Run("runner_carried", func(b *testing.B) { benchRunner(b, "runner-carried") })
}

// benchConsumer is the same writes without fairway's runtime: the same
// events read from PRODUCTS by one plain durable consumer shared by 4
// workers, each fetching 500, decoding them and applying them with the
// same sink (the bare Apply's writes), then acking each message, as a
// shared worker pool does. No work items, leases or releases.
func benchConsumer(b *testing.B) {
	e := setupBench(b)
	ctx := context.Background()
	for n := range b.N {
		e.publish(benchEvents(n)...)
	}
	stream, err := e.js.Stream(ctx, events.StreamName)
	if err != nil {
		b.Fatal(err)
	}
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "bench", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 100_000})
	if err != nil {
		b.Fatal(err)
	}
	var applied atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range benchWorkers {
		wg.Go(func() {
			for applied.Load() < int64(b.N*benchItem) {
				batch, err := cons.Fetch(benchItem, jetstream.FetchMaxWait(100*time.Millisecond))
				if err != nil {
					b.Error(err)
					return
				}
				var msgs []jetstream.Msg
				var recs []sink.Record
				for m := range batch.Messages() {
					md, err := m.Metadata()
					if err != nil {
						b.Error(err)
						return
					}
					ev, err := events.Decode(m.Data())
					if err != nil {
						b.Error(err)
						return
					}
					msgs, recs = append(msgs, m), append(recs, sink.Record{Seq: md.Sequence.Stream, Event: ev, PublishedAt: md.Timestamp})
				}
				if len(recs) == 0 {
					continue
				}
				if _, err := e.pg.Apply(ctx, recs); err != nil {
					b.Error(err)
					return
				}
				for _, m := range msgs {
					_ = m.Ack()
				}
				applied.Add(int64(len(recs)))
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N*benchItem)/b.Elapsed().Seconds(), "events/s")
}

// benchRunner: items of the given name's kind: with store times
// ("runner", read without headers), without ("runner-headers", read with
// headers) or carrying their events ("runner-carried", not read).
func benchRunner(b *testing.B, name string) {
	e := setupBench(b)
	e.timed, e.carried = name == "runner", name == "runner-carried"
	// Every item is dispatched before the runner starts: each holds a slot.
	for t := range benchTenants {
		tenant := fmt.Sprintf("t%02d", t)
		if _, err := e.store.EnsureTenant(context.Background(), tenant); err != nil {
			b.Fatal(err)
		}
		if err := e.store.SetLimit(context.Background(), tenant, "postgres", b.N/benchTenants+1); err != nil {
			b.Fatal(err)
		}
	}
	for n := range b.N {
		// A tight range, as the dispatcher cuts it: from the item's first
		// event (its 500 events are consecutive: a dense item).
		seqs := e.publish(benchEvents(n)...)
		e.dispatchFrom(fmt.Sprintf("t%02d", n%benchTenants), "postgres", seqs[0], benchItem, false)
	}
	w := &wrapSink{inner: e.pg}
	cfg := e.fastConfig()
	cfg.Concurrency = benchWorkers
	stopProfile := testenv.ProfileCPU(b, name)
	b.ResetTimer()
	e.start(w, cfg)
	for w.events.Load() < int64(b.N*benchItem) {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	stopProfile()
	b.ReportMetric(float64(b.N*benchItem)/b.Elapsed().Seconds(), "events/s")
}
