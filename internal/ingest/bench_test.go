package ingest_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/ingest"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// BenchmarkIngest measures the HTTP path end to end: batches of 500 events
// with 256-byte payloads POSTed as NDJSON, answered after JetStream acked
// every event, 4 requests in flight. pkg/events' benchmarks measure raw
// async publishing and the Go publisher on the same kind of server (file
// storage, embedded) in the same `make bench` run.
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

// BenchmarkIngestQuota measures what a tenant's quotas cost per request:
// one-event requests (the shape where a per-request cost shows most),
// 4 in flight, for a tenant without quota, with a rate quota (one
// TakeQuota statement per request), and with a rate and a backlog cap
// (the backlog counted at most once a second). No request is refused.
// Reported: requests/s and µs per request (one client's wait).
func BenchmarkIngestQuota(b *testing.B) {
	for _, c := range []struct {
		name  string
		quota tenancy.Quota
	}{
		{"none", tenancy.Quota{}},
		{"rate", tenancy.Quota{EventsPerSec: 1 << 40, BytesPerSec: 1 << 50}},
		{"rate+backlog", tenancy.Quota{EventsPerSec: 1 << 40, BytesPerSec: 1 << 50, MaxBacklog: 1 << 40}},
	} {
		b.Run(c.name, func(b *testing.B) {
			f := setup(b, ingest.Config{})
			c.quota.Tenant = "acme"
			if err := f.store.SetQuota(context.Background(), c.quota); err != nil {
				b.Fatal(err)
			}
			_, url := serve(b, f.deps, ingest.Config{SpoolDir: b.TempDir(), Logger: quietLogger()})
			var next atomic.Int64
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
			b.SetParallelism(benchParallelism)
			b.ResetTimer()
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					body := fmt.Sprintf(`{"product_id":"p-%d","version":1,"op":"upsert","occurred_at":"2026-11-20T10:00:00Z","payload":%s}`+"\n",
						next.Add(1), benchPayload)
					req, _ := http.NewRequest(http.MethodPost, url+"/v1/tenants/acme/events", strings.NewReader(body))
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
			el := time.Since(start)
			b.ReportMetric(float64(b.N)/el.Seconds(), "requests/s")
			b.ReportMetric(float64(el.Microseconds())*float64(benchParallelism*runtime.GOMAXPROCS(0))/float64(b.N), "µs/request")
		})
	}
}
