package b2b

import (
	"fmt"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/sinktest"
)

// benchTransform is the typical transform of the benchmarks, the example
// of docs/partners.md: keep upserts with a price, rename fields, pick a
// subset, convert the price to cents.
var benchTransform = Transform{
	Filter: `event.op == "upsert" && event.payload.price > 0`,
	Map: `{"sku": event.product_id, "title": event.payload.name, "price_cents": int(math.round(event.payload.price * 100.0)),
  "currency": event.payload.currency, "version": event.version}`,
}

// catalogPayload is the payload of the benchmarks' i-th product: a
// catalogue entry of about 190 bytes (name, price, currency, stock, tags,
// description).
func catalogPayload(id string, i int) []byte {
	return fmt.Appendf(nil, `{"name":"product %s","price":%d.99,"currency":"EUR","stock":%d,"tags":["garden","tools"],"description":"A sturdy product of the bench catalogue."}`,
		id, 1+i%500, i%40)
}

// BenchmarkTransform measures the typical transform on one event against
// writing the event as it is, interleaved in the same run: map/plain is
// how many times the plain encoding the transform costs.
func BenchmarkTransform(b *testing.B) {
	tr, err := benchTransform.compile()
	if err != nil {
		b.Fatal(err)
	}
	recs := make([]sink.Record, 1000)
	for i := range recs {
		recs[i] = sinktest.Records(sinktest.Upsert("acme", fmt.Sprintf("p%06d", i), 3))[0]
		recs[i].Event.Payload = catalogPayload(recs[i].Event.ProductID, i)
	}
	var buf []byte
	ev := tr.newEvent()
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
			var keep bool
			if buf, keep, err = tr.apply(buf[:0], ev, &recs[i]); err != nil || !keep {
				b.Fatal(keep, err)
			}
		}
		mapped += time.Since(start)
	}
	b.ReportMetric(float64(mapped.Nanoseconds())/float64(b.N*len(recs)), "map-ns/event")
	b.ReportMetric(float64(plain.Nanoseconds())/float64(b.N*len(recs)), "plain-ns/event")
	b.ReportMetric(mapped.Seconds()/plain.Seconds(), "map/plain")
}
