package work_test

import (
	"context"
	"fmt"
	"slices"
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
)

// BenchmarkPublishAckUnderReads measures what a sink's reads cost other
// tenants' publishes. The server answers direct gets from the loop that
// also stores each publish to the stream and acknowledges it, so the
// events a sink has asked for and not yet received are queued ahead of
// every publish (work.ReadChunk).
//
// A server in a process of its own (testenv.BenchNATS) holds a backlog of
// FAIRWAY_BENCH_EVENTS (default 1,000,000) events of one tenant, read
// once untimed so that the first variant does not meet cold caches alone.
// Then for each variant, 16 workers on one connection (as a sink runner's
// share one) read the backlog as 500-event dense items with store times
// (ReadItem, without headers, as sinks read a flood) and hold each for
// the noisy-neighbour benchmark's apply time (1 ms + 20 µs per event),
// while 100 small tenants publish 5 events/s each (one every 2 ms, each
// publish on its own goroutine) for FAIRWAY_BENCH_WINDOW (default 10s).
// Reported per chunk size and bound of gets in flight: the small
// publishes' acknowledgement time p50/p99/max and the events read per
// second. chunk=500/in_flight=0 is one get per 500-event item (the
// dispatcher's default batch), unbounded: the reads ReadChunk bounds.
//
// Run: go test -run '^$' -bench BenchmarkPublishAckUnderReads -benchtime 1x ./internal/work/
func BenchmarkPublishAckUnderReads(b *testing.B) {
	n := testenv.EnvInt(b, "FAIRWAY_BENCH_EVENTS", 1_000_000)
	window := testenv.EnvDuration(b, "FAIRWAY_BENCH_WINDOW", 10*time.Second)
	const item, workers = 500, 16
	if n < 2*item {
		b.Fatalf("FAIRWAY_BENCH_EVENTS=%d: want at least %d", n, 2*item)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	url, _, stop := testenv.BenchNATS(b)
	defer stop()
	connect := func(name string) *nats.Conn {
		nc, err := nats.Connect(url, nats.Name(name))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		return nc
	}
	publisher := func(name string) *events.Publisher {
		js, err := jetstream.New(connect(name))
		if err != nil {
			b.Fatal(err)
		}
		pub, err := events.NewPublisher(js)
		if err != nil {
			b.Fatal(err)
		}
		return pub
	}
	js, err := jetstream.New(connect("admin"))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		b.Fatal(err)
	}
	// The backlog: sequences 1..n, all the noisy tenant's.
	var pubErr atomic.Value // the first failed publish
	pubs := make([]*events.Publisher, 4)
	for p := range pubs {
		pubs[p] = publisher(fmt.Sprintf("bulk-%d", p))
	}
	if _, _, err := benchload.Publish(ctx, pubs, n, func(int) string { return "noisy" }); err != nil {
		b.Fatalf("publish the backlog: %v", err)
	}
	testenv.SyncDisk() // its writeback must not fall into the first window

	// Read the whole backlog once, so that the first variant does not
	// meet cold block caches alone.
	readConn, trickle := connect("sink"), publisher("trickle")
	items := uint64(n / item)
	warm := work.NewReader(readConn, "")
	var warmNext atomic.Uint64
	var warmErr atomic.Value
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			times := &work.Times{BaseMs: 1_700_000_000_000, OffsetsMs: make([]uint32, item)}
			for k := warmNext.Add(1) - 1; k < items; k = warmNext.Add(1) - 1 {
				it := work.Item{Tenant: "noisy", FromSeq: k*item + 1, ToSeq: k*item + item, Count: item, Times: times}
				if got, err := warm.ReadItem(ctx, it); err != nil || len(got) != item {
					warmErr.Store(fmt.Errorf("warm-up read of %d-%d: %d events, %v", it.FromSeq, it.ToSeq, len(got), err))
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := warmErr.Load().(error); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()

	for _, lim := range []struct{ chunk, inFlight int }{{500, 0}, {work.ReadChunk, work.ReadsInFlight}, {100, 0}, {250, 4}, {500, 2}} {
		b.Run(fmt.Sprintf("chunk=%d/in_flight=%d", lim.chunk, lim.inFlight), func(b *testing.B) {
			rd := work.NewReader(readConn, "")
			work.SetReadLimits(rd, lim.chunk, lim.inFlight)
			var read atomic.Int64
			var readErr atomic.Value
			var nextItem atomic.Uint64
			done := make(chan struct{})
			var readers sync.WaitGroup
			for range workers {
				readers.Go(func() {
					times := &work.Times{BaseMs: 1_700_000_000_000, OffsetsMs: make([]uint32, item)}
					for {
						select {
						case <-done:
							return
						default:
						}
						k := nextItem.Add(1) % items
						it := work.Item{Tenant: "noisy", FromSeq: k*item + 1, ToSeq: k*item + item, Count: item, Times: times}
						got, err := rd.ReadItem(ctx, it)
						switch {
						case err != nil:
							readErr.Store(err)
							return
						case len(got) != item || !got[0].Bare || got[item-1].Seq != it.ToSeq:
							readErr.Store(fmt.Errorf("item %d-%d: %d events read (bare %v), want %d bare", it.FromSeq, it.ToSeq, len(got), len(got) > 0 && got[0].Bare, item))
							return
						}
						read.Add(item)
						time.Sleep(time.Millisecond + item*20*time.Microsecond)
					}
				})
			}

			var mu sync.Mutex
			var acks []time.Duration
			var pubs sync.WaitGroup
			tick := time.NewTicker(2 * time.Millisecond)
			start := time.Now()
			for i := 0; time.Since(start) < window; i++ {
				<-tick.C
				tenant := fmt.Sprintf("s%03d", i%100)
				pubs.Go(func() {
					t0 := time.Now()
					r := trickle.PublishOne(ctx, benchload.Event(tenant))
					d := time.Since(t0)
					if r.Err != nil {
						pubErr.Store(r.Err)
						return
					}
					mu.Lock()
					acks = append(acks, d)
					mu.Unlock()
				})
			}
			tick.Stop()
			pubs.Wait()
			elapsed, readN := time.Since(start), read.Load()
			close(done)
			readers.Wait()
			if err, _ := readErr.Load().(error); err != nil {
				b.Fatalf("read: %v", err)
			}
			if err, _ := pubErr.Load().(error); err != nil {
				b.Fatalf("publish: %v", err)
			}
			slices.Sort(acks)
			b.ReportMetric(testenv.Percentile(acks, 50), "ack_p50_ms")
			b.ReportMetric(testenv.Percentile(acks, 99), "ack_p99_ms")
			b.ReportMetric(testenv.Percentile(acks, 100), "ack_max_ms")
			b.ReportMetric(float64(readN)/elapsed.Seconds(), "read_events_per_s")
			b.ReportMetric(float64(len(acks)), "publishes")
			b.ReportMetric(0, "ns/op")
		})
	}
}
