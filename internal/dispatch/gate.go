package dispatch

import (
	"cmp"
	"time"

	"golang.org/x/time/rate"

	"github.com/fairwayhq/fairway/internal/dispatch/scheduler"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// The gate is what keeps a tenant of a destination out of the scheduler's
// rounds, and what lets it back in:
//
//   - blocked at its slot limit (a commit found no free slot) until one of
//     its slots is released (unblock), or until notifications may have
//     been lost (unblockAll);
//   - held (holdBack), costing nothing and keeping its place, until the
//     hold's timer or an earlier event ends it: the pair's dispatch rate
//     (rateBudget) or a replay's (replayBudget, throttle), a wait for the start-up backfill to
//     deliver a batch (waitForBackfill), a wait for the refill to bring
//     bodies (carried), a dependency that failed (setAside);
//   - parked: another dispatcher owns the pair (members.go).
//
// The scheduler only sees blocked or not (SetBlocked, SetParked); the
// reasons live in tenantState.

// replayBudget meters a replaying tenant (its cursor below replayUntil):
// unless its replay is unthrottled, a grant then covers one batch of at
// most ReplayBatch events, and no more than the replay's rate allows, so a
// replay is spread evenly in short steps instead of taking the machines in
// bursts. It returns replayUntil (0 when not replaying), the
// limiter to charge with what the grant dispatched (nil: not throttled),
// and how long to wait before this tenant may be granted again (0: go
// ahead with *n events).
func (x *destination) replayBudget(ts *tenantState, cursor uint64, n *int) (replayUntil uint64, lim *rate.Limiter, wait time.Duration) {
	d := x.d
	x.mu.Lock()
	defer x.mu.Unlock()
	if cursor >= ts.replayUntil {
		return 0, nil, 0
	}
	r := cmp.Or(ts.replayRate, d.cfg.ReplayRate)
	if r < 0 {
		return ts.replayUntil, nil, 0
	}
	burst := min(r, d.cfg.ReplayBatch)
	if ts.replayLim == nil || ts.replayLim.Limit() != rate.Limit(r) {
		ts.replayLim = rate.NewLimiter(rate.Limit(r), burst)
	}
	*n = min(*n, burst)
	now := d.cfg.Clock()
	if tokens := ts.replayLim.TokensAt(now); tokens < float64(*n) {
		return ts.replayUntil, nil, time.Duration((float64(*n) - tokens) / float64(r) * float64(time.Second))
	}
	return ts.replayUntil, ts.replayLim, 0
}

// rateBudget meters a pair whose dispatch rate is capped (tenantState.rate):
// a grant then covers at most one second's worth of events, and no more
// than the tokens the rate has earned since. It returns the limiter to
// charge with what the grant dispatched (nil: no cap) and how long to
// wait before the tenant may be granted again (0: go ahead with *n
// events).
func (x *destination) rateBudget(ts *tenantState, n *int) (lim *rate.Limiter, wait time.Duration) {
	x.mu.Lock()
	defer x.mu.Unlock()
	r := ts.rate
	if r <= 0 {
		ts.rateLim = nil
		return nil, 0
	}
	if ts.rateLim == nil || ts.rateLim.Limit() != rate.Limit(r) {
		ts.rateLim = rate.NewLimiter(rate.Limit(r), r)
	}
	*n = min(*n, r)
	if tokens := ts.rateLim.TokensAt(x.d.cfg.Clock()); tokens < float64(*n) {
		// Wait for a batch's worth (or what is wanted, if less) rather
		// than cut tiny batches at the rate's pace.
		want := min(*n, x.size)
		if tokens < float64(want) {
			return nil, time.Duration((float64(want) - tokens) / float64(r) * float64(time.Second))
		}
		*n = int(tokens)
	}
	return ts.rateLim, 0
}

// throttle ends a grant the replay's rate holds back: the tenant is
// held (costs nothing, keeps its place) until wait has passed.
func (x *destination) throttle(k scheduler.Key, ts *tenantState, wait time.Duration) {
	x.d.m.throttled.WithLabelValues(x.name).Inc()
	x.mu.Lock()
	x.holdBack(k, ts, wait)
	x.mu.Unlock()
}

// holdBack ends a grant that dispatched nothing and keeps the tenant out of
// the rounds for at most wait (a hold: tenantState.hold). Unlike a slot
// limit's block, a hold's end says nothing about the tenant's slots. x.mu
// must be held.
func (x *destination) holdBack(k scheduler.Key, ts *tenantState, wait time.Duration) (h uint64) {
	ts.granted = false
	h = x.hold(k, ts, wait)
	_ = x.sched.Done(k, 0, 0)
	return h
}

// hold keeps the tenant out of the rounds until its hold h, which it
// returns, ends (endHold), at the latest after wait. x.mu must be held.
func (x *destination) hold(k scheduler.Key, ts *tenantState, wait time.Duration) (h uint64) {
	ts.blocked, ts.held = true, true
	ts.hold++
	h = ts.hold
	x.sched.SetBlocked(k, true)
	time.AfterFunc(wait, func() { x.endHoldAndWake(k, ts, h) })
	return h
}

// endHoldAndWake is endHold for a caller without x.mu (a hold's timer, a
// load that came in), and wakes the destination.
func (x *destination) endHoldAndWake(k scheduler.Key, ts *tenantState, h uint64) {
	x.mu.Lock()
	x.endHold(k, ts, h)
	x.mu.Unlock()
	x.kick()
}

// endHold puts the tenant back in the rounds if hold h is still on. x.mu
// must be held.
func (x *destination) endHold(k scheduler.Key, ts *tenantState, h uint64) {
	if !ts.held || ts.hold != h {
		return // ended already; the tenant may be blocked at its limit since
	}
	ts.held, ts.backNeed, ts.bodyNeed = false, 0, 0
	ts.blocked = false
	x.sched.SetBlocked(k, false)
}

// sightWaitMax is how long a tenant first seen waits out of the rounds for
// its first-sight load at most (holdForSight, waitForSight) before it is
// granted, or tried again.
const sightWaitMax = 250 * time.Millisecond

// holdForSight keeps a tenant first seen since the scan out of the rounds
// until its cursor, weight and rate are loaded (firstSight; learned ends
// the hold), or sightWaitMax has passed, so that while thousands of
// tenants appear at once (a dispatcher's start, a sync storm), those
// still waiting for their loads take no place in the destination's
// Concurrency from a tenant whose load is in. x.mu must be held.
func (x *destination) holdForSight(ts *tenantState) {
	ts.sightHold = x.hold(x.key(ts.tenant), ts, sightWaitMax)
}

// endSightHold ends ts's holdForSight, if it is still on: its load is in,
// or failed and its grant reads the cursor. x.mu must be held.
func (x *destination) endSightHold(ts *tenantState) {
	x.endHold(x.key(ts.tenant), ts, ts.sightHold)
}

// waitForSight holds back a grant of a tenant whose first-sight load is
// still on its way (its holdForSight ended first), until loaded closes or
// sightWaitMax has passed, rather than wait for it in the grant, holding
// a place in the destination's Concurrency.
func (x *destination) waitForSight(k scheduler.Key, ts *tenantState, loaded <-chan struct{}) {
	x.mu.Lock()
	h := x.holdBack(k, ts, sightWaitMax)
	x.mu.Unlock()
	go func() {
		select {
		case <-loaded:
			x.endHoldAndWake(k, ts, h)
		case <-time.After(sightWaitMax): // holdBack's own timer ends the hold
		}
	}()
}

// backfillWaitMax is how long a grant held back for the start-up backfill
// (waitForBackfill) waits at most.
const backfillWaitMax = 250 * time.Millisecond

// backfillReadMax is the most events the start-up backfill has yet to
// ring of a tenant whose grant reads them rather than wait for it
// (waitForBackfill).
const backfillReadMax = 16

// waitForBackfill holds back a grant that would cut fewer than a batch of
// events (cut) from the start-up backfill's part of the index while the
// backfill is still on its way, and reports whether it did: the tenant is
// back in the rounds once the backfill has rung the rest of a batch of its
// events, after backfillWaitMax, or at a release of one of its slots,
// whichever comes first (a hold: holdBack). While the backfill has more of
// the backlog of a batch or more that the start-up scan counted for the
// tenant to ring, every short grant waits; after that, or for a smaller
// backlog, one does and the next cuts whatever is there. Floods whose
// events interleave were otherwise cut in short batches at the
// backfill's pace, a grant, a PostgreSQL statement and a work item each.
// But no grant the index can cut for waits while half the body budget or
// more is held: the bodies held for it would overflow the budget, and the
// backfill's later events would go without theirs. A grant the index can
// cut nothing for (cutOK false) waits too while the backfill has more
// than backfillReadMax of the tenant's counted events to ring, instead of
// reading PRODUCTS with a subject filter, which costs the server a load
// of every block holding one of them: a flood's few hundred events
// interleaved with others' are in every block of the backlog. That wait is the one a short grant
// gets. A tenant with fewer to ring (events in few of the stream's
// blocks, which the server skips) reads at once, so that its events do
// not wait for the backfill to reach them.
func (x *destination) waitForBackfill(k scheduler.Key, ts *tenantState, cursor uint64, cut int, cutOK bool) bool {
	r := x.d.parts
	if cut >= x.size || !r.backfilled(ts.part) {
		return false
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	// A state made after the backfill passed the cursor (back.floor) has
	// nothing of it to come from the backfill.
	if cursor = ts.pastGap(cursor); cursor >= r.liveFrom(ts.part) || cursor < max(r.backFrom(ts.part), ts.back.floor) {
		return false
	}
	if ts.fresh {
		return false // none of its events are the backfill's to ring
	}
	if _, dense := ts.dense.at(cursor); dense && !cutOK {
		return false // cut by arithmetic, without a read
	}
	if cutOK && x.d.bodies.pressed() {
		return false // cut what is there, which gives its bodies back
	}
	// What the backfill has yet to ring of the backlog the scan counted,
	// less what the doorbell had rung of it (backLive).
	more := ts.backExpect - min(ts.backRung+ts.backLive, ts.backExpect)
	if more > 0 && ts.backExpect >= uint64(x.size) {
		// The backfill has more of the tenant's backlog to ring: wait for
		// a batch of it, however often, rather than cut short batches
		// (a grant, a statement and an item each) at the backfill's pace.
		return x.holdForBackfill(k, ts, min(x.size-cut, int(min(more, uint64(x.size)))))
	}
	if !cutOK {
		if more <= backfillReadMax {
			return false // a few events the index knows nothing of: read them
		}
		ts.backWaited = true
		return x.holdForBackfill(k, ts, int(min(more, uint64(x.size))))
	}
	if ts.backWaited { // this tenant's last short grant waited: cut what is there
		ts.backWaited = false
		return false
	}
	ts.backWaited = true
	return x.holdForBackfill(k, ts, x.size-cut)
}

// holdForBackfill holds ts back (holdBack) until the backfill has rung
// need more of its events (bell counts backNeed down), for
// backfillWaitMax at most, and reports true; x.mu must be held.
func (x *destination) holdForBackfill(k scheduler.Key, ts *tenantState, need int) bool {
	x.d.m.backfillWaits.WithLabelValues(x.name).Inc()
	x.holdBack(k, ts, backfillWaitMax)
	ts.backNeed = need
	return true
}

// blockUnlessReleased marks k blocked at its slot limit, unless one of its
// slots was released since the grant began (gen moved on): that release's
// wake-up has already come and gone. x.mu must be held.
func (x *destination) blockUnlessReleased(k scheduler.Key, ts *tenantState, gen uint64) {
	if ts.gen == gen {
		ts.blocked = true
		x.sched.SetBlocked(k, true)
	}
}

// setAside ends a grant of ts that failed on an error: the tenant is
// blocked for RetryDelay so a broken dependency cannot spin the loop.
func (x *destination) setAside(ts *tenantState, op string, err error) {
	x.d.log.Warn("dispatch failed; retrying the tenant later", "tenant", ts.tenant, "dest", x.name, "op", op, "err", err)
	x.d.m.errors.WithLabelValues(x.name, op).Inc()
	x.mu.Lock()
	x.holdBack(x.key(ts.tenant), ts, x.d.cfg.RetryDelay)
	x.mu.Unlock()
}

// unblock handles the release of slots of the tenant's slots, which all
// its priorities share; it ends a hold too. It reports whether an orphan
// of the tenant is waiting for a slot.
func (x *destination) unblock(tenant string, slots int) (orphans bool) {
	x.mu.Lock()
	lanes := x.lanesOf(tenant)
	if len(lanes) == 0 {
		x.mu.Unlock()
		return false
	}
	for _, ts := range lanes {
		ts.gen++
		if ts.full {
			ts.freed += max(slots, 1)
		}
		ts.held, ts.backNeed, ts.bodyNeed = false, 0, 0
		if ts.blocked {
			ts.blocked = false
			x.sched.SetBlocked(x.key(tenant), false)
		}
		orphans = orphans || ts.orphans
		ts.orphans = false
	}
	x.mu.Unlock()
	x.kick()
	return orphans
}

// unblockAll handles "notifications may have been lost".
func (x *destination) unblockAll() {
	x.mu.Lock()
	for _, ts := range x.tenants {
		ts.gen++
		ts.full = false // releases may have been missed: learn the limit again
		ts.held, ts.backNeed, ts.bodyNeed = false, 0, 0
		if ts.blocked {
			ts.blocked = false
			x.sched.SetBlocked(x.key(ts.tenant), false)
		}
	}
	x.mu.Unlock()
	x.kick()
}

// bodyWaitMax is how long a grant held back for its bodies
// (waitForBodies) waits at most.
const bodyWaitMax = 250 * time.Millisecond

// carried trims a grant cut from the index while a gap is open to what
// carries its bodies: the batches, from the first, that carry them, and
// the others stay in the index for the refill. When the first lacks
// bodies that are to come from the refill, it keeps the part of it that
// has them if that is half a batch or more; otherwise a tenant with a
// batch or more waiting is held back (held true) until they have come,
// bodyWaitMax has passed or a slot is released, and its next grant after
// a wait that timed out keeps that part, however short, or goes out
// without bodies. A tenant with less waits for nothing: its sink reads
// its few events by sequence. Returning the part that has its bodies
// frees the budget the refill needs to bring the rest.
func (x *destination) carried(k scheduler.Key, ts *tenantState, b *cutBatches) (held bool) {
	keep := 0
	for keep < len(b.bodies) && b.bodies[keep] != nil {
		keep++
	}
	if keep == len(b.ranges) || !x.d.bodies.inGap(b.ranges[keep].To) {
		return false
	}
	if keep > 0 {
		b.keep(keep)
		return false
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	r := b.ranges[0]
	ix := x.indexOf(ts, r.From)
	part, last := ix.bodiedPrefix(r.From, r.To)
	switch {
	case part >= max(x.size/2, 1) || part > 0 && ts.bodyWaited:
		ts.bodyWaited = false
		b.keep(1)
		b.pending += uint64(b.counts[0] - part)
		b.ranges[0], b.counts[0], b.times[0] = tenancy.Range{From: r.From, To: last}, part, nil
		b.bodies[0] = ix.bodies(r.From, last, part)
		b.lists[0] = nil
		if listSeqs(b.ranges[0], part) {
			b.lists[0] = ix.list(b.ranges[0])
		}
		return false
	case ts.bodyWaited || ts.live.count()+ts.back.count() < x.size:
		ts.bodyWaited = false
		return false
	}
	ts.bodyWaited = true
	x.d.m.bodyWaits.WithLabelValues(x.name).Inc()
	x.holdBack(k, ts, bodyWaitMax)
	ts.bodyNeed = ix.missingBodies(r.From, r.To)
	return true
}
