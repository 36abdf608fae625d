package dispatch

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// seqIndex is what the doorbell told one destination about one tenant's
// events: their sequences, as runs of consecutive numbers, in the order the
// doorbell (an ordered consumer) delivered them, with each event's store
// time and, when the budget allows, its body. With it the dispatcher cuts
// a grant's batches without reading PRODUCTS. It is exact for sequences at
// or after the point from which the doorbell has been following the stream
// (Dispatcher.liveFrom, backFrom) and at or after floor: floor moves past
// what the index forgot — runs dropped when a tenant piles up more than
// maxRuns, sequences trimmed behind the cursor — and below it the
// dispatcher reads the stream. Not safe for concurrent use: the
// destination's mutex guards it.
//
// A run costs 24 bytes and an event 4 (its time) plus 8 once the index
// has held a body: a tenant whose events interleave one by one with
// others' costs 28-36 bytes an event, a flood of consecutive events 4-12.
type seqIndex struct {
	runs []seqRun
	// ms[i] is when the index's event i was stored, in milliseconds after
	// baseMs (msUnknown: not known); held[i] its body (nil: not held), or
	// held is nil when the index holds none. Event i is at
	// position i + base of the index's life: runs[j].off - base is where
	// run j's events begin.
	ms     []uint32
	held   []*heldBody
	base   uint64
	baseMs int64
	floor  uint64 // sequences below it were dropped (0: none)
}

// msUnknown marks an event whose store time does not fit ms (before the
// index's base or more than 49 days after it).
const msUnknown = math.MaxUint32

// indexMaxRuns bounds one tenant's index per destination. A tenant whose
// events interleave with others' so finely that its backlog spans more
// runs is read from the stream for the oldest part.
const indexMaxRuns = 100_000

// seqRun is a run of n consecutive sequences of one tenant from first; its
// events are at off in the index's life (seqIndex.ms, held).
type seqRun struct {
	first uint64
	off   uint64
	n     uint32
}

func (r seqRun) last() uint64 { return r.first + uint64(r.n) - 1 }

// count returns the number of sequences in the index.
func (ix *seqIndex) count() int { return len(ix.ms) }

// pos is the index into ms and held of seq, a sequence of r.
func (ix *seqIndex) pos(r seqRun, seq uint64) int { return int(r.off - ix.base + (seq - r.first)) }

// body returns the held body of the event at p, or nil.
func (ix *seqIndex) body(p int) *heldBody {
	if ix.held == nil {
		return nil
	}
	return ix.held[p]
}

// timeMs returns the store time of the event at p in Unix milliseconds.
func (ix *seqIndex) timeMs(p int) (int64, bool) {
	v := ix.ms[p]
	return ix.baseMs + int64(v), v != msUnknown
}

// add records that the tenant has an event at seq, stored at at. Sequences
// at or below the last one known (a redelivery) are ignored. It keeps at
// most maxRuns runs.
func (ix *seqIndex) add(seq uint64, at time.Time, maxRuns int) { ix.addBody(seq, at, nil, maxRuns) }

// addBody is add for an event whose stored data the index holds too
// (body, nil: none). The index takes over one reference of body, and
// releases it when the sequence is ignored or forgotten.
func (ix *seqIndex) addBody(seq uint64, at time.Time, body *heldBody, maxRuns int) {
	if n := len(ix.runs); n > 0 {
		last := &ix.runs[n-1]
		switch l := last.last(); {
		case seq <= l:
			body.release()
			return
		case seq == l+1:
			last.n++
			ix.appendEvent(at, body)
			return
		}
	}
	if seq < ix.floor {
		body.release()
		return
	}
	ix.runs = append(ix.runs, seqRun{first: seq, off: ix.base + uint64(len(ix.ms)), n: 1})
	ix.appendEvent(at, body)
	if len(ix.runs) > maxRuns {
		drop := len(ix.runs) - maxRuns
		ix.floor = ix.runs[drop].first
		ix.forget(drop)
	}
}

// appendEvent appends the time and body of the event just added to the
// last run.
func (ix *seqIndex) appendEvent(at time.Time, body *heldBody) {
	if len(ix.ms) == 0 {
		ix.baseMs = at.UnixMilli()
	}
	v := uint32(msUnknown)
	if d := at.UnixMilli() - ix.baseMs; d >= 0 && d < msUnknown {
		v = uint32(d)
	}
	ix.ms = append(ix.ms, v)
	if body != nil && ix.held == nil {
		ix.held = make([]*heldBody, len(ix.ms)-1, cap(ix.ms))
	}
	if ix.held != nil {
		ix.held = append(ix.held, body)
	}
}

// dropEvents lets go of the first k events' times and bodies.
func (ix *seqIndex) dropEvents(k int) {
	if ix.held != nil {
		for _, b := range ix.held[:k] {
			b.release()
		}
		clear(ix.held[:k])
		ix.held = ix.held[k:]
		if len(ix.held) == 0 {
			ix.held = nil
		}
	}
	ix.ms = ix.ms[k:]
	ix.base += uint64(k)
}

// forget drops the first k runs. It reslices rather than copies what
// stays: a tenant at maxRuns forgets a run at every new one, and trim runs
// at every grant, and copying 100,000 runs each time cost more than the
// grant (the arrays are copied once they fill, as append grows them).
func (ix *seqIndex) forget(k int) {
	if k == 0 {
		return
	}
	events := len(ix.ms)
	if k < len(ix.runs) {
		events = int(ix.runs[k].off - ix.base)
	}
	ix.dropEvents(events)
	ix.runs = ix.runs[k:]
}

// trim forgets sequences below cursor. The index no longer knows them, so
// floor moves up to cursor: a cursor moved back later (a replay) is read.
func (ix *seqIndex) trim(cursor uint64) {
	ix.floor = max(ix.floor, cursor)
	i, _ := slices.BinarySearchFunc(ix.runs, cursor, func(r seqRun, seq uint64) int {
		return cmp.Compare(r.last(), seq)
	})
	ix.forget(i)
	if len(ix.runs) > 0 && ix.runs[0].first < cursor {
		r := &ix.runs[0]
		k := cursor - r.first
		ix.dropEvents(int(k))
		r.first, r.off, r.n = cursor, r.off+k, r.n-uint32(k)
	}
}

// each calls f for every known sequence in from..to, in order, with its
// position, until f returns false.
func (ix *seqIndex) each(from, to uint64, f func(seq uint64, p int) bool) {
	i, _ := slices.BinarySearchFunc(ix.runs, from, func(r seqRun, seq uint64) int {
		return cmp.Compare(r.last(), seq)
	})
	for ; i < len(ix.runs); i++ {
		r := ix.runs[i]
		if r.first > to {
			return
		}
		for seq := max(r.first, from); seq <= min(r.last(), to); seq++ {
			if !f(seq, ix.pos(r, seq)) {
				return
			}
		}
	}
}

// times returns when each of the count known sequences in from..to was
// stored, or nil when the index does not know all of them with their times
// (then the sink reads the events' headers for them).
func (ix *seqIndex) times(from, to uint64, count int) *work.Times {
	var t *work.Times
	n, ok := 0, true
	ix.each(from, to, func(_ uint64, p int) bool {
		ms, known := ix.timeMs(p)
		if t == nil {
			t = &work.Times{BaseMs: ms, OffsetsMs: make([]uint32, 0, count)}
		}
		if !known || n == count || !t.Add(ms) {
			ok = false
			return false
		}
		n++
		return true
	})
	if !ok || n != count {
		return nil
	}
	return t
}

// bodies returns the held bodies of the count known sequences in
// from..to, with their store times, or nil when the index does not hold
// every one of them (the item is then read from PRODUCTS).
func (ix *seqIndex) bodies(from, to uint64, count int) []work.Body {
	if ix.held == nil {
		return nil
	}
	out := make([]work.Body, 0, count)
	ok := true
	ix.each(from, to, func(seq uint64, p int) bool {
		b := ix.held[p]
		ms, known := ix.timeMs(p)
		if b == nil || !known || len(out) == count {
			ok = false
			return false
		}
		out = append(out, work.Body{Seq: seq, StoredMs: ms, Op: b.op, Data: b.data})
		return true
	})
	if !ok || len(out) != count {
		return nil
	}
	return out
}

// lacksBody says whether seq is in the index without its body.
func (ix *seqIndex) lacksBody(seq uint64) bool {
	p, ok := ix.locate(seq)
	return ok && ix.body(p) == nil
}

// missingBodies counts the sequences from..to of the index that lack
// their bodies.
func (ix *seqIndex) missingBodies(from, to uint64) (n int) {
	ix.each(from, to, func(_ uint64, p int) bool {
		if ix.body(p) == nil {
			n++
		}
		return true
	})
	return n
}

// bodiedPrefix counts the sequences of the index from from on, up to to,
// that have their bodies, up to the first that has not, and returns the
// last of them.
func (ix *seqIndex) bodiedPrefix(from, to uint64) (n int, last uint64) {
	ix.each(from, to, func(seq uint64, p int) bool {
		if ix.body(p) == nil {
			return false
		}
		n, last = n+1, seq
		return true
	})
	return n, last
}

// attach gives seq, a sequence of the index without its body, its body;
// it reports whether the index took it (and one reference of it).
func (ix *seqIndex) attach(seq uint64, body *heldBody) bool {
	p, ok := ix.locate(seq)
	if !ok || ix.body(p) != nil {
		return false
	}
	if ix.held == nil {
		ix.held = make([]*heldBody, len(ix.ms), cap(ix.ms))
	}
	ix.held[p] = body
	return true
}

// locate returns the position of seq, when the index holds it.
func (ix *seqIndex) locate(seq uint64) (p int, ok bool) {
	if seq < ix.floor {
		return 0, false
	}
	i, _ := slices.BinarySearchFunc(ix.runs, seq, func(r seqRun, seq uint64) int {
		return cmp.Compare(r.last(), seq)
	})
	if i == len(ix.runs) || ix.runs[i].first > seq {
		return 0, false
	}
	return ix.pos(ix.runs[i], seq), true
}

// take cuts up to n known events at or after cursor into batches of at
// most size events, as cut does for a read (tight ranges, sequences listed
// for small sparse batches). It returns the store time of the first event
// taken and how many known events remain after those taken. It does not
// forget what it took: trim does, once the cursor has moved.
func (ix *seqIndex) take(cursor uint64, n, size int) (ranges []tenancy.Range, counts []int, lists [][]uint64, at time.Time, rest uint64) {
	return ix.takeBytes(cursor, n, size, 0)
}

// takeBytes is take with batches of held bodies bounded to about maxBytes
// of them (0: no bound), so that a work item carrying them fits in one
// NATS message. A batch holds at least one event.
func (ix *seqIndex) takeBytes(cursor uint64, n, size, maxBytes int) (ranges []tenancy.Range, counts []int, lists [][]uint64, at time.Time, rest uint64) {
	ix.trim(cursor)
	if len(ix.ms) > 0 {
		if ms, ok := ix.timeMs(0); ok {
			at = time.UnixMilli(ms)
		}
	}
	var from uint64
	inBatch, inBytes, taken := 0, 0, 0
	for i, r := range ix.runs {
		if taken == n {
			break
		}
		lastRun := i == len(ix.runs)-1
		for seq := r.first; seq <= r.last() && taken < n; {
			if inBatch == 0 {
				from = seq
			}
			// As much of the run as the batch and n allow.
			k := min(r.last()-seq+1, uint64(size-inBatch), uint64(n-taken))
			full := false
			if maxBytes > 0 && ix.held != nil {
				// As much of that as the batch's bytes allow.
				most, p := k, ix.pos(r, seq)
				for k = 0; k < most; k++ {
					c := 0
					if b := ix.held[p+int(k)]; b != nil {
						c = work.Body{Data: b.data}.WireSize()
					}
					if inBatch+int(k) > 0 && inBytes+c > maxBytes {
						full = true
						break
					}
					inBytes += c
				}
			}
			seq += k
			inBatch += int(k)
			taken += int(k)
			if inBatch == size || full || taken == n || seq > r.last() && lastRun {
				ranges = append(ranges, tenancy.Range{From: from, To: seq - 1})
				counts = append(counts, inBatch)
				inBatch, inBytes = 0, 0
			}
		}
	}
	for i, r := range ranges {
		var list []uint64
		if listSeqs(r, counts[i]) {
			list = ix.list(r)
		}
		lists = append(lists, list)
	}
	return ranges, counts, lists, at, uint64(len(ix.ms) - taken)
}

// list returns the known sequences in r.
func (ix *seqIndex) list(r tenancy.Range) []uint64 {
	var out []uint64
	ix.each(r.From, r.To, func(seq uint64, _ int) bool {
		out = append(out, seq)
		return true
	})
	return out
}
