package dispatch

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/fairwayhq/fairway/internal/dispatch/scheduler"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// A grant is one turn of one tenant at one destination, which the
// scheduler hands out (scheduler.Grant) and dispatch carries out in three
// steps:
//
//   - plan: learn the cursor, see what the tenant's gate allows (a
//     replay's rate, a wait for the backfill or for bodies: gate.go) and
//     cut the next events into batches from the first source that knows
//     them (source.go: the index, a dense run, a replay feed, a read of
//     PRODUCTS);
//   - commit: take a slot per batch and move the cursor in one statement
//     (tenancy.DispatchMany: as many batches as the tenant has free
//     slots), and report the outcome to the scheduler;
//   - publish: one work item per committed batch.
//
// The grant ends at the commit, before its items are published: the
// cursor and the slots are committed, so the tenant's next grant may
// begin while these items go out (pipelined grants, docs/dispatcher.md).
// A crash after the commit and before a publish leaves a batch lease that
// nobody extends: it expires, becomes an orphan and is re-dispatched.

// grant is a planned grant: the batches cut and what their commit and
// publish need to know.
type grant struct {
	k          scheduler.Key
	ts         *tenantState
	from       uint64 // the cursor the grant starts at
	gen, bells uint64 // the tenant's release and doorbell counts when it began
	// A replaying tenant's replay ends at replayUntil (0: not replaying);
	// lim, when set, is charged with what the grant dispatches.
	replayUntil uint64
	lim         *rate.Limiter
	// rateLim, when set, is the pair's dispatch rate, charged likewise.
	rateLim  *rate.Limiter
	source   string // index, dense, feed or read
	limited  bool   // a read sized by the slots freed (readMax)
	backDone bool   // the backfill was done before the cut (caughtUp)
	first    time.Time
	// denseTimes delivers a dense grant's store times, learned while its
	// slots are taken.
	denseTimes chan []*work.Times
	cutBatches
}

// dispatch carries out one grant of the tenant's events ts holds (pick):
// plan, commit, then call done (the grant is over: the tenant may be
// granted again) and publish. done may be called more than once; run
// calls it when dispatch returns in any case.
func (x *destination) dispatch(ctx context.Context, g scheduler.Grant, ts *tenantState, done func()) (published int) {
	if h := x.d.hooks.beforeDispatch; h != nil {
		h(g)
	}
	p, ok := x.plan(ctx, g, ts)
	if !ok {
		return 0
	}
	leases, at, ok := x.commit(ctx, p)
	if !ok {
		return 0
	}
	done()
	return x.publishItems(ctx, p, leases, at)
}

// cursorOf reads ts's cursor from PostgreSQL: that of the tenant's events
// of its priority, or in a replay lane the replay's, whose end and rate
// it learns too (past the end when the pair does not replay).
func (x *destination) cursorOf(ctx context.Context, ts *tenantState) (uint64, error) {
	if !x.replay {
		return x.d.st.CursorFor(ctx, ts.tenant, x.name, ts.prio)
	}
	ps, err := x.d.st.PairState(ctx, ts.tenant, x.name)
	if err != nil {
		return 0, err
	}
	x.mu.Lock()
	ts.replayUntil, ts.replayRate = ps.ReplayUntil, ps.ReplayRate
	x.mu.Unlock()
	if !ps.Replaying() {
		return max(ps.ReplayNext, ps.ReplayUntil, 1), nil
	}
	return ps.ReplayNext, nil
}

// grantEvents is the most events a grant may dispatch: its MaxEvents, and
// its credit, counted in events here (at least one).
func grantEvents(g scheduler.Grant) int {
	return int(min(int64(g.MaxEvents), max(g.MaxCost, 1)))
}

// plan cuts the grant's batches. ok is false when the grant ended without
// any (held back, throttled, set aside after an error, or nothing to
// dispatch), its outcome reported.
func (x *destination) plan(ctx context.Context, g scheduler.Grant, ts *tenantState) (p *grant, ok bool) {
	d := x.d
	k := g.Key
	x.mu.Lock()
	p = &grant{k: k, ts: ts, from: ts.cursor, gen: ts.gen, bells: ts.bells, source: "index"}
	sighted := ts.sighted
	x.mu.Unlock()
	if p.from == 0 && sighted != nil {
		// First seen since the scan: its cursor, weight and rate are on
		// their way (firstSight), with other new tenants'.
		select {
		case <-sighted:
		default:
			x.waitForSight(k, ts, sighted)
			return nil, false
		}
		x.mu.Lock()
		p.from = ts.cursor
		x.mu.Unlock()
	}
	if p.from == 0 {
		c, err := x.cursorOf(ctx, ts)
		if err != nil {
			x.setAside(ts, "cursor", err)
			return nil, false
		}
		p.from = c
	}
	n := grantEvents(g)
	var wait time.Duration
	p.replayUntil, p.lim, wait = x.replayBudget(ts, p.from, &n)
	if x.replay && p.replayUntil <= p.from {
		x.finish(p.ts, p.from, 0, 0, p.bells) // the replay is over
		return nil, false
	}
	if wait > 0 {
		x.throttle(k, ts, wait)
		return nil, false
	}
	// The pair's dispatch rate covers all its events, of every priority
	// and its replay's: one limiter, on the live lane's state of its
	// normal events.
	rl := x
	if x.replay {
		rl = x.live
	}
	rl.mu.Lock()
	rts := rl.state(k.Tenant)
	rl.mu.Unlock()
	if p.rateLim, wait = rl.rateBudget(rts, &n); wait > 0 {
		d.m.rateLimited.WithLabelValues(x.name).Inc()
		x.mu.Lock()
		x.holdBack(k, ts, wait)
		x.mu.Unlock()
		return nil, false
	}
	p.backDone = d.parts.backDone(ts.part) // before the cut: see caughtUp
	b := &p.cutBatches
	if !x.replay { // the doorbell indexes live events only
		b.ranges, b.counts, b.lists, p.first, b.pending, ok = x.fromIndex(ts, p.from, n)
		if !p.backDone && x.waitForBackfill(k, ts, p.from, sum(b.counts), ok) {
			return nil, false
		}
		if ok {
			b.times, b.bodies = x.indexCarry(ts, b.ranges, b.counts)
			if x.carried(k, ts, b) {
				return nil, false
			}
		}
	}
	// A dense run comes before the replay feed: its times come from a few
	// direct gets per grant (denseTimes), where the feed's consumer
	// delivers every replayed event once more (docs/dispatcher.md
	// "Replays"). The feed is for replayed ranges that are not dense, and
	// for the rest of a dense replay whose grants mostly could not learn
	// their times (events stored too slowly for work.RangeTimesSpan: the
	// sinks would read them with headers); where that feed cannot tell
	// yet, the dense run still beats a read.
	cutDense := func() {
		b.ranges, b.counts, b.pending, ok = x.dense(ts, p.from, n)
		b.lists, p.source = make([][]uint64, len(b.ranges)), "dense"
		b.times, b.bodies = make([]*work.Times, len(b.ranges)), nil
		if ok {
			p.denseTimes = make(chan []*work.Times, 1)
			ranges, counts := b.ranges, b.counts
			go func() { p.denseTimes <- x.denseTimes(ctx, k.Tenant, ranges, counts) }()
		}
	}
	feedFirst := p.replayUntil > p.from && x.feedFirst(ts, p.replayUntil)
	if !ok && !feedFirst {
		cutDense()
	}
	if !ok && p.replayUntil > p.from {
		b.ranges, b.counts, b.lists, b.times, p.first, b.pending, ok = x.fromFeed(ts, k.Tenant, p.from, n)
		b.bodies, p.source = nil, "feed"
	}
	if !ok && feedFirst {
		cutDense()
	}
	if !ok {
		p.source = "read"
		var most int
		most, p.limited = x.readMax(ts, n)
		var upTo uint64 // a replay's batches end before its end
		if x.replay {
			upTo = p.replayUntil - 1
		}
		r, err := d.rd.Next(ctx, k.Tenant, p.from, upTo, work.ReadOptions{Max: most, NoData: true, Priority: ts.prio})
		if err != nil {
			x.setAside(ts, "read", err)
			return nil, false
		}
		d.m.read.WithLabelValues(x.name).Add(float64(len(r.Msgs)))
		b.bodies = nil
		if len(r.Msgs) > 0 {
			b.ranges, b.counts, b.lists = cut(r.Msgs, x.size)
			b.times = cutTimes(r.Msgs, b.counts)
			p.first, b.pending = r.Msgs[0].Time, r.Pending
		}
	}
	if len(b.ranges) == 0 && x.replay && p.source == "read" {
		// None of the tenant's events is left before the replay's end.
		if err := d.st.FinishReplay(ctx, k.Tenant, x.name, p.from, p.replayUntil); err != nil {
			x.setAside(ts, "finish replay", err)
			return nil, false
		}
		x.finish(p.ts, max(p.from, p.replayUntil), 0, 0, p.bells)
		return nil, false
	}
	if len(b.ranges) == 0 {
		x.finish(p.ts, p.from, 0, 0, p.bells)
		return nil, false
	}
	d.m.grants.WithLabelValues(x.name, p.source).Inc()
	return p, true
}

// commit takes the slots of the grant's batches and moves the cursor past
// them, and reports the outcome to the scheduler. It returns the leases
// of the batches that got a slot, and when; ok is false when none did.
func (x *destination) commit(ctx context.Context, p *grant) (leases []tenancy.Lease, at time.Time, ok bool) {
	d, k, ts := x.d, p.k, p.ts
	var err error
	if x.replay {
		leases, err = d.st.DispatchReplay(ctx, k.Tenant, x.name, d.cfg.Holder, p.from, p.ranges)
	} else {
		leases, err = d.st.DispatchPriority(ctx, k.Tenant, x.name, ts.prio, d.cfg.Holder, p.from, p.ranges)
	}
	switch {
	case errors.Is(err, tenancy.ErrAtLimit):
		d.m.atLimit.WithLabelValues(x.name).Inc()
		if h := d.hooks.atLimit; h != nil {
			h(k)
		}
		x.mu.Lock()
		ts.full, ts.freed = true, 0
		ts.granted = false
		// Blocked, the grant ends keeping the tenant's place and credit: a
		// slot limit costs it nothing. A release that came during the
		// grant (gen moved on) has had its wake-up: the tenant is
		// unblocked at once, with its place, rather than have its turn
		// end as if its events were gone (a small tenant at its one slot
		// would wait for the next round, behind every flood's quantum).
		ts.blocked = true
		x.sched.SetBlocked(k, true)
		_ = x.sched.Done(k, 0, 0)
		if ts.gen != p.gen {
			ts.blocked = false
			x.sched.SetBlocked(k, false)
		}
		x.mu.Unlock()
		return nil, at, false
	case errors.Is(err, tenancy.ErrCursorMoved):
		d.m.moved.WithLabelValues(x.name).Inc()
		c, cerr := x.cursorOf(ctx, ts)
		x.mu.Lock()
		ts.granted = false
		ts.cursor = 0 // unknown: the next seed loads it
		if cerr == nil {
			x.setCursor(ts, c)
			x.endFeed(ts)
		}
		_ = x.sched.Done(k, 0, 0)
		x.mu.Unlock()
		return nil, at, false
	case err != nil:
		x.setAside(ts, "dispatch", err)
		return nil, at, false
	}
	if h := d.hooks.afterCommit; h != nil {
		h(leases)
	}
	at = d.cfg.Clock().UTC()
	sent := sum(p.counts[:len(leases)])
	for _, lim := range []*rate.Limiter{p.lim, p.rateLim} {
		if lim != nil {
			lim.ReserveN(at, sent) // sent ≤ n ≤ burst: the limiter's debt paces the next grant
		}
	}
	p.caughtUp = caughtUp(p.source, p.pending, p.backDone)
	next := leases[len(leases)-1].ToSeq + 1
	pending := p.pending
	for _, c := range p.counts[len(leases):] {
		pending += uint64(c) // batches that found no slot wait again
	}
	x.mu.Lock()
	switch {
	case len(leases) < len(p.ranges):
		d.m.atLimit.WithLabelValues(x.name).Inc()
		ts.full, ts.freed = true, 0
		x.blockUnlessReleased(k, ts, p.gen)
	case p.limited:
		// The read took only the slots freed since the limit was found, and
		// got them: the tenant is at its limit again, as far as this
		// dispatcher knows, until the next release (items in flight always
		// release; a raised limit shows at the first grant not sized by
		// releases, from the index or after unblockAll).
		ts.freed = 0
		x.blockUnlessReleased(k, ts, p.gen)
	default:
		ts.full = false // every batch of an uncut grant got a slot: room
	}
	x.mu.Unlock()
	x.finish(p.ts, next, sent, pending, p.bells)
	return leases, at, true
}

// publishItems publishes a work item per committed batch, dispatched at
// at, and returns how many went out. A batch whose item fails to publish
// is handed back.
func (x *destination) publishItems(ctx context.Context, p *grant, leases []tenancy.Lease, at time.Time) int {
	d := x.d
	if p.denseTimes != nil {
		p.times = <-p.denseTimes
		if p.replayUntil > p.from {
			x.countDenseTimes(p.ts, p.replayUntil, !slices.Contains(p.times, nil))
		}
	}
	var (
		wg    sync.WaitGroup
		items atomic.Int64
		span  trace.Span
	)
	if d.traces != nil {
		ctx, span = d.traces.startGrant(ctx, x.name, p, leases)
	}
	for i, l := range leases {
		it := work.Item{
			Tenant: p.k.Tenant, Dest: x.name, FromSeq: l.FromSeq, ToSeq: l.ToSeq, Count: p.counts[i], Seqs: p.lists[i], Times: p.times[i],
			LeaseID: l.ID, Token: l.Token, DispatchedAt: at, Replay: l.FromSeq < p.replayUntil, Priority: p.ts.prio,
			CaughtUp: i == len(p.ranges)-1 && p.caughtUp,
		}
		var msg *nats.Msg // the item's message, when encoding it decided that it carries its bodies
		if p.bodies != nil && p.bodies[i] != nil {
			carrying := it
			carrying.Bodies, carrying.Seqs, carrying.Times = p.bodies[i], nil, nil
			m, err := carrying.Msg()
			switch {
			case err != nil: // publish reports it
				it = carrying
			case len(m.Data) <= d.maxItem:
				it, msg = carrying, m
			default: // too large to carry: the sink reads it, bare
				it.Times = bodyTimes(p.bodies[i])
			}
		}
		if it.Replay {
			d.m.replayed.WithLabelValues(x.name).Add(float64(it.Count))
		} else {
			d.m.priorities.WithLabelValues(x.name, string(it.Priority)).Add(float64(it.Count))
		}
		publish := func() {
			seq, size, err := d.publish(ctx, it, msg)
			if err != nil {
				d.log.Warn("work item not published; handing the batch back", "item", it.MsgID(), "err", err)
				d.m.errors.WithLabelValues(x.name, "publish").Inc()
				d.handBack(l)
				return
			}
			x.win.published(seq, size)
			items.Add(1)
			d.m.items.WithLabelValues(x.name).Inc()
			d.m.events.WithLabelValues(x.name).Add(float64(it.Count))
		}
		// The last item goes out on this goroutine, whose stack has
		// grown for the grant already: most grants are one item.
		if i == len(leases)-1 {
			publish()
		} else {
			wg.Go(publish)
		}
	}
	wg.Wait()
	if span != nil {
		endGrant(span, int(items.Load()))
	}
	if !p.first.IsZero() {
		d.m.latency.WithLabelValues(x.name).Observe(d.cfg.Clock().Sub(p.first).Seconds())
	}
	return int(items.Load())
}

// cutBatches are a grant's batches as cut: per batch its range, its count
// of events, its sequences when listed, its events' store times and
// bodies when known; pending counts the tenant's events after them.
type cutBatches struct {
	ranges   []tenancy.Range
	counts   []int
	lists    [][]uint64
	times    []*work.Times
	bodies   [][]work.Body
	pending  uint64
	caughtUp bool // the last batch leaves the tenant nothing waiting (work.Item.CaughtUp)
}

// keep keeps the first n batches; the others' events count as pending.
func (b *cutBatches) keep(n int) {
	for _, c := range b.counts[n:] {
		b.pending += uint64(c)
	}
	b.ranges, b.counts, b.lists, b.times, b.bodies = b.ranges[:n], b.counts[:n], b.lists[:n], b.times[:n], b.bodies[:n]
}
