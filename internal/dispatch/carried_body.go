package dispatch

import (
	"sync"
	"sync/atomic"

	"github.com/fairwayhq/fairway/pkg/events"
)

// heldBody is one event's stored data as the doorbell delivered it, kept
// so that the work item covering the event carries it and the sink need
// not read PRODUCTS (work.Item.Bodies). Every destination index that holds
// it counts one reference; the last to let it go returns its bytes to the
// budget. The data itself lives as long as anything refers to it (an item
// being published keeps it after its index forgot it).
type heldBody struct {
	data   []byte
	op     events.Op
	cost   int64 // what it counts against the budget
	refs   atomic.Int32
	budget *bodyBudget
}

// release drops one reference.
func (b *heldBody) release() {
	if b != nil && b.refs.Add(-1) == 0 {
		b.budget.free(b.cost)
	}
}

// bodyOverhead is what a held body costs beyond its data: the message it
// arrived in (subject, headers, reply) and its bookkeeping, about.
const bodyOverhead = 160

// bodyBudget bounds the bytes of held bodies (Config.BodyBudget). An event
// whose body does not fit is indexed without it, and so is every later
// one until the refill (body_refill.go) has read the bodies it could not
// hold: the bodies held stay the oldest ones, which the grants take next,
// and the events past them get theirs from one contiguous read once the
// grants have freed room, not from a read per item at the sinks.
type bodyBudget struct {
	max  int64
	used atomic.Int64

	// open says a gap is open: mu guards it with from and to.
	open atomic.Bool
	mu   sync.Mutex
	gap  bodyGap
	// roomy is signalled when a gap is open and a release has freed a
	// quarter of the budget.
	roomy chan struct{}
}

// bodyGap is the range of sequences whose bodies the budget could not
// hold: from is the lowest the refill has not read yet, to the highest the
// doorbell or the backfill dropped. restart says a body below the
// refill's position was dropped since its pass began.
type bodyGap struct {
	from, to uint64
	restart  bool
}

func newBodyBudget(max int64) *bodyBudget {
	return &bodyBudget{max: max, roomy: make(chan struct{}, 1)}
}

// holdAt returns a heldBody for the data of the event at seq with refs
// references, or nil when it is not to be held: the budget is off (max
// 0), nothing is to hold it, or the budget has no room for it or a gap
// open before it (then the gap grows to cover seq).
func (bb *bodyBudget) holdAt(seq uint64, data []byte, op events.Op, refs int) *heldBody {
	if bb == nil || bb.max <= 0 || refs < 1 || op == "" || len(data) == 0 {
		return nil
	}
	if bb.open.Load() {
		bb.mu.Lock()
		if bb.gap.from != 0 && seq >= bb.gap.from {
			bb.gap.to = max(bb.gap.to, seq)
			bb.mu.Unlock()
			return nil
		}
		bb.mu.Unlock()
	}
	b := bb.reserve(data, op, refs)
	if b == nil {
		bb.drop(seq)
	}
	return b
}

// drop records that the body of seq was not held.
func (bb *bodyBudget) drop(seq uint64) {
	bb.mu.Lock()
	defer bb.mu.Unlock()
	switch {
	case bb.gap.from == 0:
		bb.gap = bodyGap{from: seq, to: seq}
	case seq < bb.gap.from:
		bb.gap.from, bb.gap.restart = seq, true
	}
	bb.gap.to = max(bb.gap.to, seq)
	bb.open.Store(true)
	bb.free(0) // in case the releases that made room came before the gap
}

// hold returns a heldBody for data with refs references, or nil when the
// budget has no room for it (or is off: max 0).
func (bb *bodyBudget) hold(data []byte, op events.Op, refs int) *heldBody {
	if bb == nil || bb.max <= 0 || refs < 1 || op == "" || len(data) == 0 {
		return nil
	}
	return bb.reserve(data, op, refs)
}

// reserve is hold for arguments hold accepts.
func (bb *bodyBudget) reserve(data []byte, op events.Op, refs int) *heldBody {
	cost := int64(len(data)) + bodyOverhead
	if bb.used.Add(cost) > bb.max {
		bb.used.Add(-cost)
		return nil
	}
	b := &heldBody{data: data, op: op, cost: cost, budget: bb}
	b.refs.Store(int32(refs))
	return b
}

// free returns cost bytes to the budget, and tells the refill when a gap
// waits and a quarter of the budget is free.
func (bb *bodyBudget) free(cost int64) {
	if used := bb.used.Add(-cost); bb.open.Load() && used <= bb.max-bb.max/4 {
		select {
		case bb.roomy <- struct{}{}:
		default:
		}
	}
}

// inGap says whether seq's body may come from the refill: a gap is open
// and seq is in it.
func (bb *bodyBudget) inGap(seq uint64) bool {
	if bb == nil || !bb.open.Load() {
		return false
	}
	bb.mu.Lock()
	defer bb.mu.Unlock()
	return bb.gap.from != 0 && seq >= bb.gap.from && seq <= bb.gap.to
}

// pressed says whether half the budget or more is in use (never when the
// budget is off): bodies held back for more of a backlog to come would
// soon not fit, and the events after them would go without theirs.
func (bb *bodyBudget) pressed() bool {
	return bb != nil && bb.max > 0 && bb.used.Load() >= bb.max/2
}
