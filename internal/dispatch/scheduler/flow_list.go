package scheduler

// flow is the scheduler's state for one (tenant, destination) pair. Flows
// live in Scheduler.flows for as long as the scheduler knows the key; a flow
// sits in at most one of the lists (new flows, current round, next round),
// and only while it is eligible (backlog > 0, not blocked or parked, no
// grant outstanding).
type flow struct {
	key     Key
	weight  int   // configured weight, clamped to [WeightMin, WeightMax]
	backlog int64 // events the dispatcher says are waiting (a hint)

	// deficit is the credit left in cost units. It is at most the quantum
	// of the flow's latest visit and may go negative by the overdraft of a
	// batch's last event; debt is repaid from later quanta. Positive credit
	// counts only in the round of lastRound: the next quantum replaces it.
	deficit int64

	// lastRound is the round in which the flow last received a quantum;
	// 0 means never (rounds start at 1). A flow receives at most one
	// quantum per round.
	lastRound uint64
	// quantum is the credit the flow received in lastRound and spent the
	// cost charged since: they place it among the new flows (newTier).
	quantum, spent int64

	blocked bool // at its slot limit
	parked  bool // another dispatcher grants it (SetParked)
	granted bool // a grant is outstanding (between Next and Done)
	// grantMax is the outstanding grant's MaxEvents: a grant that
	// dispatched fewer found less than the backlog hint said.
	grantMax int64

	// activated: the flow went from no backlog to some and has not been
	// queued since; requeue decides whether it goes on the new-flows list.
	activated bool
	// fromNew: the flow's latest grant came from the new-flows list, so
	// with credit left in the same round it goes back there.
	fromNew bool
	// visiting: the flow heads the new-flows list to go on with its visit
	// (requeue), where a growing backlog does not move it (retier).
	visiting bool

	list       *flowList // nil when in no list
	prev, next *flow

	win *window // events dispatched recently; nil unless dampening is on
}

// eligible reports whether the flow belongs in a list.
func (f *flow) eligible() bool {
	return f.backlog > 0 && !f.blocked && !f.parked && !f.granted
}

// flowList is an intrusive doubly-linked FIFO of flows: push, pop and
// removal from the middle are O(1) and allocate nothing.
type flowList struct {
	head, tail *flow
	len        int
}

func (l *flowList) pushBack(f *flow) {
	f.list, f.prev, f.next = l, l.tail, nil
	if l.tail != nil {
		l.tail.next = f
	} else {
		l.head = f
	}
	l.tail = f
	l.len++
}

func (l *flowList) pushFront(f *flow) {
	f.list, f.prev, f.next = l, nil, l.head
	if l.head != nil {
		l.head.prev = f
	} else {
		l.tail = f
	}
	l.head = f
	l.len++
}

// remove unlinks f, which must be in l.
func (l *flowList) remove(f *flow) {
	if f.prev != nil {
		f.prev.next = f.next
	} else {
		l.head = f.next
	}
	if f.next != nil {
		f.next.prev = f.prev
	} else {
		l.tail = f.prev
	}
	f.list, f.prev, f.next = nil, nil, nil
	l.len--
}
