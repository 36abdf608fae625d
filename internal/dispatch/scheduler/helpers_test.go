package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dispatch/scheduler"
)

const dest = "postgres"

// unbounded is a backlog no test drains.
const unbounded = int64(1) << 40

func key(tenant string) scheduler.Key { return scheduler.Key{Tenant: tenant, Dest: dest} }

func setup(t testing.TB, cfg scheduler.Config) *scheduler.Scheduler {
	t.Helper()
	s, err := scheduler.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// fakeClock is a clock tests move by hand.
type fakeClock struct{ now time.Time }

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time          { return c.now }
func (c *fakeClock) Advance(d time.Duration) { c.now = c.now.Add(d) }

// splitmix64 is a stateless mixer: deterministic pseudo-random event costs
// that do not depend on the order in which tests peek at them.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// costRange returns a cost function giving each event of a tenant a
// pseudo-random cost in [lo, hi].
func costRange(lo, hi int64) func(seq int64) int64 {
	return func(seq int64) int64 {
		return lo + int64(splitmix64(uint64(seq))%uint64(hi-lo+1))
	}
}

func unitCost(int64) int64 { return 1 }

// syncDispatcher drives a Scheduler the way the dispatcher will, one grant
// at a time: Next, read events while the grant allows, Done.
type syncDispatcher struct {
	t      testing.TB
	s      *scheduler.Scheduler
	cost   map[string]func(seq int64) int64 // per tenant; unitCost if absent
	seq    map[string]int64                 // next event sequence per tenant
	events map[string]int64                 // events dispatched per tenant
	costs  map[string]int64                 // cost dispatched per tenant
	order  []scheduler.Grant

	// afterGrant, if set, runs after each grant's Done.
	afterGrant func(g scheduler.Grant, events, cost int64)
}

func newSyncDispatcher(t testing.TB, s *scheduler.Scheduler) *syncDispatcher {
	return &syncDispatcher{
		t: t, s: s,
		cost:   map[string]func(int64) int64{},
		seq:    map[string]int64{},
		events: map[string]int64{},
		costs:  map[string]int64{},
	}
}

// step performs one grant; false when Next had nothing.
func (d *syncDispatcher) step() (scheduler.Grant, bool) {
	d.t.Helper()
	g, ok := d.s.Next()
	if !ok {
		return g, false
	}
	if g.MaxEvents < 1 || g.MaxCost < 1 {
		d.t.Fatalf("grant %+v: MaxEvents and MaxCost must be >= 1", g)
	}
	costOf := d.cost[g.Key.Tenant]
	if costOf == nil {
		costOf = unitCost
	}
	var n int
	var spent int64
	for {
		c := costOf(d.seq[g.Key.Tenant])
		if !g.Allows(n, spent, c) {
			break
		}
		n++
		spent += c
		d.seq[g.Key.Tenant]++
	}
	if err := d.s.Done(g.Key, int64(n), spent); err != nil {
		d.t.Fatalf("Done(%v): %v", g.Key, err)
	}
	d.events[g.Key.Tenant] += int64(n)
	d.costs[g.Key.Tenant] += spent
	d.order = append(d.order, g)
	if d.afterGrant != nil {
		d.afterGrant(g, int64(n), spent)
	}
	return g, true
}

func (d *syncDispatcher) run(grants int) {
	d.t.Helper()
	for range grants {
		if _, ok := d.step(); !ok {
			d.t.Fatalf("Next: nothing dispatchable after %d grants", len(d.order))
		}
	}
}

// shares returns each tenant's fraction of the total.
func shares(m map[string]int64) map[string]float64 {
	var total int64
	for _, v := range m {
		total += v
	}
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = float64(v) / float64(total)
	}
	return out
}

// checkShares fails unless every tenant's share is within tol (relative) of
// its wanted share.
func checkShares(t testing.TB, got map[string]float64, want map[string]float64, tol float64) {
	t.Helper()
	for tenant, w := range want {
		if g := got[tenant]; g < w*(1-tol) || g > w*(1+tol) {
			t.Errorf("tenant %s: share %.4f, want %.4f ±%.0f%% (all: %v)", tenant, g, w, tol*100, fmtShares(got))
		}
	}
}

func fmtShares(m map[string]float64) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = format(v)
	}
	return out
}

func format(v float64) string { return fmt.Sprintf("%.2f%%", v*100) }
