package dispatch

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/fairwayhq/fairway/internal/dispatch/scheduler"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// destination is one lane of one destination: its scheduler and loop.
// Each destination has two: the live lane, which the doorbell rings and
// which moves the pairs' cursors, and the replay lane (replays), which
// dispatches operators' replays with the pairs' replay cursors and slots
// (tenancy.Rewind), so that a tenant's live events never wait behind its
// replay. Lanes share nothing but the Dispatcher's connections, so a
// slow destination (or a replay) never delays another.
type destination struct {
	d    *Dispatcher
	name string
	// replay says this is a replay lane; replays is a live lane's, live
	// a replay lane's live lane.
	replay        bool
	replays, live *destination
	size          int // the most events one work item covers (Config.batchSize)
	sched         *scheduler.Scheduler
	wake          chan struct{}
	win           *workWindow // nil: WORK is not kept shallow (Config.WorkWindow)

	started bool // guarded by d.mu

	// mu guards tenants and orders scheduler updates that must not
	// interleave (a doorbell's backlog hint vs. a finished batch's).
	// tenants holds, in a live lane, a state per tenant and priority of
	// its events (laneKey); in a replay lane, one per tenant.
	mu      sync.Mutex
	tenants map[string]*tenantState
	// ranked holds the tenants with a state of a priority other than
	// normal in a live lane: lanesOf looks only theirs up under every
	// priority, since the doorbell asks for a tenant's lanes at every event.
	ranked map[string]bool
	// grants counts the grants whose outcome set a tenant's cursor
	// (tenantState.setAt): a read of PostgreSQL taken before (asOf) must
	// not put a cursor back (seed).
	grants uint64
	// seeds counts the seeds (tenantState.seededAt): the weight and rate
	// of a read taken before one must not put them back (learned).
	seeds uint64
}

// laneKey is the key of the state of tenant's events of priority p in a
// live lane's tenants: the tenant for normal events (and in a replay
// lane, where a replay holds every priority), else "<tenant> <priority>"
// (a tenant id holds no space).
func laneKey(tenant string, p events.Priority) string {
	if p == "" || p == events.PriorityNormal {
		return tenant
	}
	return tenant + " " + string(p)
}

// tenantState is what the destination knows of one tenant's events of one
// priority (in a replay lane: of its replay). The scheduler sees the
// tenant as one flow: a grant serves its highest priority with events
// waiting (pick), and its backlog is the sum of its priorities'
// (setBacklog).
type tenantState struct {
	tenant string
	// prio is the priority of the events this state dispatches, "" in a
	// replay lane (every priority).
	prio    events.Priority
	backlog int64  // what this state last told the scheduler (setBacklog)
	told    int    // the weight it last told the scheduler with its backlog
	cursor  uint64 // next sequence to dispatch; 0 = not loaded yet
	lastSeq uint64 // highest sequence the doorbell saw, or at least the last of the scan's backlog
	weight  int
	granted bool   // a grant is outstanding
	setAt   uint64 // destination.grants when a grant's outcome last set cursor
	blocked bool   // at its slot limit (or set aside after an error)
	gen     uint64 // bumped by every release wake-up
	// full: the tenant's last grant found its slot limit; freed counts the
	// releases since. A grant that must read PRODUCTS then reads only as
	// many batches as slots were freed (at least one) instead of a whole
	// grant's worth that would mostly go unused (readMax).
	full    bool
	freed   int
	orphans bool   // an orphan of this tenant waits for a slot
	bells   uint64 // doorbell rings so far
	// hold numbers the holds that keep the tenant out of the rounds after
	// a grant that dispatched nothing (holdBack: a replay's rate, a wait
	// for the backfill, an error) or, first seen, until its first-sight
	// load is in (holdForSight); held says one is on. A hold ends at its
	// own timer, at a release's wake-up (unblock) or, for the backfill,
	// once the backfill rang enough; a timer whose hold has already ended
	// does nothing, so it cannot put back in the rounds a tenant that has
	// since found its slot limit.
	hold uint64
	held bool
	// sightHold is the hold that keeps a tenant first seen out of the
	// rounds until its first-sight load is in (holdForSight).
	sightHold uint64
	// unseeded: the start-up scan found events of the tenant of this
	// priority and has yet to finish its probes (survey.gate): the
	// doorbell indexes its events, a probe seeds the state, and its
	// backlog stays out of the rounds until every probe is done
	// (survey.open). The tenant's other priorities, and its replay lane,
	// are served meanwhile.
	unseeded bool
	// backWaited: the last short grant from the backfill's part of the
	// index was held back for it to deliver more (waitForBackfill); the
	// next short one is not, and clears it. backNeed:
	// while held, how many more of the tenant's events the backfill is to
	// ring before the wait ends (0: not held).
	backWaited bool
	backNeed   int
	// backExpect is the tenant's backlog as the start-up scan counted it
	// from its first waiting event backFirst; backRung how many of those
	// the backfill has rung so far. While it has not rung them all, a
	// short grant waits for a batch of them (waitForBackfill).
	backFirst            uint64
	backExpect, backRung uint64
	// backLive is how many of the backlog counted the doorbell had rung
	// when the count was seeded (it runs to the stream's end): the
	// backfill does not ring those.
	backLive uint64
	// bodyWaited, bodyNeed: as backWaited and backNeed, for a grant held
	// back for the refill to bring its bodies (carried).
	bodyWaited bool
	bodyNeed   int
	part       int // the tenant's partition (partitions.go)
	// gap: the tenant has no event of its priority in [gap.from, gap.to)
	// (the scan's probe from its cursor; pastGap).
	gap  struct{ from, to uint64 }
	live seqIndex // sequences the doorbell delivered (from its partition's partRead.live)
	// fresh: the tenant had no event before Dispatcher.liveFrom and the
	// doorbell rang none before this state existed, so live holds every
	// event of the tenant from its first (Dispatcher.fresh): a grant from
	// a cursor below liveFrom (1, for a tenant new to the destination)
	// cuts from live without reading PRODUCTS.
	fresh bool
	// sighted: queued for firstSight to load its cursor, weight and
	// rate; closed once it has. seededAt: destination.seeds when a seed
	// or a first-sight load last set its weight and rate (setPairOf).
	sighted  <-chan struct{}
	seededAt uint64
	back     seqIndex // sequences the backfill delivered (its partition's partRead.backFrom up to live-1)

	// In a replay lane, the replay ends before replayUntil
	// (tenancy.PairState) and runs at replayRate events/s (0:
	// Config.ReplayRate; negative: unthrottled), metered by replayLim;
	// cursor is the replay's. A live lane's replayUntil is 0.
	replayUntil uint64
	replayRate  int
	replayLim   *rate.Limiter
	// rate caps the pair's events per second (tenancy.PairState.Rate; 0:
	// no cap), metered by rateLim.
	rate    int
	rateLim *rate.Limiter
	// dense: a run of sequences that are all the tenant's (a replayed
	// import, a flood queued while the others were quiet): batches are cut
	// from it by arithmetic, without reading PRODUCTS.
	dense denseRun
	// feed learns the replayed range's sequences and store times while
	// this dispatcher replays the pair (replay_feed.go); nil: none.
	feed *replayFeed
	// denseStats counts the dense grants of the replay ending at until
	// and those whose items could not all learn their store times; toFeed
	// is set, for the rest of that replay, once too many could not
	// (countDenseTimes, feedFirst).
	denseStats struct {
		until            uint64
		grants, timeless int
		toFeed           bool
	}
}

// setPair sets what ts takes from its pair's settings: the weight (at
// least 1) and the dispatch rate.
func (ts *tenantState) setPair(p tenancy.PairState) { ts.weight, ts.rate = max(p.Weight, 1), p.Rate }

// setPairOf sets p's weight and rate on every state of p's tenant in x
// and, in a live lane, on its normal events' state, whose limiter meters
// the pair's rate (rateBudget), where fresh says p is newer than what the
// state has, and marks them seeded at x.seeds; x.mu must be held. A
// tenant whose first events are all of one priority has its rate
// metered, and capped, all the same. (A replay's grants are metered on
// the live lane's state, which the live lane's own seed sets.)
func (x *destination) setPairOf(p tenancy.PairState, fresh func(*tenantState) bool) {
	for _, s := range append(x.lanesOf(p.Tenant), x.state(p.Tenant)) {
		if fresh(s) {
			s.setPair(p)
			s.seededAt = x.seeds
		}
	}
}

// newDestination returns the live lane of destination name, scheduled by
// live, with its replay lane, scheduled by replay.
func newDestination(d *Dispatcher, name string, live, replay *scheduler.Scheduler) *destination {
	lane := func(sched *scheduler.Scheduler) *destination {
		return &destination{d: d, name: name, size: d.cfg.batchSize(name), sched: sched, wake: make(chan struct{}, 1), tenants: map[string]*tenantState{}}
	}
	x := lane(live)
	x.replays = lane(replay)
	x.replays.replay, x.replays.live = true, x
	// The replay lane needs no window: its slots bound what it has in
	// WORK.
	if !d.cfg.DeepWork {
		x.win = newWorkWindow(d.js, name, d.cfg.GrantBatches, d.cfg.WorkWithoutSink, d.m)
	}
	return x
}

// lanes returns x and its replay lane.
func (x *destination) lanes() []*destination {
	return []*destination{x, x.replays}
}

func (x *destination) key(tenant string) scheduler.Key {
	return scheduler.Key{Tenant: tenant, Dest: x.name}
}

// state returns the state of tenant's normal events (in a replay lane:
// of its replay); x.mu must be held.
func (x *destination) state(tenant string) *tenantState {
	return x.stateRinging(tenant, events.PriorityNormal, 0)
}

// stateOf returns the state of tenant's events of priority p; x.mu must
// be held.
func (x *destination) stateOf(tenant string, p events.Priority) *tenantState {
	return x.stateRinging(tenant, p, 0)
}

// stateRinging is stateOf for the doorbell ringing tenant's event at
// sequence ringing, which the caller indexes next.
func (x *destination) stateRinging(tenant string, p events.Priority, ringing uint64) *tenantState {
	p = p.Or()
	if x.replay {
		p = "" // a replay holds every priority
	}
	key := laneKey(tenant, p)
	ts := x.tenants[key]
	if ts == nil {
		ts = &tenantState{tenant: tenant, prio: p, weight: 1, part: x.d.parts.layout.PartitionOf(tenant)}
		// The doorbell and backfill delivered what came before without
		// this state: its index starts at what they deliver now, unless
		// they delivered nothing of the tenant's events of p before.
		ts.live.floor, ts.back.floor = x.d.bellSeq(ts.part), x.d.parts.backSeq(ts.part)
		if !x.replay && x.d.fresh(key, ts.part, ringing) {
			ts.fresh, ts.live.floor = true, 0
		}
		x.tenants[key] = ts
		if !x.replay && p != events.PriorityNormal {
			if x.ranked == nil {
				x.ranked = map[string]bool{}
			}
			x.ranked[tenant] = true
		}
		if !x.d.owns(tenant, x.name) {
			x.sched.SetParked(x.key(tenant), true)
		}
	}
	return ts
}

// knows says whether x has a state for tenant's events of priority p.
func (x *destination) knows(tenant string, p events.Priority) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	_, ok := x.tenants[laneKey(tenant, p)]
	return ok
}

// lanesOf returns the states of tenant this lane has: one per priority
// of its events in a live lane, its replay's in a replay lane. x.mu must
// be held.
func (x *destination) lanesOf(tenant string) []*tenantState {
	if x.replay || !x.ranked[tenant] { // one state, keyed by the tenant alone
		if ts := x.tenants[tenant]; ts != nil {
			return []*tenantState{ts}
		}
		return nil
	}
	out := make([]*tenantState, 0, len(events.Priorities))
	for _, p := range events.Priorities {
		if ts := x.tenants[laneKey(tenant, p)]; ts != nil {
			out = append(out, ts)
		}
	}
	return out
}

// setBacklog tells the scheduler ts's backlog: the tenant's flow has the
// sum of its states'. x.mu must be held.
func (x *destination) setBacklog(ts *tenantState, n int64) { x.setBacklogPlus(ts, n, 0) }

// setBacklogPlus is setBacklog telling the scheduler plus more, which
// the caller's scheduler.Done is about to take off (the events a grant
// dispatched). x.mu must be held.
func (x *destination) setBacklogPlus(ts *tenantState, n, plus int64) {
	ts.backlog, ts.told = n, ts.weight
	total := plus
	for _, s := range x.lanesOf(ts.tenant) {
		if !s.unseeded { // in the rounds once its scan is over (survey.open)
			total += s.backlog
		}
	}
	x.sched.SetBacklog(x.key(ts.tenant), total, ts.weight)
}

// pick returns the state a grant of tenant serves: its events of the
// highest priority with a backlog, high before normal before bulk (the
// normal one when none has), of those in the rounds. x.mu must be held.
func (x *destination) pick(tenant string) *tenantState {
	for _, ts := range x.lanesOf(tenant) {
		if ts.backlog > 0 && !ts.unseeded {
			return ts
		}
	}
	return x.state(tenant)
}

func (x *destination) kick() {
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

// run grants batches while Concurrency allows and sleeps on wake-ups. A
// grant holds one of the Concurrency places from its cut to its end at
// the commit (dispatch's done), not through its items' publish, so a
// flood whose publishes are slow cannot take the places of other tenants'
// grants. When loopCtx ends it stops granting and waits for grants and
// publishes in flight; those run on workCtx, which Run cancels
// ShutdownGrace later.
func (x *destination) run(loopCtx, workCtx context.Context) {
	sem := make(chan struct{}, x.d.cfg.Concurrency)
	var ops sync.WaitGroup
	defer ops.Wait()
	for {
		for loopCtx.Err() == nil {
			select {
			case sem <- struct{}{}:
			default:
				goto wait
			}
			if !x.win.room() { // WORK holds enough: wait for the sinks
				<-sem
				goto wait
			}
			g, ok := x.sched.Next()
			if !ok {
				<-sem
				break
			}
			reserved := x.win.reserve(grantEvents(g), x.size)
			x.mu.Lock()
			ts := x.pick(g.Key.Tenant)
			ts.granted = true
			x.mu.Unlock()
			ops.Go(func() {
				var once sync.Once
				done := func() {
					once.Do(func() {
						<-sem
						x.kick()
					})
				}
				defer done()
				x.dispatch(workCtx, g, ts, done)
				x.win.settle(reserved)
			})
		}
	wait:
		if !x.replay { // the destination's gauges are its live lane's
			x.gauges(len(sem))
		}
		select {
		case <-loopCtx.Done():
			return
		case <-x.wake:
		}
	}
}

func (x *destination) gauges(inFlight int) {
	s := x.sched.Stats()
	x.d.m.active.WithLabelValues(x.name).Set(float64(s.Active))
	x.d.m.blocked.WithLabelValues(x.name).Set(float64(s.Blocked))
	x.d.m.inFlight.WithLabelValues(x.name).Set(float64(inFlight))
}

// finish reports the outcome of a grant of ts: n events dispatched, the
// cursor now at next, pending events counted by the server after the
// read. Doorbell rings that arrived after the read (bells moved on) are
// folded in under x.mu, so an event stored after the read is never
// forgotten; rings from before the read are already counted in pending.
func (x *destination) finish(ts *tenantState, next uint64, n int, pending, bells uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	k := x.key(ts.tenant)
	ts.granted = false
	x.setCursor(ts, next)
	x.forgetBelow(ts, next)
	x.endFeed(ts)
	backlog := int64(pending)
	switch {
	case x.replay && next >= ts.replayUntil:
		backlog = 0 // the replay is over
	case x.replay:
		// Until the replay's cursor reaches its end, at least one more
		// grant: it dispatches the rest, or finds none left and ends the
		// replay (FinishReplay).
		backlog = max(backlog, 1)
	case backlog == 0 && ts.bells != bells:
		backlog = x.waiting(ts) // events arrived after the read
	}
	x.setBacklogPlus(ts, backlog, int64(n))
	_ = x.sched.Done(k, int64(n), int64(n))
}

// forgetBelow lets the tenant's indexes go of what lies before cursor,
// and the bodies held for it: dispatched, whichever source the grant cut
// it from (a grant that read PRODUCTS leaves the index as it was), or
// dispatched by another dispatcher. The live index only from liveFrom on,
// as take does: its floor below liveFrom would say it lost events it never
// had (fromIndex). x.mu must be held.
func (x *destination) forgetBelow(ts *tenantState, cursor uint64) {
	if lf := x.d.parts.liveFrom(ts.part); lf != 0 && cursor >= lf {
		ts.live.trim(cursor)
	}
	ts.back.trim(cursor)
}

// bell records that tenant has an event of priority p at seq, stored at
// at; backfill says whether the backfill (not the live doorbell)
// delivered it.
func (x *destination) bell(tenant string, p events.Priority, seq uint64, at time.Time, body *heldBody, backfill bool) {
	x.mu.Lock()
	var ts *tenantState
	if backfill {
		ts = x.stateOf(tenant, p)
	} else {
		ts = x.stateRinging(tenant, p, seq)
	}
	if backfill {
		if seq >= ts.backFirst {
			ts.backRung++
		}
		ts.back.addBody(seq, at, body, indexMaxRuns)
		switch { // a grant held back for the backfill (waitForBackfill)
		case ts.backNeed > 1:
			ts.backNeed--
		case ts.backNeed == 1:
			x.endHold(x.key(tenant), ts, ts.hold)
		}
	} else {
		ts.live.addBody(seq, at, body, indexMaxRuns)
	}
	if ts.cursor == 0 && ts.sighted == nil && !ts.unseeded && !x.replay && x.d.sight != nil && x.d.owns(tenant, x.name) {
		if ts.sighted = x.d.sight.add(x, ts); ts.sighted != nil {
			x.holdForSight(ts)
		}
	}
	ts.bells++
	if seq > ts.lastSeq {
		ts.lastSeq = seq
	}
	if seq >= ts.cursor && !ts.unseeded { // cursor 0 (unknown) counts too
		// Unchanged, as through most of a backfill (waiting counts what
		// the scan counted then), the scheduler has it already.
		if n := x.waiting(ts); n != ts.backlog || ts.weight != ts.told {
			x.setBacklog(ts, n)
		}
	}
	x.mu.Unlock()
	x.kick()
}

// waiting is the tenant's backlog as the destination knows it from the
// doorbell: the events its indexes hold from the cursor on, when they hold
// every one of them (a grant would cut them from the indexes, fromIndex),
// else the span from the cursor to the last sequence rung, an upper bound
// (the sequences between may be other tenants'). The scheduler orders new
// flows by it, the lightest first, so a small tenant whose few events
// interleave with floods' must not look as heavy as its span. x.mu must
// be held.
func (x *destination) waiting(ts *tenantState) int64 {
	cursor := max(ts.cursor, 1)
	if ts.lastSeq < cursor {
		return 0
	}
	span := int64(ts.lastSeq - cursor + 1)
	var n int64
	switch {
	case x.liveCovers(ts, ts.cursor):
		n = int64(ts.live.count())
	case ts.cursor == 0 || ts.live.floor != 0:
		// The cursor is unknown, or the live index does not follow on
		// from the backfill's: only the span is known.
	case x.d.parts.backDone(ts.part) && x.backCovers(ts, ts.cursor):
		// From the backfill's region on: what it delivered, then the
		// doorbell's.
		n = int64(ts.back.count() + ts.live.count())
	case x.d.parts.backfilled(ts.part) && ts.backExpect > 0 && ts.cursor <= ts.backFirst:
		// The backfill is on its way, nothing of the tenant dispatched
		// yet: what the start-up scan counted, then the doorbell's.
		n = int64(ts.backExpect) + int64(ts.live.count())
	}
	if n > 0 {
		return min(n, span)
	}
	return span
}

// seed applies a scan result for the tenant's events of priority pr: its
// cursor, weight and replay from PostgreSQL and its backlog as the server
// counted it from its first waiting event, first (0: none); in a replay
// lane, p.NextSeq is the replay's cursor and the backlog what is left of
// the replay (seedReplay). A state with a grant outstanding keeps what its
// grant will report, and one whose grant ended after p was read (asOf,
// from x.asOf before the read) keeps what that grant set: p would put its
// cursor back, and its next grant would lose the cursor check to its own
// last one. seed then reports false.
//
// dense, when it covers p.NextSeq, is a run of the tenant's events a grant
// may cut by arithmetic (denseRun); otherwise what was known is kept while
// it covers the cursor.
func (x *destination) seed(p tenancy.PairState, pr events.Priority, backlog, first uint64, dense denseRun, asOf uint64) bool {
	x.mu.Lock()
	ts := x.stateOf(p.Tenant, pr)
	next := p.NextFor(pr)
	x.seeds++
	x.setPairOf(p, func(*tenantState) bool { return true })
	if x.replay {
		ts.replayUntil, ts.replayRate = p.ReplayUntil, p.ReplayRate
	}
	if _, ok := dense.at(next); ok {
		ts.dense = dense
	} else if _, ok := ts.dense.at(next); !ok {
		ts.dense = denseRun{}
	}
	// The scan's backlog: backlog events from first, so its last is at
	// least first+backlog-1. The backfill then rings the oldest first; a
	// hint cut down to what it rang so far would make the first grants
	// short batches.
	last := first
	if first > 0 && backlog > 0 {
		last += backlog - 1
	}
	ts.lastSeq = max(ts.lastSeq, last)
	if !x.replay && first > next {
		ts.gap.from, ts.gap.to = next, first
	}
	if !x.replay && !x.d.parts.backDone(ts.part) && ts.backExpect == 0 && first > 0 {
		ts.backFirst, ts.backExpect, ts.backLive = first, backlog, uint64(ts.live.count())
	}
	granted := ts.granted || ts.setAt > asOf
	if !granted {
		ts.cursor = next
		// Forget what was dispatched, as a grant does: a pair parked for
		// another dispatcher is never granted here, and its index would
		// grow with every event the doorbell rings.
		x.forgetBelow(ts, next)
		// The doorbell may have rung events the count missed: it runs
		// while the start-up scan probes (survey.gate), and polls.
		if n := max(int64(backlog), int64(ts.live.count())); ts.unseeded {
			ts.backlog = n // the rounds learn it once every probe is done (survey.open)
		} else {
			x.setBacklog(ts, n)
		}
	}
	x.endFeed(ts)
	x.mu.Unlock()
	if backlog > 0 {
		x.kick()
	}
	return !granted
}

// asOf returns what seed needs to tell a read of PostgreSQL taken now
// from a grant that ends after it.
func (x *destination) asOf() uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.grants
}

// setCursor sets ts's cursor from a grant's outcome (x.mu held).
func (x *destination) setCursor(ts *tenantState, next uint64) {
	x.grants++
	ts.cursor, ts.setAt = next, x.grants
}

// granted says whether a grant of tenant is in flight.
func (x *destination) granted(tenant string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, ts := range x.lanesOf(tenant) {
		if ts.granted {
			return true
		}
	}
	return false
}

// markOrphan notes that an orphan of tenant waits for a slot.
func (x *destination) markOrphan(tenant string) {
	x.mu.Lock()
	x.state(tenant).orphans = true
	x.mu.Unlock()
}

func sum(xs []int) (n int) {
	for _, x := range xs {
		n += x
	}
	return n
}
