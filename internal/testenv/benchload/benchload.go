// Package benchload makes the benchmarks' product events and publishes
// their backlogs. It is apart from testenv because pkg/events' own tests
// use testenv, and this package uses pkg/events.
package benchload

import (
	"cmp"
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairwayhq/fairway/pkg/events"
)

// Payload is a realistic small product body (about 110 bytes).
var Payload = []byte(`{"name":"Espresso machine","price":{"amount":41900,"currency":"EUR"},"tags":["kitchen","coffee"],"stock":17}`)

var product atomic.Int64

// Event returns an upsert of tenant with Payload and a product id no other
// Event call in this process returns.
func Event(tenant string) events.Event {
	return events.Event{Tenant: tenant, ProductID: "p" + strconv.FormatInt(product.Add(1), 10), Version: 1,
		Op: events.OpUpsert, OccurredAt: time.Unix(1_700_000_000, 0), Payload: Payload}
}

// Publish publishes n events, tenantOf(i) naming event i's tenant, in
// batches of 5,000 shared out among pubs (one goroutine each), and returns
// the lowest and highest sequence stored. It stops at the first failed
// publish and returns its error.
func Publish(ctx context.Context, pubs []*events.Publisher, n int, tenantOf func(i int) string) (first, last uint64, err error) {
	const chunk = 5000
	var next atomic.Int64
	var mu sync.Mutex
	first = ^uint64(0)
	var wg sync.WaitGroup
	for _, pub := range pubs {
		wg.Go(func() {
			evs := make([]events.Event, 0, chunk)
			for {
				off := int(next.Add(chunk)) - chunk
				if off >= n {
					return
				}
				evs = evs[:0]
				for i := off; i < min(n, off+chunk); i++ {
					evs = append(evs, Event(tenantOf(i)))
				}
				lo, hi := ^uint64(0), uint64(0)
				for _, r := range pub.Publish(ctx, evs) {
					if r.Err != nil {
						mu.Lock()
						err = cmp.Or(err, r.Err)
						mu.Unlock()
						next.Store(int64(n)) // the others stop at their next batch
						return
					}
					lo, hi = min(lo, r.Seq), max(hi, r.Seq)
				}
				mu.Lock()
				first, last = min(first, lo), max(last, hi)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err != nil {
		return 0, 0, err
	}
	return first, last, nil
}
