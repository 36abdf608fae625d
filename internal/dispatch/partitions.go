package dispatch

import (
	"cmp"
	"context"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairwayhq/fairway/pkg/events"
)

// Partitions. A partitioned PRODUCTS (events.Layout) stores each tenant's
// events under one of P partitions. Dispatchers split the partitions,
// not the pairs: each owns the partitions a draft by rendezvous hashing
// gives it among the dispatchers alive (partOwners) and grants every pair
// of their tenants, and reads only them: a reader (doorbell and backfill)
// per partition, filtered on it, or one unfiltered reader when it owns
// every partition. A dispatcher reading one partition runs the same code
// as one reading all of them; an unpartitioned stream is one partition,
// read whole, and its dispatchers split the pairs instead.
//
// When the dispatchers alive change, a dispatcher that loses partitions
// stops their readers and forgets their tenants' indexes and bodies
// (their new owner dispatches them); for those it gains it starts readers
// as at start: a doorbell from the stream's end, a scan of their tenants'
// backlogs, a backfill from the oldest waiting event (takeOver). One loop
// (readLoop) starts and stops the readers, one move at a time, so a
// takeover overtaken by the next move never leaves a partition read by a
// dispatcher that no longer owns it. Until that backfill has delivered a
// tenant's events, a tenant with no more than a few still to come
// (backfillReadMax) reads them from PRODUCTS, which is always right, and
// the others wait for it.
// While two dispatchers' views differ both may grant a pair; the cursor
// check in tenancy.DispatchMany decides.

// memberTTL is how many heartbeats old a dispatcher's row may be and the
// dispatcher still taken for alive: one that died is taken over at the
// first heartbeat of another after that, so within memberTTL+1
// heartbeats of its last (3: a dead dispatcher's partitions move within
// 3 heartbeats of its death). A heartbeat a whole interval late makes its
// partitions move and move back, which costs reads, not correctness.
const memberTTL = 2

// partReads is what this dispatcher reads of each partition.
type partReads struct {
	layout events.Layout
	parts  []partRead

	mu    sync.Mutex               // orders moveParts' swaps of owned
	owned atomic.Pointer[ownedSet] // nil before the first heartbeat
}

// ownedSet is the partitions a dispatcher owns: sorted, and as a table
// by partition, so owns (a few calls per event) reads it without a lock.
type ownedSet struct {
	parts []int
	has   []bool
}

func newOwnedSet(parts []int, n int) *ownedSet {
	has := make([]bool, n)
	for _, p := range parts {
		has[p] = true
	}
	return &ownedSet{parts: parts, has: has}
}

// partRead is where the index (seq_index.go) is exact for one partition's
// tenants: from live on, as the doorbell delivers them, and for [backFrom,
// live) once the backfill (at start, or when the partition was gained)
// has delivered them.
type partRead struct {
	live     atomic.Uint64 // 0: the doorbell does not deliver the partition
	backFrom atomic.Uint64 // 0: no backfill
	backDone atomic.Bool   // the backfill delivered its whole region (or there is none)
	backSeq  atomic.Uint64 // the sequence the backfill is delivering now
}

func newPartReads(l events.Layout) *partReads {
	return &partReads{layout: l, parts: make([]partRead, l.Count())}
}

// liveFrom is where the doorbell's delivery of partition p began (0:
// not delivered).
func (r *partReads) liveFrom(p int) uint64 { return r.parts[p].live.Load() }

// backFrom is where the backfill of partition p began (0: none).
func (r *partReads) backFrom(p int) uint64 { return r.parts[p].backFrom.Load() }

// backfilled says a backfill delivers partition p's events.
func (r *partReads) backfilled(p int) bool { return r.backFrom(p) != 0 }

// backDone says partition p's backfill delivered its whole region, or it
// has none.
func (r *partReads) backDone(p int) bool { return r.parts[p].backDone.Load() }

// backSeq is the sequence partition p's backfill is delivering now: a
// tenant state made later knows nothing before it.
func (r *partReads) backSeq(p int) uint64 { return r.parts[p].backSeq.Load() }

// partitioned says whether the stream has partitions: dispatchers then
// split partitions, not pairs.
func (r *partReads) partitioned() bool { return r.layout.Partitions > 0 }

// filters are the subject filters of a consumer reading parts: none when
// parts is every partition (the server then matches nothing).
func (r *partReads) filters(parts []int) []string {
	if len(parts) == r.layout.Count() {
		return nil
	}
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = r.layout.PartitionSubjects(p)
	}
	return out
}

// ownedNow is the partitions this dispatcher reads now: the one of an
// unpartitioned stream, else those it owns (moveParts).
func (r *partReads) ownedNow() []int {
	if !r.partitioned() {
		return []int{0}
	}
	if o := r.owned.Load(); o != nil {
		return o.parts
	}
	return nil
}

// ownsPart says whether this dispatcher owns partition p (of a
// partitioned stream).
func (r *partReads) ownsPart(p int) bool {
	o := r.owned.Load()
	return o != nil && p >= 0 && p < len(o.has) && o.has[p]
}

// partOwners assigns n partitions to members: a draft in rounds, in
// which each member in turn takes the partition it ranks highest of those
// left (rendezvous hashing of member and partition), so that shares
// differ by one at most (a handful of partitions hashed freely over a few
// members can leave one with three times another's share, and the drain
// waits for the busiest). Every dispatcher computes the same from the
// same members, and a member that joins or leaves moves mostly its own
// share. out[p] is partition p's owner ("" when members is empty).
func partOwners(members []string, n int) []string {
	out := make([]string, n)
	if len(members) == 0 {
		return out
	}
	members = slices.Sorted(slices.Values(members))
	ranks := make([][]int, len(members))
	for i, m := range members {
		hs := make([]uint64, n)
		for p := range n {
			hs[p] = rendezvous(m, "partition", strconv.Itoa(p))
		}
		ranks[i] = make([]int, n)
		for p := range n {
			ranks[i][p] = p
		}
		slices.SortFunc(ranks[i], func(a, b int) int { return cmp.Compare(hs[b], hs[a]) })
	}
	next := make([]int, len(members))
	for left := n; left > 0; {
		for i, m := range members {
			if left == 0 {
				break
			}
			for out[ranks[i][next[i]]] != "" {
				next[i]++
			}
			out[ranks[i][next[i]]] = m
			left--
		}
	}
	return out
}

// ownedParts is the partitions holder owns among members: every one when
// alone.
func ownedParts(members []string, holder string, n int) []int {
	out := []int{}
	owners := partOwners(members, n)
	for p := range n {
		if len(members) < 2 || owners[p] == holder {
			out = append(out, p)
		}
	}
	return out
}

// ownedParts is the partitions this dispatcher owns in its last view of
// the dispatchers alive; the one partition of an unpartitioned stream,
// which every dispatcher reads.
func (d *Dispatcher) ownedParts() []int {
	if !d.parts.partitioned() {
		return []int{0}
	}
	var members []string
	if m := d.members.Load(); m != nil {
		members = m.members
	}
	return ownedParts(members, d.cfg.Holder, d.parts.layout.Count())
}

// reader is the doorbell, and the backfill while it runs, of a group of
// partitions: every partition of the stream, read unfiltered, when this
// dispatcher owns them all (or the stream has none), else one partition,
// read with its filter (nats-server filters a consumer on one subject
// prefix cheaply, on several one message at a time).
type reader struct {
	parts  []int
	bell   *pacedBell
	ctx    context.Context    // its doorbell's and its backfill's
	cancel context.CancelFunc // ends them
}

// readGroups are the readers' groups for owned: one of every partition,
// or one per partition.
func (r *partReads) readGroups(owned []int) [][]int {
	if len(owned) == r.layout.Count() {
		return [][]int{owned}
	}
	out := make([][]int, len(owned))
	for i, p := range owned {
		out[i] = []int{p}
	}
	return out
}

// read starts reading parts: a reader per group (readGroups) whose
// doorbell delivers their events from sequence from on (startReaders),
// and their backfills from the oldest event waiting in them (wait)
// through from-1 (backfill).
func (d *Dispatcher) read(ctx context.Context, parts []int, from uint64, wait waiting) error {
	rds, err := d.startReaders(ctx, parts, from)
	if err != nil {
		return err
	}
	d.backfill(rds, from, wait)
	return nil
}

// startReaders starts a reader per group of parts (readGroups), its
// doorbell delivering their events from sequence from on.
func (d *Dispatcher) startReaders(ctx context.Context, parts []int, from uint64) ([]*reader, error) {
	var rds []*reader
	for _, g := range d.parts.readGroups(parts) {
		rctx, cancel := context.WithCancel(ctx)
		rd := &reader{parts: g, ctx: rctx, cancel: cancel}
		for _, p := range g {
			d.parts.parts[p].live.Store(from)
		}
		bell, _, err := d.startDoorbell(rctx, from, 0, g)
		if err != nil {
			cancel()
			return nil, err
		}
		rd.bell = bell.(*pacedBell)
		d.readersMu.Lock()
		for _, p := range g {
			d.readers[p] = rd
		}
		d.readersMu.Unlock()
		rds = append(rds, rd)
	}
	return rds, nil
}

// backfill queues the backfills of the readers' partitions, whose
// doorbells deliver from sequence from on: from the oldest event waiting
// in them (wait) through from-1, unless that is sparse for a partition
// read apart (backfillSparse). They queue behind those of earlier reads
// (backfillQueue).
func (d *Dispatcher) backfill(rds []*reader, from uint64, wait waiting) {
	var turns []backfillTurn
	for _, rd := range rds {
		oldest, backlog := wait.of(rd.parts)
		start := d.backfillFrom(from-1, oldest)
		if d.parts.filters(rd.parts) != nil && start < from && backlog*backfillSparse < from-start {
			start = from // sparse: its tenants' grants read their backlog
		}
		turns = append(turns, backfillTurn{ctx: rd.ctx, from: start, until: from - 1, parts: rd.parts})
	}
	d.backfills.add(d, turns)
}

// backfillTurn is a backfill waiting for its turn: of parts, from sequence
// from through until, while ctx (its reader's) lasts.
type backfillTurn struct {
	ctx         context.Context
	from, until uint64
	parts       []int
}

// backfillQueue runs a dispatcher's backfills one after another, those
// of one read and those of reads after it (a takeover while the start-up
// backfills run, say). A backfill read apart is filtered on its
// partition, and the server walks the whole backlog for each: run at
// once, a few of them keep it busy enough that the doorbells deliver live
// events seconds late. One at a time they cost the server the same in
// all, spread out, while the partitions still waiting their turn have
// their tenants' grants wait for them (markBackfill) rather than read
// PRODUCTS. A backfill that cannot start is tried again a second later,
// backfillTries times in all; then its partitions are left to their
// tenants' grants, which read PRODUCTS. One whose reader stopped (its
// partitions moved) is skipped.
type backfillQueue struct {
	mu      sync.Mutex
	turns   []backfillTurn
	running bool // a goroutine runs the queue
}

// backfillTries is how often a backfill is tried before its partitions
// are left to their tenants' grants.
const backfillTries = 3

// add queues turns, marks their partitions backfilled at once, and runs
// the queue unless it runs already. A turn with nothing to backfill is
// over at once.
func (q *backfillQueue) add(d *Dispatcher, turns []backfillTurn) {
	var queue []backfillTurn
	for _, t := range turns {
		if t.from > t.until {
			d.backfillOver(t.parts)
			continue
		}
		d.markBackfill(t.from, t.parts)
		queue = append(queue, t)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.turns = append(q.turns, queue...)
	d.m.backfillQueue.Set(float64(len(q.turns)))
	if !q.running && len(q.turns) > 0 {
		q.running = true
		d.reloads.Go(func() { q.run(d) })
	}
}

// next takes the turn to run, or reports that the queue is empty and
// no longer running.
func (q *backfillQueue) next(d *Dispatcher) (backfillTurn, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.turns) == 0 {
		q.running = false
		return backfillTurn{}, false
	}
	t := q.turns[0]
	q.turns = q.turns[1:]
	d.m.backfillQueue.Set(float64(len(q.turns)))
	return t, true
}

func (q *backfillQueue) run(d *Dispatcher) {
	for {
		t, ok := q.next(d)
		if !ok {
			return
		}
		if over, ok := q.start(d, t); ok {
			<-over
		}
	}
}

// start starts t's backfill, trying again after a failure while its
// reader lasts. On giving up it unmarks t's partitions, unless a newer
// read marked them since.
func (q *backfillQueue) start(d *Dispatcher, t backfillTurn) (<-chan struct{}, bool) {
	for try := 1; t.ctx.Err() == nil; try++ {
		over, err := d.startBackfill(t.ctx, t.from, t.until, t.parts)
		if err == nil {
			return over, true
		}
		if t.ctx.Err() != nil {
			break
		}
		d.m.errors.WithLabelValues("", "backfill").Inc()
		if try == backfillTries {
			d.log.Warn("backfill failed to start; its partitions' tenants read their backlog", "partitions", t.parts, "err", err)
			for _, p := range t.parts {
				d.parts.parts[p].backFrom.CompareAndSwap(t.from, 0)
			}
			break
		}
		d.log.Warn("backfill failed to start; trying again", "partitions", t.parts, "err", err)
		select {
		case <-t.ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil, false
}

// stopReading stops the readers of parts and waits until their
// doorbells' handlers have returned for the last time; their partitions
// are then read by no one here (live 0).
func (d *Dispatcher) stopReading(parts []int) {
	d.readersMu.Lock()
	var stop []*reader
	for _, p := range parts {
		if rd := d.readers[p]; rd != nil && !slices.Contains(stop, rd) {
			stop = append(stop, rd)
		}
		delete(d.readers, p)
	}
	d.readersMu.Unlock()
	for _, rd := range stop {
		rd.cancel()
		rd.bell.Stop()
		<-rd.bell.Closed()
	}
	for _, p := range parts {
		d.parts.parts[p].live.Store(0)
		d.parts.parts[p].backFrom.Store(0)
		d.parts.parts[p].backDone.Store(false)
	}
}

// bellSeq is the sequence the doorbell reading partition p is delivering
// now (0: none reads it): a tenant state created later knows nothing
// before it.
func (d *Dispatcher) bellSeq(p int) uint64 {
	d.readersMu.Lock()
	rd := d.readers[p]
	d.readersMu.Unlock()
	if rd == nil {
		return 0
	}
	return rd.bell.seq.Load()
}

// bellSeen is the furthest sequence any doorbell delivered.
func (d *Dispatcher) bellSeen() uint64 {
	d.readersMu.Lock()
	defer d.readersMu.Unlock()
	var seen uint64
	for _, rd := range d.readers {
		seen = max(seen, rd.bell.seq.Load())
	}
	return seen
}

// moveParts records the partitions this dispatcher owns after a heartbeat
// and, once Run reads, has readLoop take over those gained and let go of
// those lost (the package comment above). Before Run started reading (the
// first heartbeats) it only records what it owns.
func (d *Dispatcher) moveParts(ctx context.Context) {
	if !d.parts.partitioned() {
		return
	}
	owned := d.ownedParts()
	r := d.parts
	r.mu.Lock()
	old := r.ownedNow()
	if old != nil && slices.Equal(old, owned) {
		r.mu.Unlock()
		return
	}
	r.owned.Store(newOwnedSet(owned, r.layout.Count()))
	r.mu.Unlock()
	d.m.partitions.Set(float64(len(owned)))
	d.reloads.Go(func() {
		if err := d.st.SetPartitions(ctx, d.cfg.Holder, owned); err != nil && ctx.Err() == nil {
			d.log.Warn("recording this dispatcher's partitions failed; status shows the last recorded", "err", err)
		}
	})
	if old == nil || !d.reading.Load() {
		return // Run reads what is owned once it starts
	}
	d.log.Info("partitions moved", "holder", d.cfg.Holder, "owned", owned, "before", old)
	d.kickReaders()
}

// kickReaders has readLoop bring the readers in line with the partitions
// owned.
func (d *Dispatcher) kickReaders() {
	select {
	case d.readKick <- struct{}{}:
	default:
	}
}

// readLoop brings the readers in line with the partitions owned whenever
// they move (kickReaders), until ctx ends. It alone starts and stops
// readers once Run has started the first ones, one move at a time: a
// takeover still scanning when the partitions move again would otherwise
// start readers of partitions no longer owned, and keep them. A takeover
// that fails is tried again a second later.
func (d *Dispatcher) readLoop(ctx context.Context) {
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.readKick:
		case <-retry.C:
		}
		if err := d.alignReaders(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("taking gained partitions over failed; trying again", "err", err)
			d.m.errors.WithLabelValues("", "scan").Inc()
			retry.Reset(time.Second)
		}
	}
}

// alignReaders stops the readers of partitions not owned (and those
// grouped otherwise than readGroups would group the partitions owned now:
// a dispatcher that came to own every partition, or no longer does, reads
// them all anew), forgets their tenants' indexes and bodies, and takes
// over the partitions owned that none reads.
func (d *Dispatcher) alignReaders(ctx context.Context) error {
	want := d.parts.ownedNow()
	groups := d.parts.readGroups(want)
	var stop []int
	for p, rd := range d.readersNow() {
		if !slices.Contains(want, p) || !slices.ContainsFunc(groups, func(g []int) bool { return slices.Equal(g, rd.parts) }) {
			stop = append(stop, p)
		}
	}
	d.stopReading(stop)
	readers := d.readersNow()
	var missing []int
	for _, p := range want {
		if readers[p] == nil {
			missing = append(missing, p)
		}
	}
	if len(stop) == 0 && len(missing) == 0 {
		return nil
	}
	last, err := d.streamLast(ctx)
	if err != nil {
		return err
	}
	for _, x := range d.allLanes() {
		x.dropParts(append(stop, missing...), last+1)
	}
	if len(missing) == 0 {
		return nil
	}
	if err := d.takeOver(ctx, missing, last+1); err != nil {
		return err
	}
	for _, x := range d.allLanes() {
		x.kick()
	}
	return nil
}

// takeOver starts reading partitions gained while running as Run does at
// start: their doorbells from sequence from, a scan of their tenants'
// backlogs, and their backfills up to from-1.
func (d *Dispatcher) takeOver(ctx context.Context, gained []int, from uint64) error {
	if h := d.hooks.takeOver; h != nil {
		h(gained)
	}
	stream, err := d.js.Stream(ctx, d.cfg.Stream)
	if err != nil {
		return err
	}
	_, wait, _, err := d.scan(ctx, stream, gained)
	if err != nil {
		return err
	}
	return d.read(ctx, gained, from, wait)
}

// dropParts forgets the indexes and held bodies of the tenants of parts,
// partitions this dispatcher lost (their new owner dispatches them) or
// gained (what their indexes hold is from before it last lost them, and
// their new reader fills them anew). from is where the new readers start:
// the live indexes know nothing before it.
func (x *destination) dropParts(parts []int, from uint64) {
	if len(parts) == 0 {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, ts := range x.tenants {
		if slices.Contains(parts, ts.part) {
			ts.live.trim(math.MaxUint64)
			ts.live = seqIndex{floor: from}
			ts.back.trim(math.MaxUint64)
			ts.back = seqIndex{}
			ts.backExpect, ts.backRung = 0, 0
		}
	}
}

// streamLast is the stream's last sequence now.
func (d *Dispatcher) streamLast(ctx context.Context) (uint64, error) {
	s, err := d.js.Stream(ctx, d.cfg.Stream)
	if err != nil {
		return 0, err
	}
	return s.CachedInfo().State.LastSeq, nil
}

// readersNow is a copy of the readers by partition.
func (d *Dispatcher) readersNow() map[int]*reader {
	d.readersMu.Lock()
	defer d.readersMu.Unlock()
	return maps.Clone(d.readers)
}
