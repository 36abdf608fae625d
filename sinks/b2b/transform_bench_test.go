package b2b

import (
	"fmt"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/sinktest"
)

// BenchmarkTransform measures a partner's typical map on one event
// against writing the event as it is, interleaved in the same run:
// map/plain is how many times the plain encoding the map costs.
func BenchmarkTransform(b *testing.B) {
	tr, err := Transform{Map: `{"sku": event.product_id, "title": event.payload.name, "price_cents": int(math.round(event.payload.price * 100.0)), "currency": event.payload.currency, "version": event.version}`}.compile()
	if err != nil {
		b.Fatal(err)
	}
	recs := make([]sink.Record, 1000)
	for i := range recs {
		recs[i] = sinktest.Records(sinktest.Upsert("acme", fmt.Sprintf("p%06d", i), 3))[0]
		recs[i].Event.Payload = fmt.Appendf(nil, `{"name":"product %d","price":%d.99,"currency":"EUR","stock":%d,"tags":["garden","tools"],"description":"A sturdy product of the bench catalogue."}`, i, 1+i%500, i%40)
	}
	var buf []byte
	var plain, mapped time.Duration
	for b.Loop() {
		start := time.Now()
		for i := range recs {
			_ = checkEvent(&recs[i])
			buf = appendCheckedEvent(buf[:0], &recs[i])
		}
		plain += time.Since(start)
		start = time.Now()
		for i := range recs {
			if buf, _, err = tr.apply(buf[:0], &recs[i]); err != nil {
				b.Fatal(err)
			}
		}
		mapped += time.Since(start)
	}
	b.ReportMetric(float64(mapped.Nanoseconds())/float64(b.N*len(recs)), "map-ns/event")
	b.ReportMetric(float64(plain.Nanoseconds())/float64(b.N*len(recs)), "plain-ns/event")
	b.ReportMetric(mapped.Seconds()/plain.Seconds(), "map/plain")
}
