package work_test

import (
	"fmt"
	"testing"

	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
)

// codecItems are the work items a dispatcher sends most: a dense batch of
// 500 events stored over 4 ms (its store times listed), a batch of 500
// interleaved with another tenant's events (sequences and times listed)
// a small tenant's single event, and the batch of 500 interleaved events
// carrying their bodies (about 220 bytes each).
func codecItems() map[string]work.Item {
	dense := work.Item{Tenant: "noisy", Dest: "postgres", FromSeq: 1_000_001, ToSeq: 1_000_500, Count: 500,
		LeaseID: "noisy/postgres/3/1234", Token: 1234, CaughtUp: false,
		Times: &work.Times{BaseMs: 1_764_000_000_000}}
	for i := range 500 {
		dense.Times.OffsetsMs = append(dense.Times.OffsetsMs, uint32(i/125))
	}
	spread := dense
	spread.ToSeq = 1_000_999
	for i := range 500 {
		spread.Seqs = append(spread.Seqs, 1_000_001+2*uint64(i))
	}
	single := work.Item{Tenant: "s042", Dest: "postgres", FromSeq: 1_234_567, ToSeq: 1_234_567, Count: 1,
		LeaseID: "s042/postgres/0/77", Token: 77, CaughtUp: true,
		Times: &work.Times{BaseMs: 1_764_000_000_000, OffsetsMs: []uint32{0}}}
	carried := work.Item{Tenant: "noisy", Dest: "postgres", FromSeq: 1_000_001, ToSeq: 1_000_999, Count: 500,
		LeaseID: "noisy/postgres/3/1234", Token: 1234}
	for i := range 500 {
		carried.Bodies = append(carried.Bodies, work.Body{Seq: 1_000_001 + 2*uint64(i), StoredMs: 1_764_000_000_000 + int64(i/125),
			Op: events.OpUpsert, Data: fmt.Appendf(nil, `{"tenant":"noisy","product_id":"sku-%06d","version":1,"op":"upsert",`+
				`"occurred_at":"2026-11-25T10:00:00.123456Z","payload":{"name":"Product %06d","brand":"Acme Co","price_cents":1999,"stock":42,"tags":["a","b"]}}`, i, i)})
	}
	return map[string]work.Item{"dense500": dense, "spread500": spread, "single": single, "carried500": carried}
}

// BenchmarkItemCodec measures what a work item costs to encode (Item.Msg,
// the dispatcher) and to decode (work.Decode, every sink and observer).
func BenchmarkItemCodec(b *testing.B) {
	for _, name := range []string{"dense500", "spread500", "single", "carried500"} {
		it := codecItems()[name]
		m, err := it.Msg()
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name+"/encode", func(b *testing.B) {
			for b.Loop() {
				if _, err := it.Msg(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(m.Data)), "bytes")
		})
		b.Run(name+"/decode", func(b *testing.B) {
			for b.Loop() {
				if _, err := work.Decode(m.Data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
