package dispatch

import (
	"context"
	"slices"
	"sync"

	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// A state the doorbell creates after the start-up scan (a tenant new to
// the stream, or one whose events all came after the scan) knows neither
// its cursor nor its weight nor its dispatch rate: the scan and the polls
// load those for the tenants they count. firstSight loads them for the
// new states, those of many tenants in one query, so that a tenant first
// seen while thousands appear at once is scheduled at its own weight and
// dispatched at its own rate from its first events, and its first grant
// waits, out of the rounds (holdForSight), for one query shared with the
// others rather than spending a round trip of its own on its cursor.
type firstSight struct {
	mu     sync.Mutex
	queued map[*destination]*sightBatch
	closed bool // sightLoop is over: nothing is queued
	wake   chan struct{}
}

// sightBatch is what is queued for one destination: its states, and
// loaded, closed once they are loaded.
type sightBatch struct {
	states []*tenantState
	loaded chan struct{}
}

func newFirstSight() *firstSight { return &firstSight{wake: make(chan struct{}, 1)} }

// add queues ts, a state of x whose cursor is unknown, and returns what is
// closed once it is loaded (nil: it is not queued, sightLoop is over).
func (f *firstSight) add(x *destination, ts *tenantState) <-chan struct{} {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	if f.queued == nil {
		f.queued = map[*destination]*sightBatch{}
	}
	b := f.queued[x]
	if b == nil {
		b = &sightBatch{loaded: make(chan struct{})}
		f.queued[x] = b
	}
	b.states = append(b.states, ts)
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
	return b.loaded
}

// take returns what is queued and empties the queue; close says nothing
// is queued after it.
func (f *firstSight) take(close bool) map[*destination]*sightBatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queued
	f.queued, f.closed = nil, f.closed || close
	return q
}

// sightLoop loads the states firstSight queued: each time, one query per
// destination for every state of it queued since the last, whose grants
// go on once their destination's query is in. When ctx ends it lets go of
// the grants that wait for a load.
func (d *Dispatcher) sightLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			for _, b := range d.sight.take(true) {
				close(b.loaded)
			}
			return
		case <-d.sight.wake:
		}
		for x, b := range d.sight.take(false) {
			d.learn(ctx, x, b.states)
			close(b.loaded)
		}
	}
}

// learn loads the pair states of x's states and applies them (learned).
// After an error the states stay as they were and are queued again by
// their next event. A tenant id that is not one (a subject published
// around the publishers' checks) is left to its grant, whose read of the
// cursor fails and sets it aside, rather than fail the others' load.
func (d *Dispatcher) learn(ctx context.Context, x *destination, states []*tenantState) {
	tenants := make([]string, 0, len(states))
	for _, ts := range states {
		if events.ValidateTenant(ts.tenant) == nil {
			tenants = append(tenants, ts.tenant)
		}
	}
	slices.Sort(tenants)
	x.mu.Lock()
	asOf := loadedAsOf{grants: x.grants, seeds: x.seeds}
	x.mu.Unlock()
	tenants = slices.Compact(tenants)
	if h := d.hooks.sight; h != nil {
		h(x.name, tenants)
	}
	pss, err := d.st.PairStatesOf(ctx, x.name, tenants)
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("loading new tenants' pairs failed; their grants read their cursors", "dest", x.name, "tenants", len(tenants), "err", err)
			d.m.errors.WithLabelValues(x.name, "reload").Inc()
		}
		x.mu.Lock()
		for _, ts := range states {
			ts.sighted = nil
			x.endSightHold(ts) // its grant reads the cursor
		}
		x.mu.Unlock()
		x.kick()
		return
	}
	x.learned(states, pss, asOf)
}

// loadedAsOf is what learned needs to tell a read of PostgreSQL from a
// grant's outcome (destination.grants) and a seed (destination.seeds)
// that came after it.
type loadedAsOf struct{ grants, seeds uint64 }

// learned applies the pair states pss, read from PostgreSQL as of asOf,
// to states: the weight and rate of the tenant's every state in x (the
// rate is metered on its normal events' state, rateBudget) unless a seed
// set them since, and the state's cursor unless a grant set it since. (A
// grant in flight from cursor 0 waits for this load, or reads the cursor
// itself; its outcome sets the cursor either way.)
func (x *destination) learned(states []*tenantState, pss []tenancy.PairState, asOf loadedAsOf) {
	byTenant := make(map[string]tenancy.PairState, len(pss))
	for _, ps := range pss {
		byTenant[ps.Tenant] = ps
	}
	x.mu.Lock()
	for _, ts := range states {
		ps, ok := byTenant[ts.tenant]
		if !ok {
			x.endSightHold(ts) // its grant reads the cursor
			continue
		}
		x.setPairOf(ps, func(s *tenantState) bool { return s.seededAt <= asOf.seeds })
		backlog := ts.backlog
		if ts.cursor == 0 && ts.setAt <= asOf.grants {
			ts.cursor = ps.NextFor(ts.prio)
			x.forgetBelow(ts, ts.cursor)
			backlog = x.waiting(ts) // counted from the cursor now
		}
		if !ts.unseeded {
			x.setBacklog(ts, backlog) // and its weight
		}
		x.endSightHold(ts)
	}
	x.mu.Unlock()
	x.kick()
}
