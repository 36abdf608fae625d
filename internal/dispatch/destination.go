package dispatch

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/fairwayhq/fairway/internal/dispatch/scheduler"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// destination is one destination's scheduler and loop. Destinations share
// nothing but the Dispatcher's connections, so a slow destination never
// delays another.
type destination struct {
	d     *Dispatcher
	name  string
	size  int // the most events one work item covers (Config.batchSize)
	sched *scheduler.Scheduler
	wake  chan struct{}
	win   *workWindow // nil: WORK is not kept shallow (Config.WorkWindow)

	started bool // guarded by d.mu

	// mu guards tenants and orders scheduler updates that must not
	// interleave (a doorbell's backlog hint vs. a finished batch's).
	mu      sync.Mutex
	tenants map[string]*tenantState
}

// tenantState is what the destination knows of one tenant.
type tenantState struct {
	cursor  uint64 // next sequence to dispatch; 0 = not loaded yet
	lastSeq uint64 // highest sequence the doorbell saw, or at least the last of the scan's backlog
	weight  int
	granted bool   // a grant is outstanding
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
	// for the backfill, an error); held says one is on. A hold ends at its
	// own timer, at a release's wake-up (unblock) or, for the backfill,
	// once the backfill rang enough; a timer whose hold has already ended
	// does nothing, so it cannot put back in the rounds a tenant that has
	// since found its slot limit.
	hold uint64
	held bool
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
	// bodyWaited, bodyNeed: as backWaited and backNeed, for a grant held
	// back for the refill to bring its bodies (carried).
	bodyWaited bool
	bodyNeed   int
	live       seqIndex // sequences the doorbell delivered (from Dispatcher.liveFrom)
	back       seqIndex // sequences the backfill delivered (Dispatcher.backFrom up to liveFrom-1)

	// A cursor below replayUntil is replaying (tenancy.PairState), at
	// replayRate events/s (0: Config.ReplayRate; negative: unthrottled),
	// metered by replayLim.
	replayUntil uint64
	replayRate  int
	replayLim   *rate.Limiter
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

func newDestination(d *Dispatcher, name string, sched *scheduler.Scheduler) *destination {
	x := &destination{d: d, name: name, size: d.cfg.batchSize(name), sched: sched, wake: make(chan struct{}, 1), tenants: map[string]*tenantState{}}
	if !d.cfg.DeepWork {
		x.win = newWorkWindow(d.js, name, d.cfg.GrantBatches)
	}
	return x
}

func (x *destination) key(tenant string) scheduler.Key {
	return scheduler.Key{Tenant: tenant, Dest: x.name}
}

// state returns tenant's state; x.mu must be held.
func (x *destination) state(tenant string) *tenantState {
	ts := x.tenants[tenant]
	if ts == nil {
		ts = &tenantState{weight: 1}
		// The doorbell and backfill delivered what came before without
		// this state: its index starts at what they deliver now.
		ts.live.floor, ts.back.floor = x.d.bellSeq.Load(), x.d.backSeq.Load()
		x.tenants[tenant] = ts
		if !x.d.owns(tenant, x.name) {
			x.sched.SetParked(x.key(tenant), true)
		}
	}
	return ts
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
			if !x.win.reserve() { // WORK holds enough: wait for the sinks
				<-sem
				goto wait
			}
			g, ok := x.sched.Next()
			if !ok {
				<-sem
				x.win.settle(0)
				break
			}
			x.mu.Lock()
			x.state(g.Key.Tenant).granted = true
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
				x.win.settle(x.dispatch(workCtx, g, done))
			})
		}
	wait:
		x.gauges(len(sem))
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

// dispatch carries out one grant: read the tenant's next events (sequence
// numbers only), cut them into batches of at most x.size, take a slot
// per batch and move the cursor in one statement (tenancy.DispatchMany:
// as many batches as the tenant has free slots), report to the scheduler
// and call done (the grant is over: the tenant may be granted again), then
// publish one work item per batch (pipelined grants). A crash after the
// commit and before a publish leaves a batch lease that nobody extends: it
// expires, becomes an orphan and is re-dispatched. done may be called more
// than once; run calls it when dispatch returns in any case.
func (x *destination) dispatch(ctx context.Context, g scheduler.Grant, done func()) (published int) {
	d := x.d
	k := g.Key
	if h := d.hooks.beforeDispatch; h != nil {
		h(g)
	}
	x.mu.Lock()
	ts := x.state(k.Tenant)
	from, gen, bells := ts.cursor, ts.gen, ts.bells
	x.mu.Unlock()
	if from == 0 {
		c, err := d.st.Cursor(ctx, k.Tenant, x.name)
		if err != nil {
			x.setAside(k, "cursor", err)
			return
		}
		from = c
	}
	n := g.MaxEvents
	if int64(n) > g.MaxCost {
		n = int(max(g.MaxCost, 1))
	}
	replayUntil, lim, wait := x.replayBudget(ts, from, &n)
	if wait > 0 {
		x.throttle(k, ts, wait)
		return
	}
	backDone := d.backDone.Load() // before the cut: see caughtUp
	ranges, counts, lists, first, pending, ok := x.fromIndex(ts, from, n)
	source, limited := "index", false // limited: a read readMax sized by the slots freed
	var (
		times      []*work.Times
		denseTimes chan []*work.Times // learned while the slots are taken
	)
	if !backDone && x.waitForBackfill(k, ts, from, sum(counts), ok) {
		return
	}
	var bodies [][]work.Body
	if ok {
		times, bodies = x.indexCarry(ts, ranges, counts)
		b := cutBatches{ranges, counts, lists, times, bodies, pending}
		if x.carried(k, ts, &b) {
			return
		}
		ranges, counts, lists, times, bodies, pending = b.ranges, b.counts, b.lists, b.times, b.bodies, b.pending
	}
	// A dense run comes before the replay feed: its times come from a few
	// direct gets per grant (denseTimes), where the feed's consumer
	// delivers every replayed event once more (cutting dense replays
	// without it: 23.2 → 18.0–20.7 µs of CPU per replayed event,
	// docs/dispatcher.md "Replays"). The feed is for replayed
	// ranges that are not dense, and for the rest of a dense replay whose
	// grants mostly could not learn their times (events stored too slowly
	// for work.RangeTimesSpan: the sinks would read them with headers);
	// where that feed cannot tell yet, the dense run still beats a read.
	cutDense := func() {
		ranges, counts, pending, ok = x.dense(ts, from, n)
		lists, source = make([][]uint64, len(ranges)), "dense"
		if ok {
			denseTimes = make(chan []*work.Times, 1)
			go func() { denseTimes <- x.denseTimes(ctx, k.Tenant, ranges, counts) }()
		}
	}
	feedFirst := replayUntil > from && x.feedFirst(ts, replayUntil)
	if !ok && !feedFirst {
		cutDense()
	}
	if !ok && replayUntil > from {
		ranges, counts, lists, times, first, pending, ok = x.fromFeed(ts, k.Tenant, from, n)
		source = "feed"
	}
	if !ok && feedFirst {
		cutDense()
	}
	if !ok {
		source = "read"
		var most int
		most, limited = x.readMax(ts, n)
		b, err := d.rd.Next(ctx, k.Tenant, from, 0, work.ReadOptions{Max: most, NoData: true})
		if err != nil {
			x.setAside(k, "read", err)
			return
		}
		d.m.read.WithLabelValues(x.name).Add(float64(len(b.Msgs)))
		if len(b.Msgs) > 0 {
			ranges, counts, lists = cut(b.Msgs, x.size)
			times = cutTimes(b.Msgs, counts)
			first, pending = b.Msgs[0].Time, b.Pending
		}
	}
	if len(ranges) == 0 {
		x.finish(k, from, 0, 0, bells)
		return
	}
	d.m.grants.WithLabelValues(x.name, source).Inc()
	leases, err := d.st.DispatchMany(ctx, k.Tenant, x.name, d.cfg.Holder, from, ranges)
	switch {
	case errors.Is(err, tenancy.ErrAtLimit):
		d.m.atLimit.WithLabelValues(x.name).Inc()
		x.mu.Lock()
		ts.full, ts.freed = true, 0
		ts.granted = false
		x.blockUnlessReleased(k, ts, gen)
		_ = x.sched.Done(k, 0, 0)
		x.mu.Unlock()
		return
	case errors.Is(err, tenancy.ErrCursorMoved):
		d.m.moved.WithLabelValues(x.name).Inc()
		c, cerr := d.st.Cursor(ctx, k.Tenant, x.name)
		x.mu.Lock()
		ts.granted = false
		ts.cursor = 0
		if cerr == nil {
			ts.cursor = c
			x.endFeed(ts)
		}
		_ = x.sched.Done(k, 0, 0)
		x.mu.Unlock()
		return
	case err != nil:
		x.setAside(k, "dispatch", err)
		return
	}
	if h := d.hooks.afterCommit; h != nil {
		h(leases)
	}
	// The grant ends here, before its items are published: the cursor and
	// the slots are committed, so the tenant's next grant may begin while
	// these items go out. A tenant's grants are otherwise a chain (one at
	// a time), and a flood drained no faster than one grant per commit
	// plus publish: the publish's acks were more than half of each link
	// (BenchmarkNoisyNeighbor, docs/dispatcher.md "Pipelined grants"). An
	// item that fails to publish hands its lease back as it did before.
	now := d.cfg.Clock().UTC()
	sent := sum(counts[:len(leases)])
	if lim != nil {
		lim.ReserveN(now, sent) // sent ≤ n ≤ burst: the limiter's debt paces the next grant
	}
	itemsCaughtUp := caughtUp(source, pending, backDone)
	next := leases[len(leases)-1].ToSeq + 1
	for _, c := range counts[len(leases):] {
		pending += uint64(c) // batches that found no slot wait again
	}
	x.mu.Lock()
	switch {
	case len(leases) < len(ranges):
		d.m.atLimit.WithLabelValues(x.name).Inc()
		ts.full, ts.freed = true, 0
		x.blockUnlessReleased(k, ts, gen)
	case limited:
		// The read took only the slots freed since the limit was found, and
		// got them: the tenant is at its limit again, as far as this
		// dispatcher knows, until the next release (items in flight always
		// release; a raised limit shows at the first grant not sized by
		// releases, from the index or after unblockAll).
		ts.freed = 0
		x.blockUnlessReleased(k, ts, gen)
	default:
		ts.full = false // every batch of an uncut grant got a slot: room
	}
	x.mu.Unlock()
	x.finish(k, next, sent, pending, bells)
	done()

	if denseTimes != nil {
		times = <-denseTimes
		if replayUntil > from {
			x.countDenseTimes(ts, replayUntil, !slices.Contains(times, nil))
		}
	}
	var (
		wg    sync.WaitGroup
		items atomic.Int64
	)
	defer func() { published = int(items.Load()) }()
	for i, l := range leases {
		it := work.Item{
			Tenant: k.Tenant, Dest: x.name, FromSeq: l.FromSeq, ToSeq: l.ToSeq, Count: counts[i], Seqs: lists[i], Times: times[i],
			LeaseID: l.ID, Token: l.Token, DispatchedAt: now, Replay: l.FromSeq < replayUntil,
			CaughtUp: i == len(ranges)-1 && itemsCaughtUp,
		}
		if bodies != nil && bodies[i] != nil {
			carrying := it
			carrying.Bodies, carrying.Seqs, carrying.Times = bodies[i], nil, nil
			if carrying.EncodedSize() <= d.maxItem {
				it = carrying
			} else { // too large to carry: the sink reads it, bare
				it.Times = bodyTimes(bodies[i])
			}
		}
		if it.Replay {
			d.m.replayed.WithLabelValues(x.name).Add(float64(it.Count))
		}
		wg.Go(func() {
			if err := d.publish(ctx, it); err != nil {
				d.log.Warn("work item not published; handing the batch back", "item", it.MsgID(), "err", err)
				d.m.errors.WithLabelValues(x.name, "publish").Inc()
				d.handBack(l)
				return
			}
			items.Add(1)
			d.m.items.WithLabelValues(x.name).Inc()
			d.m.events.WithLabelValues(x.name).Add(float64(it.Count))
		})
	}
	wg.Wait()
	if !first.IsZero() {
		d.m.latency.WithLabelValues(x.name).Observe(d.cfg.Clock().Sub(first).Seconds())
	}
	return
}

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
func (x *destination) holdBack(k scheduler.Key, ts *tenantState, wait time.Duration) {
	ts.granted = false
	ts.blocked, ts.held = true, true
	ts.hold++
	h := ts.hold
	x.sched.SetBlocked(k, true)
	_ = x.sched.Done(k, 0, 0)
	time.AfterFunc(wait, func() {
		x.mu.Lock()
		x.endHold(k, ts, h)
		x.mu.Unlock()
		x.kick()
	})
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

// backfillWaitMax is how long a grant held back for the start-up backfill
// (waitForBackfill) waits at most.
const backfillWaitMax = 250 * time.Millisecond

// waitForBackfill holds back a grant that would cut fewer than a batch of
// events (cut) from the start-up backfill's part of the index while the
// backfill is still on its way, and reports whether it did: the tenant is
// back in the rounds once the backfill has rung the rest of a batch of its
// events, after backfillWaitMax, or at a release of one of its slots,
// whichever comes first (a hold: holdBack). While the backfill has more of
// the backlog of a batch or more that the start-up scan counted for the
// tenant to ring, every short grant waits; after that, or for a smaller
// backlog, one does and the next cuts whatever is there. Floods whose events interleave were otherwise cut in short
// batches at the backfill's pace, a grant, a PostgreSQL statement and a
// work item each. A grant the index can cut nothing for (cutOK false)
// waits too while more of such a backlog is to be rung, instead of reading
// PRODUCTS with a subject filter, which costs the server a scan of every
// other tenant's events in between; a tenant with less than a batch
// counted (few events, in few of the stream's blocks, which the server
// skips) reads at once, so that its events do not wait for the backfill
// to reach them.
func (x *destination) waitForBackfill(k scheduler.Key, ts *tenantState, cursor uint64, cut int, cutOK bool) bool {
	if cut >= x.size || cursor >= x.d.liveFrom.Load() || cursor < x.d.backFrom.Load() {
		return false
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, dense := ts.dense.at(cursor); dense && !cutOK {
		return false // cut by arithmetic, without a read
	}
	if more := ts.backExpect - min(ts.backRung, ts.backExpect); more > 0 && ts.backExpect >= uint64(x.size) {
		// The backfill has more of the tenant's backlog to ring: wait for
		// a batch of it, however often, rather than cut short batches
		// (a grant, a statement and an item each) at the backfill's pace.
		x.d.m.backfillWaits.WithLabelValues(x.name).Inc()
		x.holdBack(k, ts, backfillWaitMax)
		ts.backNeed = min(x.size-cut, int(min(more, uint64(x.size))))
		return true
	}
	if !cutOK {
		return false // the index knows nothing of it: read
	}
	if ts.backWaited { // this tenant's last short grant waited: cut what is there
		ts.backWaited = false
		return false
	}
	ts.backWaited = true
	x.d.m.backfillWaits.WithLabelValues(x.name).Inc()
	x.holdBack(k, ts, backfillWaitMax)
	ts.backNeed = x.size - cut // bell ends the hold once it counted these down
	return true
}

// fromIndex cuts up to n of the tenant's events from cursor into batches
// using what the doorbell and the backfill delivered, without reading the
// stream. ok is false when they cannot tell: the cursor is before the point
// they cover (a replay, or a backlog older than the backfill reached), or
// they know nothing at or after the cursor yet (the backfill is still on
// its way, or the doorbell is behind or stopped) — then the caller reads
// PRODUCTS, which is always right.
func (x *destination) fromIndex(ts *tenantState, cursor uint64, n int) (ranges []tenancy.Range, counts []int, lists [][]uint64, first time.Time, rest uint64, ok bool) {
	d := x.d
	liveFrom, backFrom := d.liveFrom.Load(), d.backFrom.Load()
	size := x.size
	x.mu.Lock()
	defer x.mu.Unlock()
	switch {
	case liveFrom == 0:
		return nil, nil, nil, time.Time{}, 0, false
	case cursor >= max(liveFrom, ts.live.floor):
		// Nothing known: read, in case the doorbell is behind or stopped
		// (a scan's backlog hint brought the grant).
		ranges, counts, lists, first, rest = ts.live.takeBytes(cursor, n, size, d.itemBytes)
		return ranges, counts, lists, first, rest, len(ranges) > 0
	case backFrom == 0 || cursor < max(backFrom, ts.back.floor):
		return nil, nil, nil, time.Time{}, 0, false
	}
	// cursor is in the backfill's region [backFrom, liveFrom).
	ranges, counts, lists, first, rest = ts.back.takeBytes(cursor, n, size, d.itemBytes)
	if len(ranges) > 0 && ts.live.floor == 0 {
		// What the doorbell delivered comes after the backfill's region
		// and is still to dispatch, whether or not the backfill is done:
		// without it in rest, a grant that empties the backfill's part
		// would report no backlog, and live events rung before the grant
		// would wait for the next poll.
		rest += uint64(ts.live.count())
	}
	if len(ranges) > 0 {
		// What the backfill delivered, even while it is still on its way
		// and knows less than the grant may take: reading the rest with
		// headers cost the server more than the short batches cost, and
		// slowed the backfill further (two interleaved floods in the
		// noisy-neighbour benchmark read 178,000-210,000 events that way,
		// 600-1,100 after; 74,000 → 77,000-81,000 events/s).
		return ranges, counts, lists, first, rest, true
	}
	if !d.backDone.Load() {
		return nil, nil, nil, time.Time{}, 0, false // nothing delivered past the cursor yet: read
	}
	// The backfill is complete and the tenant has nothing left before
	// liveFrom: its next events are the live ones.
	if ts.live.floor != 0 {
		return nil, nil, nil, time.Time{}, 0, false
	}
	ranges, counts, lists, first, rest = ts.live.takeBytes(cursor, n, size, d.itemBytes)
	return ranges, counts, lists, first, rest, len(ranges) > 0
}

// readMax is how many events a grant of up to n events reads from
// PRODUCTS: n, or, while the tenant is known to be at its slot limit
// (hinted), one batch per slot released since (at least one). At the
// limit a release frees one slot, and a read of a whole grant's worth
// (GrantBatches batches, with headers) would dispatch one batch and read
// the rest again at the next release: TestReadAtLimitReadsFreedSlots read
// 1,320 events to dispatch 400 that way, 460 now.
func (x *destination) readMax(ts *tenantState, n int) (most int, hinted bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !ts.full {
		return n, false
	}
	return min(n, max(ts.freed, 1)*x.size), true
}

// denseRun says every sequence in [from, until) is the tenant's and none
// in [low, from) is: what a grant whose cursor is in [low, until) may cut
// by arithmetic. Sequences are never reused, so it stays true; a cursor
// moved below low (a replay) or past until leaves it unused. The zero
// value knows nothing.
type denseRun struct{ low, from, until uint64 }

// at is where a grant from cursor starts cutting the run; ok is false when
// the run says nothing about cursor.
func (r denseRun) at(cursor uint64) (start uint64, ok bool) {
	if cursor < r.low || cursor >= r.until {
		return 0, false
	}
	return max(cursor, r.from), true
}

// dense cuts up to n events from cursor into batches by arithmetic when
// the range from the cursor is known to hold only the tenant's events
// (tenantState.dense): a filtered read of PRODUCTS costs the server a
// count of the tenant's pending events, several milliseconds per request
// when a million of them follow (measured: 4.8 ms for 100 events at the
// start of a 1M-event backlog, 0.2 ms at its end), and it would tell
// nothing new. Events removed from the stream since (MaxAge) reach the
// sink as a short range, which it dead-letters as lost. rest is an upper
// bound of what is left.
func (x *destination) dense(ts *tenantState, cursor uint64, n int) (ranges []tenancy.Range, counts []int, rest uint64, ok bool) {
	x.mu.Lock()
	run, last := ts.dense, ts.lastSeq
	x.mu.Unlock()
	start, ok := run.at(cursor)
	if !ok || n < 1 {
		return nil, nil, 0, false
	}
	until := run.until
	end := min(until, start+uint64(n)) // exclusive
	size := uint64(x.size)
	for from := start; from < end; from += size {
		to := min(from+size, end) - 1
		ranges = append(ranges, tenancy.Range{From: from, To: to})
		counts = append(counts, int(to-from+1))
	}
	rest = until - end
	if last >= until {
		rest += last - until + 1
	}
	return ranges, counts, rest, true
}

// denseTimes learns the store times of a dense grant's events with a few
// requests (work.Reader.RangeTimes), so that its items carry them and the
// sinks read bodies without headers: a million-event flood read with
// headers made the server build a header block per event, and the
// garbage of that, collected over a heap holding a dedup entry per recent
// event, took half its CPU (BenchmarkNoisyNeighbor: 79,069 and 81,389
// events/s without the times, 171,129 to 178,150 with, FIFO 173,135 to
// 183,606). dispatch learns them while DispatchMany takes the slots. An
// item gets nil when its grant spans
// more milliseconds than the requests are worth (work.RangeTimesSpan) or
// the requests fail: its sink then reads the headers.
func (x *destination) denseTimes(ctx context.Context, tenant string, ranges []tenancy.Range, counts []int) []*work.Times {
	out := make([]*work.Times, len(ranges))
	if len(ranges) == 0 {
		return out
	}
	all, err := x.d.rd.RangeTimes(ctx, ranges[0].From, ranges[len(ranges)-1].To, work.RangeTimesSpan(sum(counts)))
	if err != nil {
		x.d.m.errors.WithLabelValues(x.name, "range_times").Inc()
		x.d.log.Warn("learning a dense grant's store times failed; its sinks read headers", "dest", x.name, "tenant", tenant, "err", err)
	}
	if all == nil {
		return out
	}
	off := 0
	for i, c := range counts {
		out[i] = &work.Times{BaseMs: all.BaseMs, OffsetsMs: all.OffsetsMs[off : off+c : off+c]}
		off += c
	}
	return out
}

// Dense replay grants whose items could not all learn their store times
// send the rest of the replay to the feed once at least denseTimelessMin
// of them did, and more than one in denseTimelessShare: a publish that
// paused now and then leaves a few wide items (about 2% of a replayed
// import in BenchmarkReplayImpact), events stored slowly leave most.
const (
	denseTimelessMin   = 4
	denseTimelessShare = 4
)

// countDenseTimes records whether a dense grant of the replay ending at
// until learned every item's store times.
func (x *destination) countDenseTimes(ts *tenantState, until uint64, learned bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	st := &ts.denseStats
	if st.until != until {
		st.until, st.grants, st.timeless, st.toFeed = until, 0, 0, false
	}
	st.grants++
	if !learned {
		st.timeless++
	}
	if st.timeless >= denseTimelessMin && st.timeless*denseTimelessShare > st.grants {
		st.toFeed = true
	}
}

// feedFirst says whether the replay ending at until has had enough dense
// grants without store times that its grants go to the feed first.
func (x *destination) feedFirst(ts *tenantState, until uint64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return ts.denseStats.until == until && ts.denseStats.toFeed
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

// cut splits a read (in sequence order) into batches of at most size
// events. Each range is tight: from its first event to its last, so a sink
// starts reading at an event of the tenant, not at the cursor; the cursor
// still moves past the last range (tenancy.DispatchMany), as no event of
// the tenant lies between the cursor and the first range or between two
// ranges. counts[i] is range i's number of events; lists[i] its sequences
// when the item should list them (listSeqs), else nil.
func cut(msgs []work.Stored, size int) (ranges []tenancy.Range, counts []int, lists [][]uint64) {
	for i := 0; i < len(msgs); i += size {
		j := min(i+size, len(msgs))
		r := tenancy.Range{From: msgs[i].Seq, To: msgs[j-1].Seq}
		ranges = append(ranges, r)
		counts = append(counts, j-i)
		var list []uint64
		if listSeqs(r, j-i) {
			for _, m := range msgs[i:j] {
				list = append(list, m.Seq)
			}
		}
		lists = append(lists, list)
	}
	return ranges, counts, lists
}

// indexCarry returns, per batch cut from the index, the bodies its
// events carry to the sink, or, for a batch the index does not hold every
// body of (that item is read from PRODUCTS), its events' store times (nil
// when the index does not know them all either). The index still holds
// what take handed out: only take trims it, and this tenant's next take
// waits for this grant to end.
func (x *destination) indexCarry(ts *tenantState, ranges []tenancy.Range, counts []int) (times []*work.Times, bodies [][]work.Body) {
	times, bodies = make([]*work.Times, len(ranges)), make([][]work.Body, len(ranges))
	x.mu.Lock()
	defer x.mu.Unlock()
	for i, r := range ranges {
		for _, ix := range []*seqIndex{&ts.live, &ts.back} {
			if bodies[i] = ix.bodies(r.From, r.To, counts[i]); bodies[i] != nil {
				break
			}
		}
		if bodies[i] != nil {
			continue
		}
		if times[i] = ts.live.times(r.From, r.To, counts[i]); times[i] == nil {
			times[i] = ts.back.times(r.From, r.To, counts[i])
		}
	}
	return times, bodies
}

// bodyTimes returns the store times of the events of bodies.
func bodyTimes(bodies []work.Body) *work.Times {
	t := &work.Times{BaseMs: bodies[0].StoredMs, OffsetsMs: make([]uint32, 0, len(bodies))}
	for _, b := range bodies {
		if !t.Add(b.StoredMs) {
			return nil
		}
	}
	return t
}

// cutTimes returns the store times of the batches cut reads from msgs
// (counts[i] messages each, in order).
func cutTimes(msgs []work.Stored, counts []int) []*work.Times {
	times := make([]*work.Times, len(counts))
	i := 0
	for b, c := range counts {
		t := &work.Times{BaseMs: msgs[i].Time.UnixMilli(), OffsetsMs: make([]uint32, 0, c)}
		for _, m := range msgs[i : i+c] {
			if m.Time.IsZero() || !t.Add(m.Time.UnixMilli()) {
				t = nil
				break
			}
		}
		times[b] = t
		i += c
	}
	return times
}

// caughtUp says whether a grant left its tenant nothing waiting, so that
// its last item may be marked work.Item.CaughtUp (a sink may then hold it
// back): pending, what the cut counted after it, is 0, and the count was
// complete. A cut from the index while the backfill is still delivering
// (backDone read before the cut) counts only what was delivered so far; a
// wrong mark throttles the tenant, a missing one only forgoes combining.
func caughtUp(source string, pending uint64, backDone bool) bool {
	return pending == 0 && (source != "index" || backDone)
}

// listSeqs says whether a batch's work item lists its sequences
// (work.Item.Seqs): a batch whose range holds other tenants' events, which
// a sink would otherwise read with a filtered scan of the range, with
// headers. A small one it reads by sequence; one over at most 4 times its
// count of sequences (tenants whose floods interleave) as the whole range
// without headers, keeping the listed events (work.RangeRead).
func listSeqs(r tenancy.Range, count int) bool {
	width := r.To - r.From + 1
	if uint64(count) >= width {
		return false // dense
	}
	return count <= work.SeqsSmall || count <= work.SeqsMax && work.RangeRead(count, width)
}

// finish reports a grant's outcome: n events dispatched, the cursor now at
// next, pending events counted by the server after the read. Doorbell rings
// that arrived after the read (bells moved on) are folded in under x.mu, so
// an event stored after the read is never forgotten; rings from before the
// read are already counted in pending.
func (x *destination) finish(k scheduler.Key, next uint64, n int, pending, bells uint64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	ts := x.state(k.Tenant)
	ts.granted = false
	ts.cursor = next
	x.endFeed(ts)
	backlog := int64(pending)
	if backlog == 0 && ts.bells != bells && ts.lastSeq >= next {
		backlog = int64(ts.lastSeq - next + 1) // events arrived after the read: an upper bound
	}
	x.sched.SetBacklog(k, backlog+int64(n), ts.weight)
	_ = x.sched.Done(k, int64(n), int64(n))
}

// setAside ends a grant that failed on an error: the tenant is blocked for
// RetryDelay so a broken dependency cannot spin the loop.
func (x *destination) setAside(k scheduler.Key, op string, err error) {
	x.d.log.Warn("dispatch failed; retrying the tenant later", "tenant", k.Tenant, "dest", x.name, "op", op, "err", err)
	x.d.m.errors.WithLabelValues(x.name, op).Inc()
	x.mu.Lock()
	x.holdBack(k, x.state(k.Tenant), x.d.cfg.RetryDelay)
	x.mu.Unlock()
}

// unblock handles the release of slots of the tenant's slots; it ends a
// hold too. It reports whether an orphan of the tenant is waiting for a
// slot.
func (x *destination) unblock(tenant string, slots int) (orphans bool) {
	x.mu.Lock()
	ts := x.tenants[tenant]
	if ts == nil {
		x.mu.Unlock()
		return false
	}
	ts.gen++
	if ts.full {
		ts.freed += max(slots, 1)
	}
	ts.held, ts.backNeed, ts.bodyNeed = false, 0, 0
	if ts.blocked {
		ts.blocked = false
		x.sched.SetBlocked(x.key(tenant), false)
	}
	orphans, ts.orphans = ts.orphans, false
	x.mu.Unlock()
	x.kick()
	return orphans
}

// unblockAll handles "notifications may have been lost".
func (x *destination) unblockAll() {
	x.mu.Lock()
	for t, ts := range x.tenants {
		ts.gen++
		ts.full = false // releases may have been missed: learn the limit again
		ts.held, ts.backNeed, ts.bodyNeed = false, 0, 0
		if ts.blocked {
			ts.blocked = false
			x.sched.SetBlocked(x.key(t), false)
		}
	}
	x.mu.Unlock()
	x.kick()
}

// bell records that tenant has an event at seq, stored at at; backfill
// says whether the backfill (not the live doorbell) delivered it.
func (x *destination) bell(tenant string, seq uint64, at time.Time, body *heldBody, backfill bool) {
	x.mu.Lock()
	ts := x.state(tenant)
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
	ts.bells++
	if seq > ts.lastSeq {
		ts.lastSeq = seq
	}
	if seq >= ts.cursor { // cursor 0 (unknown) counts too
		x.sched.SetBacklog(x.key(tenant), int64(ts.lastSeq-max(ts.cursor, 1)+1), ts.weight)
	}
	x.mu.Unlock()
	x.kick()
}

// seed applies a scan result: the tenant's cursor, weight and replay from
// PostgreSQL and its backlog as the server counted it from the tenant's
// first waiting event, first (0: none). A tenant with a grant outstanding keeps
// what its grant will report; seed then reports false.
//
// dense, when it covers p.NextSeq, is a run of the tenant's events a grant
// may cut by arithmetic (denseRun); otherwise what was known is kept while
// it covers the cursor.
func (x *destination) seed(p tenancy.PairState, backlog, first uint64, dense denseRun) bool {
	x.mu.Lock()
	ts := x.state(p.Tenant)
	ts.weight = max(p.Weight, 1)
	ts.replayUntil, ts.replayRate = p.ReplayUntil, p.ReplayRate
	if _, ok := dense.at(p.NextSeq); ok {
		ts.dense = dense
	} else if _, ok := ts.dense.at(p.NextSeq); !ok {
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
	if !x.d.backDone.Load() && ts.backExpect == 0 && first > 0 {
		ts.backFirst, ts.backExpect = first, backlog
	}
	granted := ts.granted
	if !granted {
		ts.cursor = p.NextSeq
		// Forget what was dispatched, as a grant does (take): a pair parked
		// for another dispatcher is never granted here, and its index would
		// grow with every event the doorbell rings. The live index only
		// from liveFrom on, as take does: its floor below liveFrom would
		// say it lost events it never had (fromIndex).
		if lf := x.d.liveFrom.Load(); lf != 0 && p.NextSeq >= lf {
			ts.live.trim(p.NextSeq)
		}
		ts.back.trim(p.NextSeq)
		x.sched.SetBacklog(x.key(p.Tenant), int64(backlog), ts.weight)
	}
	x.endFeed(ts)
	x.mu.Unlock()
	if backlog > 0 {
		x.kick()
	}
	return !granted
}

// granted says whether a grant of tenant is in flight.
func (x *destination) granted(tenant string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	ts := x.tenants[tenant]
	return ts != nil && ts.granted
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
