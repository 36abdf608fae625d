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
// doorbell (an ordered consumer) delivered them. With it the dispatcher cuts
// a grant's batches without reading PRODUCTS. It is exact for sequences at
// or after the point from which the doorbell has been following the stream
// (Dispatcher.liveFrom, backFrom) and at or after floor: floor moves past
// what the index forgot — runs dropped when a tenant piles up more than
// maxRuns, sequences trimmed behind the cursor — and below it the
// dispatcher reads the stream as before. Not safe for concurrent
// use: the destination's mutex guards it.
type seqIndex struct {
	runs  []seqRun
	n     int    // sequences in runs, kept as they change: a grant must not walk every run
	floor uint64 // sequences below it were dropped (0: none)
}

// indexMaxRuns bounds one tenant's index per destination (about 64 bytes a
// run plus 4 bytes an event for the store times). A tenant whose events interleave with others' so finely that its
// backlog spans more runs is read from the stream for the oldest part.
const indexMaxRuns = 100_000

// count returns the number of sequences in the index.
func (ix *seqIndex) count() int { return ix.n }

// seqRun is a run of consecutive sequences of one tenant.
type seqRun struct {
	first, last uint64
	at          time.Time // when the run's first event was stored
	// offMs[i] is when first+i was stored, in milliseconds after at (4
	// bytes an event); nil once one did not fit (stored before at or more
	// than 49 days after it): the run's times are then unknown.
	offMs []uint32
	// bodies[i] is first+i's stored data when the index holds it (nil
	// entries: not held); nil when the run holds none.
	bodies []*heldBody
}

// body returns the held body of seq, a sequence of r, or nil.
func (r *seqRun) body(seq uint64) *heldBody {
	if r.bodies == nil {
		return nil
	}
	return r.bodies[seq-r.first]
}

// releaseBodies lets go of the bodies of r's sequences below seq.
func (r *seqRun) releaseBodies(below uint64) {
	if r.bodies == nil {
		return
	}
	n := min(below, r.last+1) - r.first
	for _, b := range r.bodies[:n] {
		b.release()
	}
	clear(r.bodies[:n])
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
		switch {
		case seq <= last.last:
			body.release()
			return
		case seq == last.last+1:
			last.last = seq
			ix.n++
			if last.offMs != nil {
				// Millisecond instants, not a truncated duration, so that
				// base + offset is the event's own millisecond.
				if ms := at.UnixMilli() - last.at.UnixMilli(); ms >= 0 && ms <= math.MaxUint32 {
					last.offMs = append(last.offMs, uint32(ms))
				} else {
					last.offMs = nil
				}
			}
			switch {
			case last.bodies != nil:
				last.bodies = append(last.bodies, body)
			case body != nil:
				last.bodies = make([]*heldBody, seq-last.first, seq-last.first+64)
				last.bodies = append(last.bodies, body)
			}
			return
		}
	}
	if seq < ix.floor {
		body.release()
		return
	}
	r := seqRun{first: seq, last: seq, at: at, offMs: []uint32{0}}
	if body != nil {
		r.bodies = []*heldBody{body}
	}
	ix.runs = append(ix.runs, r)
	ix.n++
	if len(ix.runs) > maxRuns {
		drop := len(ix.runs) - maxRuns
		ix.floor = ix.runs[drop].first
		ix.forget(drop)
	}
}

// forget drops the first k runs. It reslices rather than copies what
// stays: a tenant at maxRuns forgets a run at every new one, and trim runs
// at every grant, and copying 100,000 runs each time cost more than the
// grant (the array is copied once it fills, as append grows it).
func (ix *seqIndex) forget(k int) {
	for i := range ix.runs[:k] {
		r := &ix.runs[i]
		ix.n -= int(r.last - r.first + 1)
		r.releaseBodies(r.last + 1)
	}
	clear(ix.runs[:k]) // let their times go
	ix.runs = ix.runs[k:]
}

// trim forgets sequences below cursor. The index no longer knows them, so
// floor moves up to cursor: a cursor moved back later (a replay) is read.
func (ix *seqIndex) trim(cursor uint64) {
	ix.floor = max(ix.floor, cursor)
	i := 0
	for i < len(ix.runs) && ix.runs[i].last < cursor {
		i++
	}
	ix.forget(i)
	if len(ix.runs) > 0 && ix.runs[0].first < cursor {
		r := &ix.runs[0]
		if r.offMs != nil {
			r.offMs = r.offMs[cursor-r.first:]
		}
		if r.bodies != nil {
			r.releaseBodies(cursor)
			r.bodies = r.bodies[cursor-r.first:]
		}
		ix.n -= int(cursor - r.first)
		r.first = cursor
	}
}

// times returns when each of the count known sequences in from..to was
// stored, or nil when the index does not know all of them with their times
// (then the sink reads the events' headers for them).
func (ix *seqIndex) times(from, to uint64, count int) *work.Times {
	var t *work.Times
	n := 0
	for _, r := range ix.runs {
		if r.last < from {
			continue
		}
		if r.first > to {
			break
		}
		if r.offMs == nil {
			return nil
		}
		base := r.at.UnixMilli()
		if t == nil {
			t = &work.Times{BaseMs: base, OffsetsMs: make([]uint32, 0, count)}
		}
		for seq := max(r.first, from); seq <= min(r.last, to); seq++ {
			if n == count || !t.Add(base+int64(r.offMs[seq-r.first])) {
				return nil
			}
			n++
		}
	}
	if n != count {
		return nil
	}
	return t
}

// bodies returns the held bodies of the count known sequences in
// from..to, with their store times, or nil when the index does not hold
// every one of them (the item is then read from PRODUCTS).
func (ix *seqIndex) bodies(from, to uint64, count int) []work.Body {
	var out []work.Body
	for i := range ix.runs {
		r := &ix.runs[i]
		if r.last < from {
			continue
		}
		if r.first > to {
			break
		}
		if r.offMs == nil || r.bodies == nil {
			return nil
		}
		if out == nil {
			out = make([]work.Body, 0, count)
		}
		base := r.at.UnixMilli()
		for seq := max(r.first, from); seq <= min(r.last, to); seq++ {
			b := r.body(seq)
			if b == nil || len(out) == count {
				return nil
			}
			out = append(out, work.Body{Seq: seq, StoredMs: base + int64(r.offMs[seq-r.first]), Op: b.op, Data: b.data})
		}
	}
	if len(out) != count {
		return nil
	}
	return out
}

// lacksBody says whether seq is in the index without its body.
func (ix *seqIndex) lacksBody(seq uint64) bool {
	r := ix.run(seq)
	return r != nil && r.body(seq) == nil
}

// missingBodies counts the sequences from..to of the index that lack
// their bodies.
func (ix *seqIndex) missingBodies(from, to uint64) (n int) {
	for i := range ix.runs {
		r := &ix.runs[i]
		if r.last < from {
			continue
		}
		if r.first > to {
			break
		}
		for seq := max(r.first, from); seq <= min(r.last, to); seq++ {
			if r.body(seq) == nil {
				n++
			}
		}
	}
	return n
}

// bodiedPrefix counts the sequences of the index from from on, up to to,
// that have their bodies, up to the first that has not, and returns the
// last of them.
func (ix *seqIndex) bodiedPrefix(from, to uint64) (n int, last uint64) {
	for i := range ix.runs {
		r := &ix.runs[i]
		if r.last < from {
			continue
		}
		if r.first > to {
			break
		}
		for seq := max(r.first, from); seq <= min(r.last, to); seq++ {
			if r.body(seq) == nil {
				return n, last
			}
			n, last = n+1, seq
		}
	}
	return n, last
}

// attach gives seq, a sequence of the index without its body, its body;
// it reports whether the index took it (and one reference of it).
func (ix *seqIndex) attach(seq uint64, body *heldBody) bool {
	r := ix.run(seq)
	if r == nil || r.body(seq) != nil {
		return false
	}
	if r.bodies == nil {
		r.bodies = make([]*heldBody, r.last-r.first+1)
	}
	r.bodies[seq-r.first] = body
	return true
}

// run returns the run that holds seq, or nil.
func (ix *seqIndex) run(seq uint64) *seqRun {
	if seq < ix.floor {
		return nil
	}
	i, _ := slices.BinarySearchFunc(ix.runs, seq, func(r seqRun, seq uint64) int {
		return cmp.Compare(r.last, seq)
	})
	if i == len(ix.runs) || ix.runs[i].first > seq {
		return nil
	}
	return &ix.runs[i]
}

// take cuts up to n known events at or after cursor into batches of at
// most size events, as cut does for a read (tight ranges, sequences listed
// for small sparse batches). It returns
// the store time of the first event taken (approximately: its run's first
// event) and how many known events remain after those taken. It does not
// forget what it took: trim does, once the cursor has moved.
func (ix *seqIndex) take(cursor uint64, n, size int) (ranges []tenancy.Range, counts []int, lists [][]uint64, at time.Time, rest uint64) {
	return ix.takeBytes(cursor, n, size, 0)
}

// takeBytes is take with batches of held bodies bounded to about maxBytes
// of them (0: no bound), so that a work item carrying them fits in one
// NATS message. A batch holds at least one event.
func (ix *seqIndex) takeBytes(cursor uint64, n, size, maxBytes int) (ranges []tenancy.Range, counts []int, lists [][]uint64, at time.Time, rest uint64) {
	ix.trim(cursor)
	if len(ix.runs) > 0 {
		at = ix.runs[0].at
	}
	var from uint64
	inBatch, inBytes, taken := 0, 0, 0
	for i := range ix.runs {
		r := &ix.runs[i]
		if taken == n {
			break
		}
		lastRun := i == len(ix.runs)-1
		for seq := r.first; seq <= r.last && taken < n; {
			if inBatch == 0 {
				from = seq
			}
			// As much of the run as the batch and n allow.
			k := min(r.last-seq+1, uint64(size-inBatch), uint64(n-taken))
			full := false
			if maxBytes > 0 && r.bodies != nil {
				// As much of that as the batch's bytes allow.
				most := k
				for k = 0; k < most; k++ {
					c := 0
					if b := r.body(seq + k); b != nil {
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
			if inBatch == size || full || taken == n || seq > r.last && lastRun {
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
	return ranges, counts, lists, at, uint64(ix.n - taken)
}

// list returns the known sequences in r.
func (ix *seqIndex) list(r tenancy.Range) []uint64 {
	var out []uint64
	for _, run := range ix.runs {
		for seq := max(run.first, r.From); seq <= min(run.last, r.To); seq++ {
			out = append(out, seq)
		}
		if run.last >= r.To {
			break
		}
	}
	return out
}
