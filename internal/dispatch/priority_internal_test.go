package dispatch

import (
	"testing"

	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// A tenant is one flow whose backlog is its priorities' sum, and a grant
// serves its highest priority with events waiting: once a grant has
// dispatched the tenant's last high events, that priority has nothing
// left, and the next grant serves the normal ones.
func TestGrantsServeTheHighestPriorityWaiting(t *testing.T) {
	t.Parallel()
	d, x, sched := grantingDestination(t)
	d.readsFrom(0, 1)
	x.seed(tenancy.PairState{Tenant: "acme", NextSeq: 1, HighNext: 1, BulkNext: 1, Weight: 1}, events.PriorityNormal, 30, 1, denseRun{}, x.asOf())
	x.seed(tenancy.PairState{Tenant: "acme", NextSeq: 1, HighNext: 1, BulkNext: 1, Weight: 1}, events.PriorityBulk, 500, 31, denseRun{}, x.asOf())
	x.seed(tenancy.PairState{Tenant: "acme", NextSeq: 1, HighNext: 1, BulkNext: 1, Weight: 1}, events.PriorityHigh, 5, 900, denseRun{}, x.asOf())
	x.mu.Lock()
	high := x.pick("acme")
	x.mu.Unlock()
	if high.prio != events.PriorityHigh {
		t.Fatalf("a grant serves the tenant's %s events, want high", high.prio)
	}
	// The grant dispatched all 5 high events: none pending after it.
	if _, ok := sched.Next(); !ok {
		t.Fatal("no grant")
	}
	x.finish(high, 905, 5, 0, high.bells)
	x.mu.Lock()
	next := x.pick("acme")
	x.mu.Unlock()
	if high.backlog != 0 || next.prio != events.PriorityNormal {
		t.Fatalf("after the high events: their backlog %d, next grant serves %s; want 0 and normal", high.backlog, next.prio)
	}
	if st := sched.Stats(); st.Active != 1 || st.InFlight != 0 {
		t.Fatalf("scheduler %+v after the grant: want the tenant waiting again, one flow", st)
	}
}
