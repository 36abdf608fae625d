package dispatch_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// A tenant first seen after the dispatcher started (none of its events
// were in the stream at the start-up scan) is dispatched at its pair's
// rate from its first events, not from the next poll's (its weight:
// TestWeightedSharesInterleaved/live).
func TestNewTenantRate(t *testing.T) {
	t.Parallel()
	const rate, events = 200, 1200
	e := setup(t, time.Minute)
	e.tenant("paced", 1, 100, pg)
	if err := e.st.SetDestRate(e.ctx, "paced", pg, rate); err != nil {
		t.Fatal(err)
	}
	var log commitLog
	e.startSink(pg, 4, nil, func() time.Duration { return 0 })
	d := e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: 50, PollInterval: time.Hour}, log.hook)
	e.waitFor("the dispatcher running", d.Running)
	e.publish("paced", events)
	e.waitFor("the events dispatched", func() bool { n, _, _ := log.total(); return n >= events })
	log.checkRate(t, rate)
}

// A tenant first seen after start joins the rounds once its pair is
// loaded, so its first grant does not hold a grant's place while the load
// runs: with one place and the load held, a known tenant's new event is
// dispatched all the same, and the new tenant's once the load is in.
func TestNewTenantHoldsNoGrantPlaceWhileLoading(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Minute)
	e.tenant("known", 1, 10, pg)
	e.tenant("fresh", 1, 10, pg)
	e.publish("known", 1)
	var (
		mu        sync.Mutex
		committed = map[string]int{}
	)
	count := func(tenant string) int { mu.Lock(); defer mu.Unlock(); return committed[tenant] }
	loading, held := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(held) }) }
	e.startSink(pg, 2, nil, func() time.Duration { return 0 })
	e.start(&dispatch.Config{Dests: []string{pg}, Concurrency: 1, PollInterval: time.Hour}, func(d *dispatch.Dispatcher) {
		d.SetAfterCommit(func(ls []tenancy.Lease) {
			mu.Lock()
			defer mu.Unlock()
			for _, l := range ls {
				committed[l.Tenant] += int(l.ToSeq - l.FromSeq + 1)
			}
		})
		d.SetSight(func(tenants []string) {
			if slices.Contains(tenants, "fresh") {
				close(loading)
				<-held
			}
		})
	})
	t.Cleanup(release) // before the dispatcher stops: it waits for the load
	e.waitFor("the known tenant's first event dispatched", func() bool { return count("known") == 1 })
	e.publish("fresh", 1)
	select {
	case <-loading:
	case <-time.After(30 * time.Second):
		t.Fatal("the new tenant's pair was never loaded")
	}
	e.publish("known", 1)
	testenv.Eventually(t, 15*time.Second, "the known tenant's new event dispatched while the new tenant's pair loads", func() error {
		if n := count("known"); n != 2 {
			return fmt.Errorf("%d of its events dispatched", n)
		}
		return nil
	})
	if n := count("fresh"); n != 0 {
		t.Fatalf("the new tenant had %d events dispatched before its pair was loaded", n)
	}
	release()
	e.waitFor("the new tenant's event dispatched once its pair is loaded", func() bool { return count("fresh") == 1 })
}
