package work_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/testenv/benchload"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
)

// BenchmarkSparseItemRead compares the two ways a sink reads an item
// without bodies whose range holds other tenants' events, as ReadItem
// takes them: a scan of the range with the tenant's subject filter, with
// headers (an item that does not list its sequences), and a lookup by
// sequence per listed event (work.Item.Seqs), without headers (the item
// carries its events' store times, as a dispatcher's does).
// For each spread s, the tenant has 100 events, each followed by s-1
// events of another tenant, so the item spans about 100·s sequences. A
// server in a process of its own (testenv.BenchNATS) serves the reads;
// reported per item: the server's CPU (server_us/item) and the time the
// read took (ns/op).
//
// Run: go test -run '^$' -bench BenchmarkSparseItemRead ./internal/work/
func BenchmarkSparseItemRead(b *testing.B) {
	const count = 100
	spreads := []int{8, 64, 512, 2048}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	url, child, stop := testenv.BenchNATS(b)
	defer stop()
	if child == nil {
		b.Fatal("FAIRWAY_BENCH_NATS=embedded: this benchmark reads the CPU of a server in a process of its own")
	}
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		b.Fatal(err)
	}
	pub, err := events.NewPublisher(js)
	if err != nil {
		b.Fatal(err)
	}
	items := map[int]work.Item{}
	for _, s := range spreads {
		tenant := fmt.Sprintf("sparse%d", s)
		var seqs []uint64
		for start := 0; start < count*s; start += 5000 {
			evs := make([]events.Event, 0, 5000)
			for i := start; i < min(count*s, start+5000); i++ {
				t := "fill"
				if i%s == 0 {
					t = tenant
				}
				evs = append(evs, benchload.Event(t))
			}
			for i, r := range pub.Publish(ctx, evs) {
				if r.Err != nil {
					b.Fatal(r.Err)
				}
				if evs[i].Tenant == tenant {
					seqs = append(seqs, r.Seq)
				}
			}
		}
		times := &work.Times{BaseMs: 1_700_000_000_000, OffsetsMs: make([]uint32, count)}
		items[s] = work.Item{Tenant: tenant, FromSeq: seqs[0], ToSeq: seqs[len(seqs)-1], Count: count, Seqs: seqs, Times: times}
	}
	rd := work.NewReader(nc, "")
	for _, s := range spreads {
		for _, how := range []string{"scan", "lookups"} {
			b.Run(fmt.Sprintf("spread=%d/%s", s, how), func(b *testing.B) {
				it := items[s]
				read := rd.ReadItem
				if how == "scan" {
					it.Seqs, it.Times = nil, nil
					read = rd.ReadItemHeaders
				}
				cpu0, _ := child.CPU()
				for b.Loop() {
					got, err := read(ctx, it)
					if err != nil || len(got) != count {
						b.Fatalf("%d events read, %v", len(got), err)
					}
				}
				cpu1, _ := child.CPU()
				b.ReportMetric(float64((cpu1-cpu0).Microseconds())/float64(b.N), "server_us/item")
			})
		}
	}
}
