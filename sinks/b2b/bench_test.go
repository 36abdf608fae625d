package b2b_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/sinktest"
	"github.com/fairwayhq/fairway/sinks/b2b"
)

const benchBatch = 1000

// benchReceiver is the partner of both benchmarks: it reads the body and
// answers 200, so that the difference between them is the sink's own work.
func benchReceiver(b *testing.B) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	b.Cleanup(srv.Close)
	return srv
}

func benchRecords(n int) []sink.Record {
	recs := make([]sink.Record, benchBatch)
	for i := range recs {
		recs[i] = sinktest.Records(sinktest.Upsert("acme", fmt.Sprintf("p%06d", i), int64(n+1)))[0]
		recs[i].Seq = uint64(n*benchBatch + i + 1)
	}
	return recs
}

// BenchmarkB2BSink measures Sink.Apply of 1k-event batches to a local
// receiver: encoding, signing, one POST (MaxRequestBytes 4 MiB).
func BenchmarkB2BSink(b *testing.B) {
	e := setup(b)
	srv := benchReceiver(b)
	p := e.partner(b, b2b.Partner{Tenant: "acme", Name: "bench", URL: srv.URL, MaxRequestBytes: 4 << 20})
	s := e.sink(b, p.Name, b2b.Config{})
	batches := [4][]sink.Record{benchRecords(0), benchRecords(1), benchRecords(2), benchRecords(3)}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		errs, err := s.Apply(context.Background(), batches[i%4])
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range errs {
			if e != nil {
				b.Fatal(e)
			}
		}
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkBareSignedPost is the baseline of the sink, as the PostgreSQL
// and ClickHouse sinks' baselines are theirs: the same requests (body,
// webhook-id, timestamp, signature) built straight from the same records
// with json.Marshal, signed with b2b.SigningDefault.Sign (an HMAC-SHA256) and
// POSTed in a plain loop, without the sink's validation, collapse by
// product, sorting, size limits or breaker.
func BenchmarkBareSignedPost(b *testing.B) {
	srv := benchReceiver(b)
	batches := [4][]sink.Record{benchRecords(0), benchRecords(1), benchRecords(2), benchRecords(3)}
	secret := []byte(testSecret)
	client := &http.Client{}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		recs := batches[i%4]
		body := b2b.Body{Tenant: "acme", Partner: "bench", Events: make([]b2b.BodyEvent, len(recs))}
		key := sha256.New()
		var seq [8]byte
		for j, r := range recs {
			body.Events[j] = b2b.BodyEvent{Seq: r.Seq, ProductID: r.Event.ProductID, Version: r.Event.Version, Op: r.Event.Op, OccurredAt: r.Event.OccurredAt, Payload: r.Event.Payload}
			binary.BigEndian.PutUint64(seq[:], r.Seq)
			key.Write(seq[:])
		}
		raw, err := json.Marshal(body)
		if err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		req, err := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(raw))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("User-Agent", "bare")
		b2b.SigningDefault.Sign(req.Header, hex.EncodeToString(key.Sum(nil)[:16]), now, raw, secret)
		mustPost(b, client, req)
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkBareHTTPPost is the transport alone: the same bodies, encoded
// before the timer starts, POSTed unsigned in a plain loop.
func BenchmarkBareHTTPPost(b *testing.B) {
	srv := benchReceiver(b)
	var bodies [4][]byte
	for n := range bodies {
		body := b2b.Body{Tenant: "acme", Partner: "bench"}
		for _, r := range benchRecords(n) {
			body.Events = append(body.Events, b2b.BodyEvent{Seq: r.Seq, ProductID: r.Event.ProductID, Version: r.Event.Version, Op: r.Event.Op, OccurredAt: r.Event.OccurredAt, Payload: r.Event.Payload})
		}
		bodies[n], _ = json.Marshal(body)
	}
	client := &http.Client{}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		req, err := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(bodies[i%4]))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		mustPost(b, client, req)
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "events/s")
}

// mustPost sends req and reads its answer, failing b unless it is 200.
func mustPost(b *testing.B, client *http.Client, req *http.Request) {
	resp, err := client.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatal(resp.Status)
	}
}

// catalogRecords are 1k upserts with a catalogue payload.
func catalogRecords(n int) []sink.Record {
	recs := benchRecords(n)
	for i := range recs {
		recs[i].Event.Payload = b2b.CatalogPayload(recs[i].Event.ProductID, i)
	}
	return recs
}

// BenchmarkB2BSinkMapped measures the sink with the typical transform
// b2b.BenchTransform (a filter that keeps every event of the batch and a
// map) against the same sink without one, in the same run: each
// iteration applies the same 1k-event batch to a partner without a
// transform and to one with it, in turns, timing each. mapped/plain is
// the ratio of their throughputs.
func BenchmarkB2BSinkMapped(b *testing.B) {
	e := setup(b)
	srv := benchReceiver(b)
	plain := e.partner(b, b2b.Partner{Tenant: "acme", Name: "plain", URL: srv.URL, MaxRequestBytes: 4 << 20})
	mapped := e.partner(b, b2b.Partner{Tenant: "acme", Name: "mapped", URL: srv.URL, MaxRequestBytes: 4 << 20})
	if _, err := e.reg.SetTransform(context.Background(), "acme", mapped.Name, b2b.BenchTransform); err != nil {
		b.Fatal(err)
	}
	sinks := [2]*b2b.Sink{e.sink(b, plain.Name, b2b.Config{}), e.sink(b, mapped.Name, b2b.Config{})}
	batches := [4][]sink.Record{catalogRecords(0), catalogRecords(1), catalogRecords(2), catalogRecords(3)}
	var spent [2]time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for j := range sinks {
			k := (i + j) % 2 // each goes first every other iteration
			s := sinks[k]
			start := time.Now()
			errs, err := s.Apply(context.Background(), batches[i%4])
			spent[k] += time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			for _, e := range errs {
				if e != nil {
					b.Fatal(e)
				}
			}
		}
	}
	events := float64(b.N * benchBatch)
	b.ReportMetric(events/spent[0].Seconds(), "plain-events/s")
	b.ReportMetric(events/spent[1].Seconds(), "mapped-events/s")
	b.ReportMetric(spent[0].Seconds()/spent[1].Seconds(), "mapped/plain")
}
