package dispatch

import (
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fairwayhq/fairway/internal/dispatch/scheduler"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Test hooks; see hooks.
func (d *Dispatcher) SetBeforeDispatch(f func(scheduler.Grant))   { d.hooks.beforeDispatch = f }
func (d *Dispatcher) SetAfterCommit(f func([]tenancy.Lease))      { d.hooks.afterCommit = f }
func (d *Dispatcher) SetOnBell(f func(tenant string, seq uint64)) { d.hooks.onBell = f }
func (d *Dispatcher) SetFeedHeld(f func(n int))                   { d.hooks.feedHeld = f }
func (d *Dispatcher) SetAtLimit(f func(scheduler.Key))            { d.hooks.atLimit = f }
func (d *Dispatcher) SetTakeOver(f func(parts []int))             { d.hooks.takeOver = f }
func (d *Dispatcher) SetProbe(f func(tenant string))              { d.hooks.probe = f }
func (d *Dispatcher) SetBackfill(f func(parts []int, over <-chan struct{})) {
	d.hooks.backfill = f
}
func (d *Dispatcher) SetBackfillBell(f func(seq uint64)) { d.hooks.backfillBell = f }
func (d *Dispatcher) SetSight(f func(dest string, tenants []string)) {
	d.hooks.sight = f
}

// Feeds returns how many replay feeds are running.
func (d *Dispatcher) Feeds() float64 { return testutil.ToFloat64(d.m.feeds) }

// FeedErrors returns how many of dest's replay feeds gave up.
func (d *Dispatcher) FeedErrors(dest string) float64 {
	return testutil.ToFloat64(d.m.errors.WithLabelValues(dest, "replay_feed"))
}

// Grants returns how many grants of dest took their sequences from source
// ("index", "feed", "dense" or "read").
func (d *Dispatcher) PriorityEvents(dest string, p events.Priority) float64 {
	return testutil.ToFloat64(d.m.priorities.WithLabelValues(dest, string(p)))
}

func (d *Dispatcher) Grants(dest, source string) float64 {
	return testutil.ToFloat64(d.m.grants.WithLabelValues(dest, source))
}

// ReadEvents returns how many events dest's grants read from PRODUCTS.
func (d *Dispatcher) ReadEvents(dest string) float64 {
	return testutil.ToFloat64(d.m.read.WithLabelValues(dest))
}

// Throttled returns how many grants of dest a replay's rate held back.
func (d *Dispatcher) Throttled(dest string) float64 {
	return testutil.ToFloat64(d.m.throttled.WithLabelValues(dest))
}

// Members returns the dispatchers alive at d's last heartbeat.
func (d *Dispatcher) Members() []string {
	if m := d.members.Load(); m != nil {
		return m.members
	}
	return nil
}

// Moved returns how many of dest's dispatch attempts another dispatcher won.
func (d *Dispatcher) Moved(dest string) float64 {
	return testutil.ToFloat64(d.m.moved.WithLabelValues(dest))
}

// Owner is owner, for tests.
var Owner = owner

// Wakeups returns how many wake-ups came from source ("doorbell",
// "backfill", ...).
func (d *Dispatcher) Wakeups(source string) float64 {
	return testutil.ToFloat64(d.m.wakeups.WithLabelValues(source))
}

// Pruned returns how many batch-log rows d deleted.
func (d *Dispatcher) Pruned() float64 { return testutil.ToFloat64(d.m.pruned) }

// Recovered returns how many of dest's orphaned batches were re-dispatched.
func (d *Dispatcher) Recovered(dest string) float64 {
	return testutil.ToFloat64(d.m.recovered.WithLabelValues(dest))
}

// Refilled returns how many event bodies the refill read again.
func (d *Dispatcher) Refilled() float64 { return testutil.ToFloat64(d.m.refilled) }

// BodyWaits returns how many grants of dest waited for the refill.
func (d *Dispatcher) BodyWaits(dest string) float64 {
	return testutil.ToFloat64(d.m.bodyWaits.WithLabelValues(dest))
}

// Weight returns the weight dest's scheduler uses for tenant (0: the
// tenant is unknown there).
func (d *Dispatcher) Weight(dest, tenant string) int {
	return tenantField(d, dest, tenant, func(ts *tenantState) int { return ts.weight })
}

// tenantField reads f of dest's state of tenant under its lock (zero when
// either is unknown).
func tenantField[T any](d *Dispatcher, dest, tenant string, f func(*tenantState) T) (v T) {
	d.mu.Lock()
	x := d.dests[dest]
	d.mu.Unlock()
	if x == nil {
		return v
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if ts := x.tenants[tenant]; ts != nil {
		v = f(ts)
	}
	return v
}

// RateLimited returns how many grants of dest a pair's dispatch rate held
// back.
func (d *Dispatcher) RateLimited(dest string) float64 {
	return testutil.ToFloat64(d.m.rateLimited.WithLabelValues(dest))
}

// BellSwitches is how often the live doorbell changed its pull.
func (d *Dispatcher) BellSwitches() uint64 { return uint64(testutil.ToFloat64(d.m.bellSwitches)) }

// BodiesHeld is the bytes of event bodies the dispatcher holds.
func (d *Dispatcher) BodiesHeld() int64 { return d.bodies.used.Load() }

// Running says the dispatcher's doorbell has started and its start-up
// backfill is done.
func (d *Dispatcher) Running() bool {
	if d.liveFrom.Load() == 0 {
		return false
	}
	for _, p := range d.parts.ownedNow() {
		if !d.parts.backDone(p) {
			return false
		}
	}
	return true
}

// Releases returns how many release wake-ups of (tenant, dest) the
// dispatcher has handled.
func (d *Dispatcher) Releases(dest, tenant string) uint64 {
	return tenantField(d, dest, tenant, func(ts *tenantState) uint64 { return ts.gen })
}

// readsFrom sets up d, an unpartitioned stream's dispatcher, as if its
// backfill started at backFrom (0: none) and its doorbell at liveFrom.
func (d *Dispatcher) readsFrom(backFrom, liveFrom uint64) {
	if d.parts == nil {
		d.parts = newPartReads(events.Layout{})
	}
	d.liveFrom.Store(liveFrom)
	d.parts.parts[0].live.Store(liveFrom)
	d.parts.parts[0].backFrom.Store(backFrom)
}

// Partitions returns the partitions d reads.
func (d *Dispatcher) Partitions() []int { return d.parts.ownedNow() }

// Reading is the partitions this dispatcher's readers read, sorted.
func (d *Dispatcher) Reading() []int {
	return slices.Sorted(maps.Keys(d.readersNow()))
}

// OwnedParts is ownedParts, for tests.
var OwnedParts = ownedParts

// WorkWindow and WorkWaiting are the work window's gauges for dest.
func (d *Dispatcher) WorkWindow(dest string) float64 {
	return testutil.ToFloat64(d.m.workWindow.WithLabelValues(dest))
}

func (d *Dispatcher) WorkWaiting(dest string) float64 {
	return testutil.ToFloat64(d.m.workWaiting.WithLabelValues(dest))
}

// BackfillsQueued is the backfills waiting their turn.
func (d *Dispatcher) BackfillsQueued() float64 { return testutil.ToFloat64(d.m.backfillQueue) }
