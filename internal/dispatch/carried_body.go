package dispatch

import (
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

// subjectOp is the op of an event subject of tenant (subjectTenant
// accepted it), or "" when it is no known op.
func subjectOp(subject, tenant string) events.Op {
	op := events.Op(subject[len(events.SubjectPrefix)+1+len(tenant)+1:])
	if !op.Valid() {
		return ""
	}
	return op
}

// release drops one reference.
func (b *heldBody) release() {
	if b != nil && b.refs.Add(-1) == 0 {
		b.budget.used.Add(-b.cost)
	}
}

// bodyOverhead is what a held body costs beyond its data: the message it
// arrived in (subject, headers, reply) and its bookkeeping, about.
const bodyOverhead = 160

// bodyBudget bounds the bytes of held bodies (Config.BodyBudget). An event
// that does not fit is indexed without its body, and its work item is read
// from PRODUCTS by the sink.
type bodyBudget struct {
	max  int64
	used atomic.Int64
}

// hold returns a heldBody for data with refs references, or nil when the
// budget has no room for it (or is off: max 0).
func (bb *bodyBudget) hold(data []byte, op events.Op, refs int) *heldBody {
	if bb == nil || bb.max <= 0 || refs < 1 || op == "" || len(data) == 0 {
		return nil
	}
	cost := int64(len(data)) + bodyOverhead
	if bb.used.Add(cost) > bb.max {
		bb.used.Add(-cost)
		return nil
	}
	b := &heldBody{data: data, op: op, cost: cost, budget: bb}
	b.refs.Store(int32(refs))
	return b
}
