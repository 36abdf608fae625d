package dispatch

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// scan learns every tenant's backlog from the stream itself, without a
// consumer per tenant: stream info with a subjects filter lists the
// tenants that have events and of which priorities (one paged request),
// PostgreSQL gives every cursor and weight of a destination (one query),
// and one batched direct get per (tenant, destination, priority),
// ScanParallelism at a time, counts the events of that priority at or
// after its cursor (the reply's Nats-Num-Pending). It returns
// the stream's last sequence before the scan began — the doorbell starts
// right after it, so nothing stored during the scan is missed — and the
// oldest event waiting in any (tenant, destination) (0: none), where the
// backfill may start, and the tenants' priorities (laneKey) that have
// events up to lastSeq. It scans the tenants of parts, the partitions
// this dispatcher reads (every one of an unpartitioned stream).
//
// Why not the direct get's multi_last on products.>: nats-server 2.15
// answers it for at most 1,024 subjects (413 Too Many Results beyond), i.e.
// about 500 tenants; the design is for 10,000.
func (d *Dispatcher) scan(ctx context.Context, stream jetstream.Stream, parts []int) (lastSeq uint64, wait waiting, present map[string]bool, err error) {
	sc, err := d.survey(ctx, stream, parts)
	if err != nil {
		return 0, nil, nil, err
	}
	if wait, err = d.probeAll(ctx, sc); err != nil {
		return 0, nil, nil, err
	}
	return sc.lastSeq, wait, sc.present, nil
}

// survey is a scan's first half, a few requests whatever the tenants:
// the stream's last sequence and its tenants (stream info), their
// destinations and the destinations' cursors (PostgreSQL). Its second
// half, probeAll, counts each pair's backlog. At start-up, Run serves
// the tenants that had no event up to lastSeq between the two (gate):
// the probes take one request per pair, long with thousands of tenants.
func (d *Dispatcher) survey(ctx context.Context, stream jetstream.Stream, parts []int) (*survey, error) {
	sc := &survey{start: time.Now(), present: map[string]bool{}, asOf: map[*destination]uint64{},
		states: map[string]map[string]tenancy.PairState{}}
	filters := d.parts.filters(parts)
	if filters == nil {
		filters = []string{events.SubjectWildcard}
	}
	if len(parts) == 0 {
		filters = []string{""} // the stream's last sequence only
	}
	tenants := map[string][]events.Priority{}
	for i, f := range filters {
		var opts []jetstream.StreamInfoOpt
		if f != "" {
			opts = append(opts, jetstream.WithSubjectFilter(f))
		}
		info, err := stream.Info(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("dispatch: scan %s: %w", d.cfg.Stream, err)
		}
		if i == 0 {
			sc.lastSeq = info.State.LastSeq
		}
		for subj := range info.State.Subjects {
			if t, _, p, ok := parseSubject(subj); ok && !sc.present[laneKey(t, p)] {
				sc.present[laneKey(t, p)] = true
				tenants[t] = append(tenants[t], p)
			}
		}
	}
	for t, ps := range tenants {
		for _, x := range d.destsOf(ctx, t, true) {
			for i, p := range ps {
				sc.probes = append(sc.probes, scanProbe{x, t, p, i == 0})
			}
		}
	}
	for _, x := range d.allLanes() {
		sc.asOf[x] = x.asOf()
	}
	for _, x := range d.allDests() {
		ps, err := d.st.PairStates(ctx, x.name)
		if err != nil {
			return nil, fmt.Errorf("dispatch: scan: %w", err)
		}
		m := make(map[string]tenancy.PairState, len(ps))
		for _, p := range ps {
			m[p.Tenant] = p
		}
		sc.states[x.name] = m
	}
	var err error
	if sc.streamFirst, err = d.checkStream(ctx, stream); err != nil { // after the cursors: see tenancy.CheckStream
		return nil, err
	}
	return sc, nil
}

// survey is what a scan's first half learned, for its second (probeAll).
type survey struct {
	start       time.Time
	lastSeq     uint64
	present     map[string]bool // laneKey of the tenants' priorities with events up to lastSeq
	probes      []scanProbe
	asOf        map[*destination]uint64 // x.asOf before the cursors were read (seed)
	states      map[string]map[string]tenancy.PairState
	streamFirst uint64
}

// scanProbe is one pair's backlog to count, in one of its priorities.
type scanProbe struct {
	x      *destination
	tenant string
	prio   events.Priority
	first  bool // the pair's first probe, which seeds its replay lane too
}

// gate keeps the backlogs the survey found (a tenant's events of one
// priority) out of the rounds until every probe is done and the backfill
// queued (open): the doorbell indexes their new events meanwhile. A grant
// before then would read PRODUCTS for a backlog the backfill is about to
// deliver, and the first tenants probed would have rounds of their own
// before the others joined.
func (sc *survey) gate() { sc.each(func(x *destination, ts *tenantState) { ts.unseeded = true }) }

// open puts the tenants gate kept out into the rounds, with the backlog
// their probes counted and the events the doorbell rang since.
func (sc *survey) open() {
	opened := map[*destination]bool{}
	sc.each(func(x *destination, ts *tenantState) {
		if ts.unseeded {
			ts.unseeded = false
			x.setBacklog(ts, max(ts.backlog, int64(ts.live.count())))
			opened[x] = true
		}
	})
	for x := range opened {
		x.kick()
	}
}

// each calls f on the state of every pair and priority the survey
// found, holding its destination's lock.
func (sc *survey) each(f func(*destination, *tenantState)) {
	for _, p := range sc.probes {
		p.x.mu.Lock()
		f(p.x, p.x.stateOf(p.tenant, p.prio))
		p.x.mu.Unlock()
	}
}

// probeAll is a scan's second half: one batched direct get per pair and
// priority the survey found, ScanParallelism at a time, seeding each. It
// returns where each partition's backfill may start.
func (d *Dispatcher) probeAll(ctx context.Context, sc *survey) (wait waiting, err error) {
	wait = waiting{}
	var (
		wg       sync.WaitGroup
		sem      = make(chan struct{}, d.cfg.ScanParallelism)
		mu       sync.Mutex
		firstErr error
	)
	for _, p := range sc.probes {
		ps, known := sc.states[p.x.name][p.tenant]
		if !known {
			ps = tenancy.PairState{Tenant: p.tenant, NextSeq: 1, Weight: 1}
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if h := d.hooks.probe; h != nil {
				h(p.tenant)
			}
			cursor := ps.NextFor(p.prio)
			backlog, first, err := d.probe(ctx, p.tenant, p.prio, cursor)
			var run denseRun
			if err == nil {
				d.noteBehind(p.x, p.tenant, cursor, sc.streamFirst, backlog)
				run, err = d.denseBacklog(ctx, p.tenant, p.prio, cursor, backlog, first)
			}
			if err == nil && p.first {
				_, err = d.seedReplay(ctx, p.x.replays, ps, sc.asOf[p.x.replays])
			}
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
				return
			}
			if first > 0 && run.until == 0 {
				// The tenant's first waiting event, not its cursor: a
				// cursor far behind it (1, for a tenant new to the
				// destination) would have the backfill deliver every
				// other tenant's events in between. A backlog that is one
				// dense run up to the tenant's last event needs no
				// backfill: its last was read after lastSeq, so the
				// tenant has no event in between.
				mu.Lock()
				wait.note(d.parts.layout.PartitionOf(p.tenant), laneKey(p.tenant, p.prio), first, backlog)
				mu.Unlock()
			}
			p.x.seed(ps, p.prio, backlog, first, run, sc.asOf[p.x])
		})
	}
	wg.Wait()
	d.m.scanSecond.Observe(time.Since(sc.start).Seconds())
	if firstErr != nil {
		return nil, fmt.Errorf("dispatch: scan: %w", firstErr)
	}
	d.log.Debug("backlog scan done", "probes", len(sc.probes), "took", time.Since(sc.start))
	return wait, nil
}

// fresh says whether the live index of a tenant state made now holds every
// event of its tenant and priority (key: laneKey): it had none up to the
// start-up scan's last sequence (before), and the doorbell has rung none
// since, or only the one at sequence ringing, which the caller indexes
// next (0: none). One rung before its state existed (the tenant had no
// destination yet) is not fresh: those events are only in PRODUCTS. Nor
// is one of a partition the doorbell has not delivered since it started
// (part: partitions.go).
func (d *Dispatcher) fresh(key string, part int, ringing uint64) bool {
	lf := d.liveFrom.Load()
	if lf == 0 || d.before == nil || d.before[key] || d.parts.liveFrom(part) != lf {
		return false
	}
	first, rung := d.rung.Load(key)
	return !rung || (ringing != 0 && first.(uint64) == ringing)
}

// probe counts tenant's events of priority p ("": all) at or after cursor
// with one batched direct get (no data) and returns the first one's
// sequence (0: none).
func (d *Dispatcher) probe(ctx context.Context, tenant string, p events.Priority, cursor uint64) (backlog, first uint64, err error) {
	b, err := d.rd.Next(ctx, tenant, cursor, 0, work.ReadOptions{Max: 1, NoData: true, Priority: p})
	if err != nil {
		return 0, 0, err
	}
	if len(b.Msgs) > 0 {
		first = b.Msgs[0].Seq
	}
	return uint64(len(b.Msgs)) + b.Pending, first, nil
}

// reloadPair picks up an operator's change to (tenant, dest) — a replay
// started or cancelled, a cursor reset (tenancy.Released.Cursor), a new
// weight — at once instead of at the next poll: it reloads the pair from
// PostgreSQL into both lanes and probes their backlogs. While a grant of
// the tenant is in flight in a lane its outcome would overwrite the
// reload, so that lane tries again once the grant is done.
func (d *Dispatcher) reloadPair(ctx context.Context, tenant, dest string) {
	d.mu.Lock()
	x := d.dests[dest]
	d.mu.Unlock()
	if x == nil {
		return // not a destination of this dispatcher (yet): the next poll sees it
	}
	for _, l := range x.lanes() {
		if err := d.reloadLane(ctx, l, tenant); err != nil {
			if ctx.Err() == nil {
				d.log.Warn("reloading a changed pair failed; the next poll picks it up", "tenant", tenant, "dest", dest, "err", err)
				d.m.errors.WithLabelValues(dest, "reload").Inc()
			}
			return
		}
	}
}

// reloadLane is reloadPair for one lane.
func (d *Dispatcher) reloadLane(ctx context.Context, x *destination, tenant string) error {
	for ctx.Err() == nil {
		if x.granted(tenant) {
			// Its outcome would overwrite the reload: no reads until it is done.
			sleepCtx(ctx, 20*time.Millisecond)
			continue
		}
		asOf := x.asOf()
		ps, err := d.st.PairState(ctx, tenant, x.name)
		if err != nil {
			return err
		}
		if x.replay {
			if seeded, err := d.seedReplay(ctx, x, ps, asOf); err != nil || seeded {
				return err
			}
			continue // a grant began between the reads and the seed
		}
		seeded := true
		for _, p := range events.Priorities {
			cursor := ps.NextFor(p)
			backlog, first, err := d.probe(ctx, tenant, p, cursor)
			if err != nil {
				return err
			}
			dense, err := d.denseBacklog(ctx, tenant, p, cursor, backlog, first)
			if err != nil {
				return err
			}
			// A priority never seen here is added only with a backlog: a
			// pair new to this dispatcher (a partner just added) may have
			// events of it in the stream already.
			if backlog > 0 || p == events.PriorityNormal || x.knows(tenant, p) {
				seeded = x.seed(ps, p, backlog, first, dense, asOf) && seeded
			}
		}
		if seeded {
			return nil
		}
		// A grant began between the reads and a seed: try again.
	}
	return ctx.Err()
}

// sleepCtx waits for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// seedReplay seeds the replay lane x with ps's replay: its cursor, end
// and rate, and what is left of it, the tenant's events in [ReplayNext,
// ReplayUntil), as a dense run when every sequence there is the tenant's
// (then cut by arithmetic). A pair not replaying leaves the lane: it is
// seeded with nothing left if the lane knows it, and not added otherwise.
// Two probes per replaying pair: from its replay cursor and from its end.
// seeded is false when a grant of the tenant began in the lane meanwhile
// (destination.seed).
func (d *Dispatcher) seedReplay(ctx context.Context, x *destination, ps tenancy.PairState, asOf uint64) (seeded bool, err error) {
	rp := ps
	rp.NextSeq = max(ps.ReplayNext, 1)
	if !ps.Replaying() {
		x.mu.Lock()
		_, known := x.tenants[ps.Tenant]
		x.mu.Unlock()
		if !known {
			return true, nil
		}
		rp.NextSeq = max(rp.NextSeq, ps.ReplayUntil)
		return x.seed(rp, "", 0, 0, denseRun{}, asOf), nil
	}
	backlog, first, err := d.probe(ctx, ps.Tenant, "", rp.NextSeq)
	if err != nil {
		return false, err
	}
	after, _, err := d.probe(ctx, ps.Tenant, "", ps.ReplayUntil)
	if err != nil {
		return false, err
	}
	left := backlog - min(backlog, after)
	var dense denseRun
	if first == rp.NextSeq && left == ps.ReplayUntil-rp.NextSeq {
		dense = denseRun{low: rp.NextSeq, from: rp.NextSeq, until: ps.ReplayUntil}
	}
	// At least one grant while it runs, even with none of the tenant's
	// events left: that grant ends it (FinishReplay).
	return x.seed(rp, "", max(left, 1), first, dense, asOf), nil
}

// denseBacklog returns the backlog of tenant's events of priority p as
// one dense run, from its first waiting event through its last event,
// when no other event lies among them (a flood queued while the others were quiet): grants
// then cut it by arithmetic, and the backfill need not deliver it. Else the
// zero run. backlog and first are the probe at cursor; backlogs under a
// batch are not checked (a grant reads them in one request anyway).
//
// Two more requests: the tenant's last sequence (multi_last), then the
// count of its events after that. backlog - after is at most the number of
// the tenant's events in [first, last] (after was counted later: events
// stored in between only lower it), so when it equals last - first + 1
// every sequence there is the tenant's. A tenant still publishing may so
// fail the check; it is then cut from the index.
func (d *Dispatcher) denseBacklog(ctx context.Context, tenant string, p events.Priority, cursor, backlog, first uint64) (denseRun, error) {
	if first == 0 || backlog < uint64(d.cfg.BatchSize) {
		return denseRun{}, nil
	}
	last, err := d.rd.LastSeq(ctx, tenant, p)
	if err != nil || last < first || last-first+1 > backlog {
		return denseRun{}, err
	}
	after, _, err := d.probe(ctx, tenant, p, last+1)
	if err != nil {
		return denseRun{}, err
	}
	if backlog < after || backlog-after != last-first+1 {
		return denseRun{}, nil
	}
	return denseRun{low: cursor, from: first, until: last + 1}, nil
}

// startBackfill starts the backfill of parts from sequence from through
// until (none when from is past until), marked already (markBackfill),
// and marks their index exact for that region once it is delivered
// (partRead). The channel it returns is closed when the backfill is over:
// delivered, or ctx ended (at once when there is none).
//
// A backfill filtered on a partition ends at an event past until, or at
// one with nothing pending after it: with no event of the partition from
// from through until it would wait for the partition's next event, and
// hold up every backfill queued behind it (backfillQueue). One direct get
// finds the partition's first event first; none in the region is nothing
// to backfill.
func (d *Dispatcher) startBackfill(ctx context.Context, from, until uint64, parts []int) (<-chan struct{}, error) {
	if f := d.parts.filters(parts); from <= until && len(f) == 1 {
		first, ok, err := d.rd.FirstOn(ctx, f[0], from)
		if err != nil {
			return nil, err
		}
		if !ok || first > until {
			from = until + 1
		}
	}
	if from > until || len(parts) == 0 {
		d.backfillOver(parts)
		return closedChan, nil
	}
	_, over, err := d.startDoorbell(ctx, from, until, parts)
	if h := d.hooks.backfill; h != nil && err == nil {
		h(parts, over)
	}
	return over, err
}

// backfillOver records that parts have nothing (more) to backfill: their
// index is exact from their backfill's start on.
func (d *Dispatcher) backfillOver(parts []int) {
	for _, p := range parts {
		d.parts.parts[p].backDone.Store(true)
	}
}

// closedChan is a closed channel: a wait that is already over.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// markBackfill records that parts are backfilled from sequence from on,
// before their backfill delivers anything: their tenants' grants wait for
// it rather than read PRODUCTS (waitForBackfill).
func (d *Dispatcher) markBackfill(from uint64, parts []int) {
	for _, p := range parts {
		d.parts.parts[p].backSeq.Store(0)
		d.parts.parts[p].backFrom.Store(from)
	}
}

// waiting is what a scan found waiting, per partition, for a backfill to
// deliver: the oldest such event and how many there are (each tenant's
// priority counted once, whatever its destinations).
type waiting map[int]*partWaiting

type partWaiting struct {
	oldest  uint64
	backlog map[string]uint64 // laneKey -> the most waiting for one destination
}

// note records that the tenant's priority key in partition part has
// backlog events waiting from first.
func (w waiting) note(part int, key string, first, backlog uint64) {
	pw := w[part]
	if pw == nil {
		pw = &partWaiting{backlog: map[string]uint64{}}
		w[part] = pw
	}
	if pw.oldest == 0 || first < pw.oldest {
		pw.oldest = first
	}
	pw.backlog[key] = max(pw.backlog[key], backlog)
}

// of is the oldest event waiting in parts (0: none) and how many wait.
func (w waiting) of(parts []int) (oldest, backlog uint64) {
	for _, p := range parts {
		pw := w[p]
		if pw == nil {
			continue
		}
		if oldest == 0 || pw.oldest < oldest {
			oldest = pw.oldest
		}
		for _, n := range pw.backlog {
			backlog += n
		}
	}
	return oldest, backlog
}

// merge adds what another scan found.
func (w waiting) merge(o waiting) {
	for p, pw := range o {
		for k, n := range pw.backlog {
			w.note(p, k, pw.oldest, n)
		}
	}
}

// backfillSparse: a partition read apart is not backfilled when fewer
// than one in this many of the sequences its backfill would walk are
// events of its backlog. The server walks every sequence of the range
// for a filtered consumer; for a few tenants' events among a range of
// other partitions' floods, their grants' reads (by subject, from the
// server's per-subject index) cost less, and they need not wait for the
// backfill to reach them.
const backfillSparse = 16

// backfillFrom is where the backfill starts: the oldest event waiting to
// be dispatched, but at most Config.Backfill sequences before the end.
// Above lastSeq means no backfill.
func (d *Dispatcher) backfillFrom(lastSeq, oldest uint64) uint64 {
	if oldest == 0 || d.cfg.Backfill <= 0 {
		return lastSeq + 1
	}
	if span := uint64(d.cfg.Backfill); lastSeq >= span && oldest < lastSeq-span+1 {
		return lastSeq - span + 1
	}
	return oldest
}

// startDoorbell starts an ordered, ephemeral consumer on the whole stream
// from sequence from, whose every message says "tenant has an event at
// this sequence" and brings its body (Config.BodyBudget; headers only
// without). With until 0 it is the doorbell, the one consumer a
// dispatcher keeps: it follows the stream from the end of the startup
// scan, its pull paced by the body budget (pacedBell). Otherwise it is the
// backfill: it delivers the existing backlog [from, until] to the index
// once, so the backlog too is cut into batches without reading the stream,
// and then stops. One or two per process, whatever the number of tenants,
// on the doorbell connection (Deps.Doorbell). Both read the partitions
// this dispatcher owns (filters: partReads.filters); idle, the doorbell
// reads none until they move (moveParts).
func (d *Dispatcher) startDoorbell(ctx context.Context, from, until uint64, parts []int) (cc jetstream.ConsumeContext, over <-chan struct{}, err error) {
	backfill := until > 0
	filters := d.parts.filters(parts)
	bellSeq := new(atomic.Uint64)
	reached := make(chan struct{})
	var once sync.Once
	source := "doorbell"
	if backfill {
		source = "backfill"
	}
	woken := d.m.wakeups.WithLabelValues(source)
	handle := func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			return
		}
		seq := md.Sequence.Stream
		if backfill && seq > until {
			once.Do(func() { close(reached) })
			return
		}
		// Filtered on partitions, the backfill may see no event at until:
		// nothing more pending for its filter is the end too.
		last := backfill && (seq == until || md.NumPending == 0)
		if !backfill {
			bellSeq.Store(seq)
		}
		if h := d.hooks.backfillBell; h != nil && backfill {
			h(seq)
		}
		tenant, op, prio, ok := parseSubject(m.Subject())
		if ok && backfill {
			d.parts.parts[d.parts.layout.PartitionOf(tenant)].backSeq.Store(seq)
		}
		if ok {
			if !backfill {
				if _, seen := d.rung.Load(laneKey(tenant, prio)); !seen {
					d.rung.LoadOrStore(laneKey(tenant, prio), seq)
				}
			}
			woken.Inc()
			// The body is held for the destinations this dispatcher
			// dispatches the tenant to; another dispatcher's pairs only
			// learn the sequence, in case they move here.
			dests := d.destsOf(ctx, tenant, false)
			owned := 0
			for _, x := range dests {
				if d.owns(tenant, x.name) {
					owned++
				}
			}
			if d.traces != nil && !backfill {
				d.traces.note(tenant, seq, m.Headers())
			}
			body := d.bodies.holdAt(seq, m.Data(), op, owned)
			for _, x := range dests {
				b := body
				if owned < len(dests) && !d.owns(tenant, x.name) {
					b = nil
				}
				x.bell(tenant, prio, seq, md.Timestamp, b, backfill)
			}
			if h := d.hooks.onBell; h != nil && !backfill {
				h(tenant, seq)
			}
		}
		if last {
			once.Do(func() { close(reached) })
		}
	}
	if !backfill {
		bell, err := d.startPacedBell(ctx, from, filters, bellSeq, handle)
		return bell, nil, err
	}
	cc, err = d.consumeStream(ctx, from, doorbellPull, filters, handle, "backfill")
	if err != nil {
		return nil, nil, err
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-reached:
			d.backfillOver(parts)
			d.log.Debug("backfill done", "from", from, "until", until, "partitions", parts)
			for _, x := range d.allLanes() {
				x.kick()
			}
			cc.Stop()
		case <-ctx.Done():
			cc.Stop()
		}
	}()
	return cc, finished, nil
}

// consumeStream consumes the stream from sequence from with an ordered
// consumer asking for pull messages at a time, handing each message to
// handle; filters, when set, are the partitions' it reads
// (partReads.filters). role names it in errors and logs.
func (d *Dispatcher) consumeStream(ctx context.Context, from uint64, pull int, filters []string, handle jetstream.MessageHandler, role string) (jetstream.ConsumeContext, error) {
	// No subject filter when reading every partition: the stream binds
	// only event subjects (events.StreamSubjects), and a filter of
	// tenants would make the server match every stored message against
	// every subject of its block, a cost that grows with the number of
	// tenants (parseSubject drops anything that is not an event's
	// subject). A partition's filter is one prefix the server's subject
	// tree walks at once.
	cons, err := d.bellJS.OrderedConsumer(ctx, d.cfg.Stream, jetstream.OrderedConsumerConfig{
		FilterSubjects: filters,
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    from,
		HeadersOnly:    d.cfg.BodyBudget < 0,
	})
	if err != nil {
		return nil, fmt.Errorf("dispatch: %s consumer: %w", role, err)
	}
	cc, err := cons.Consume(handle, jetstream.PullMaxMessages(pull), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		d.log.Debug("stream consumer", "role", role, "err", err)
	}))
	if err != nil {
		return nil, fmt.Errorf("dispatch: %s consume: %w", role, err)
	}
	return cc, nil
}

// pollLoop rescans every PollInterval: a fallback for whatever wake-ups
// cannot see (a cursor moved back for replay, new weights or partners).
func (d *Dispatcher) pollLoop(ctx context.Context, stream jetstream.Stream) {
	t := time.NewTicker(d.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.m.wakeups.WithLabelValues("poll").Inc()
		if _, _, _, err := d.scan(ctx, stream, d.parts.ownedNow()); err != nil && ctx.Err() == nil {
			d.log.Warn("poll scan failed", "err", err)
			d.m.errors.WithLabelValues("", "scan").Inc()
		}
		for _, x := range d.allLanes() {
			x.unblockAll()
		}
	}
}
