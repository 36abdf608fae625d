package ingest_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/ingest"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
)

// The ingest benchmark compares, in one run and against the same kind of
// embedded JetStream server (file storage): raw async publishing, the Go
// publisher of pkg/events, and the HTTP path. Every iteration is one batch
// of 500 events with 256-byte payloads; 4 batches are in flight at once.
const (
	benchBatch       = 500
	benchParallelism = 2 // × GOMAXPROCS goroutines
)

var benchPayload = `{"name":"` + strings.Repeat("x", 256-11) + `"}`

func benchEvents(tenant string, next *atomic.Int64) []events.Event {
	evs := make([]events.Event, benchBatch)
	now := time.Now().UTC()
	for i := range evs {
		evs[i] = events.Event{Tenant: tenant, ProductID: fmt.Sprintf("p-%d", next.Add(1)), Version: 1,
			Op: events.OpUpsert, OccurredAt: now, Payload: []byte(benchPayload)}
	}
	return evs
}

func reportRate(b *testing.B) {
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkIngest(b *testing.B) {
	b.Run("raw_jetstream", func(b *testing.B) {
		_, nc := testenv.NATS(b)
		js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4*benchBatch))
		if _, err := events.EnsureStream(context.Background(), js, events.StreamConfig{}); err != nil {
			b.Fatal(err)
		}
		var next atomic.Int64
		b.SetParallelism(benchParallelism)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				evs := benchEvents("bench", &next)
				futs := make([]jetstream.PubAckFuture, 0, len(evs))
				for _, e := range evs {
					m := nats.NewMsg("products.bench.upsert")
					m.Header.Set(events.HeaderMsgID, e.Key())
					m.Data = []byte(benchPayload)
					f, err := js.PublishMsgAsync(m)
					if err != nil {
						b.Error(err)
						return
					}
					futs = append(futs, f)
				}
				for _, f := range futs {
					select {
					case <-f.Ok():
					case err := <-f.Err():
						b.Error(err)
						return
					}
				}
			}
		})
		reportRate(b)
	})
	b.Run("go_publisher", func(b *testing.B) {
		_, nc := testenv.NATS(b)
		js, _ := jetstream.New(nc)
		if _, err := events.EnsureStream(context.Background(), js, events.StreamConfig{}); err != nil {
			b.Fatal(err)
		}
		pub, err := events.NewPublisher(js)
		if err != nil {
			b.Fatal(err)
		}
		var next atomic.Int64
		b.SetParallelism(benchParallelism)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				for _, r := range pub.Publish(context.Background(), benchEvents("bench", &next)) {
					if r.Err != nil {
						b.Error(r.Err)
						return
					}
				}
			}
		})
		reportRate(b)
	})
	b.Run("http", func(b *testing.B) {
		f := setup(b, ingest.Config{})
		var next atomic.Int64
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
		b.SetParallelism(benchParallelism)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			var body bytes.Buffer
			for pb.Next() {
				body.Reset()
				for _, e := range benchEvents("", &next) {
					fmt.Fprintf(&body, `{"product_id":%q,"version":1,"op":"upsert","occurred_at":"2026-11-20T10:00:00Z","payload":%s}`+"\n", e.ProductID, benchPayload)
				}
				req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/tenants/acme/events", bytes.NewReader(body.Bytes()))
				req.Header.Set("Authorization", "Bearer "+f.tokens["acme"])
				req.Header.Set("Content-Type", "application/x-ndjson")
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		})
		reportRate(b)
	})
}
