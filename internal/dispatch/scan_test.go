package dispatch_test

import (
	"sync"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dispatch"
)

// While the start-up scan counts the backlogs of the tenants the stream
// holds (a request per pair, long with thousands of tenants), a tenant
// with no event in the stream yet is served: its new event goes out while
// the probes still run, and the probed tenant's backlog once its probe
// has seeded it, each event exactly once.
func TestNewTenantServedWhileScanProbes(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Minute)
	e.tenant("old", 1, 10, pg)
	e.tenant("new", 1, 10, pg)
	seqs := map[string][]uint64{"old": e.publish("old", 3)}
	probing, release := make(chan struct{}), make(chan struct{})
	var blockOnce, releaseOnce sync.Once
	e.start(&dispatch.Config{Dests: []string{pg}}, func(d *dispatch.Dispatcher) {
		d.SetProbe(func(tenant string) {
			if tenant == "old" {
				blockOnce.Do(func() { close(probing); <-release })
			}
		})
	})
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before the dispatcher stops
	select {
	case <-probing:
	case <-e.ctx.Done():
		t.Fatal("the start-up scan never probed old's backlog")
	}
	seqs["new"] = e.publish("new", 1)
	tenantsInWork := func() map[string]int {
		n := map[string]int{}
		if last := e.workLastSeq(); last > 0 {
			for _, it := range e.workItems(1, last) {
				n[it.Tenant] += it.Count
			}
		}
		return n
	}
	e.waitFor("new's event dispatched while old's probe runs", func() bool { return tenantsInWork()["new"] == 1 })
	if got := tenantsInWork()["old"]; got != 0 {
		t.Fatalf("old dispatched %d events before its probe seeded it", got)
	}
	releaseOnce.Do(func() { close(release) })
	e.waitFor("old's backlog dispatched", func() bool { return tenantsInWork()["old"] == 3 })
	checkExactlyOnce(t, e.workItems(1, e.workLastSeq()), seqs, false)
}
