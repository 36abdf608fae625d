package work_test

import (
	"testing"

	"github.com/fairwayhq/fairway/internal/work"
)

// codecItems are the work items a dispatcher sends most: a dense batch of
// 500 events stored over 4 ms (its store times listed), a batch of 500
// interleaved with another tenant's events (sequences and times listed)
// and a small tenant's single event.
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
	return map[string]work.Item{"dense500": dense, "spread500": spread, "single": single}
}

// BenchmarkItemCodec measures what a work item costs to encode (Item.Msg,
// the dispatcher) and to decode (work.Decode, every sink and observer).
func BenchmarkItemCodec(b *testing.B) {
	for _, name := range []string{"dense500", "spread500", "single"} {
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
