package dispatch

import (
	"context"
	"time"

	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// A grant's events come from the first of these sources that knows them
// (plan, grant.go):
//
//   - the index (fromIndex, seq_index.go): the sequences, store times and
//     bodies the doorbell and the start-up backfill delivered, in stream
//     order, one read of the stream for every tenant;
//   - a dense run (dense): a range the start-up scan found to hold only
//     the tenant's events, cut by arithmetic;
//   - a replay feed (fromFeed, replay_feed.go): a replayed range's
//     sequences and store times;
//   - a read of PRODUCTS filtered on the tenant (readMax, cut), which is
//     always right and costs the server a scan of what lies between.
//
// Every source cuts the same batches: tight ranges of at most the
// destination's batch size, sequences listed where the sink should read
// them one by one (listSeqs).

// fromIndex cuts up to n of the tenant's events from cursor into batches
// using what the doorbell and the backfill delivered, without reading the
// stream. ok is false when they cannot tell: the cursor is before the point
// they cover (a replay, or a backlog older than the backfill reached), or
// they know nothing at or after the cursor yet (the backfill is still on
// its way, or the doorbell is behind or stopped) — then the caller reads
// PRODUCTS, which is always right.
func (x *destination) fromIndex(ts *tenantState, cursor uint64, n int) (ranges []tenancy.Range, counts []int, lists [][]uint64, first time.Time, rest uint64, ok bool) {
	d := x.d
	size := x.size
	x.mu.Lock()
	defer x.mu.Unlock()
	cursor = ts.pastGap(cursor)
	switch {
	case x.liveCovers(ts, cursor):
		// Nothing known: read, in case the doorbell is behind or stopped
		// (a scan's backlog hint brought the grant).
		ranges, counts, lists, first, rest = ts.live.takeBytes(cursor, n, size, d.itemBytes)
		return ranges, counts, lists, first, rest, len(ranges) > 0
	case !x.backCovers(ts, cursor):
		return nil, nil, nil, time.Time{}, 0, false
	}
	// cursor is in the backfill's region [backFrom, live) of the partition.
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
		// headers costs the server more than the short batches cost, and
		// slows the backfill further.
		return ranges, counts, lists, first, rest, true
	}
	if !d.parts.backDone(ts.part) {
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

// pastGap is where the tenant's events of its priority begin at or after
// cursor as far as the scan knows: past its gap, the range from a cursor
// to the first event the scan's probe found from it, in which the tenant
// has no event (sequences are never reused, so that stays true). A
// backfill or doorbell that started inside the gap covers the tenant from
// the cursor on. x.mu must be held.
func (ts *tenantState) pastGap(cursor uint64) uint64 {
	if cursor >= ts.gap.from && cursor < ts.gap.to {
		return ts.gap.to
	}
	return cursor
}

// liveCovers says the live index holds every event of the tenant from
// cursor on: the cursor is past where the doorbell started delivering the
// tenant's partition and what the index dropped, or the tenant is fresh
// (its index holds its every event) and nothing it dropped lies past the
// cursor. False before the doorbell started, and while this dispatcher
// does not read the tenant's partition. x.mu must be held.
func (x *destination) liveCovers(ts *tenantState, cursor uint64) bool {
	lf, pf := x.d.liveFrom.Load(), x.d.parts.liveFrom(ts.part)
	return lf != 0 && pf != 0 && (cursor >= max(pf, ts.live.floor) || ts.fresh && pf == lf && cursor >= ts.live.floor)
}

// backCovers says cursor is in the start-up backfill's region and past
// what the tenant's backfill index dropped, and the backfill delivers the
// tenant's partition: that index holds the tenant's events from cursor on
// as far as the backfill has delivered them. x.mu must be held.
func (x *destination) backCovers(ts *tenantState, cursor uint64) bool {
	bf := x.d.parts.backFrom(ts.part)
	return bf != 0 && cursor >= max(bf, ts.back.floor)
}

// readMax is how many events a grant of up to n events reads from
// PRODUCTS: n, or, while the tenant is known to be at its slot limit
// (hinted), one batch per slot released since (at least one). At the
// limit a release frees one slot, and a read of a whole grant's worth
// (GrantBatches batches, with headers) would dispatch one batch and read
// the rest again at the next release (TestReadAtLimitReadsFreedSlots).
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
// when a million of them follow, and it would tell nothing new. Events removed from the stream since (MaxAge) reach the
// sink as a short range, which it dead-letters as lost. rest is an upper
// bound of what is left.
func (x *destination) dense(ts *tenantState, cursor uint64, n int) (ranges []tenancy.Range, counts []int, rest uint64, ok bool) {
	x.mu.Lock()
	run, last := ts.dense, ts.lastSeq
	if x.replay { // a replay's batches end before its end
		run.until = min(run.until, ts.replayUntil)
	}
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
// sinks read bodies without headers: a flood read with headers makes the
// server build a header block per event, and collecting the garbage of
// that over a heap holding a dedup entry per recent event halves a
// flood's drain (docs/dispatcher.md, "Replays"). dispatch learns them
// while DispatchMany takes the slots. An item gets nil when its grant
// spans more milliseconds than the requests are worth
// (work.RangeTimesSpan) or the requests fail: its sink then reads the
// headers.
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
// headers. A small one it reads by lookups of its sequences, and so one
// spread over the stream among hundreds of other tenants' events
// (work.LookupRead); one over at most 4 times its count of sequences
// (tenants whose floods interleave) as the whole range without headers,
// keeping the listed events (work.RangeRead).
func listSeqs(r tenancy.Range, count int) bool {
	width := r.To - r.From + 1
	if uint64(count) >= width {
		return false // dense
	}
	return count <= work.SeqsSmall || count <= work.SeqsMax && (work.RangeRead(count, width) || work.LookupRead(count, width))
}
