package scheduler

import (
	"cmp"
	"fmt"
	"math/bits"
	"sync"
	"time"
)

const (
	// QuantumDefault is the default Config.Quantum: with cost counted in
	// events it equals MaxBatchDefault, so a weight-w tenant gets w full
	// batches per round.
	QuantumDefault int64 = 500
	// QuantumMax bounds Config.Quantum so that Quantum·WeightMax fits an
	// int64 with room for overdraft.
	QuantumMax int64 = 1 << 40

	// MaxBatchDefault is the default Config.MaxBatch.
	MaxBatchDefault = 500

	// WeightMin and WeightMax bound a tenant's weight; SetBacklog clamps
	// to them (a weight of 0 counts as 1).
	WeightMin = 1
	WeightMax = 10_000

	// DampeningWindowDefault is the default Dampening.Window.
	DampeningWindowDefault = time.Minute
	// DampeningWindowMin is the smallest Dampening.Window accepted: the
	// window is kept in windowBuckets buckets of at least a millisecond.
	DampeningWindowMin = windowBuckets * time.Millisecond
	// DampeningFactorDefault is the default Dampening.Factor.
	DampeningFactorDefault = 2.0
	// DampeningMinWeightDefault is the default Dampening.MinWeight.
	DampeningMinWeightDefault = 0.1
)

// Config configures a Scheduler. The zero value is valid: cost counted in
// events, 500-event quanta and batches, no dampening, time.Now.
type Config struct {
	// Quantum is the credit, in cost units, that a weight-1 tenant receives
	// per round; a tenant of weight w receives w·Quantum. The cost unit is
	// the caller's choice and must be the same in Done: events (the
	// default; set Quantum near MaxBatch) or bytes (set Quantum near the
	// bytes of a typical batch, e.g. 256 KiB) when event sizes vary and
	// fairness should follow the work a sink does. Default QuantumDefault
	// (500). Range [1, QuantumMax].
	Quantum int64

	// MaxBatch caps Grant.MaxEvents, the events one grant may read. Default
	// MaxBatchDefault (500). Must be >= 1.
	MaxBatch int

	// LoneRounds lets a key that is alone when its visit begins (no other
	// key listed, no other grant outstanding) take up to this many rounds'
	// quanta in one visit, as long as its credit stays within MaxBatch, so
	// a lone tenant is served in fewer, larger grants. Nobody is waiting,
	// so no share is taken from anyone: the rounds it takes at once are
	// rounds it would have had alone one after the other, and a key that
	// arrives during the grant is served before the lone key's next one.
	// The credit cap compares cost with events, so leave it at 1 when
	// cost is counted in bytes. Default 1 (off).
	LoneRounds int

	// Dampening, when not nil, lowers the effective weight of a tenant that
	// dispatched more than Dampening.Threshold events within
	// Dampening.Window. Default nil: off.
	Dampening *Dampening

	// Clock returns the current time; only dampening reads it. Default
	// time.Now.
	Clock func() time.Time
}

// Dampening is an optional per-destination rule against greedy tenants (the
// sliding-window idea of sidekiq-fair-tenant): while a tenant has dispatched
// more than Threshold events within the last Window, its effective weight is
// max(weight/Factor, MinWeight). The effective weight is decided when the
// tenant's quantum is added at the start of its visit in a round.
type Dampening struct {
	// Threshold is the number of events within Window above which a tenant
	// is dampened. Required: must be >= 1.
	Threshold int64

	// Window is the length of the sliding window. It is tracked in 10
	// buckets, so an event counts for between 0.9·Window and Window after
	// it was dispatched. Default DampeningWindowDefault (1 minute); at
	// least DampeningWindowMin.
	Window time.Duration

	// Factor divides the weight of a dampened tenant. Default
	// DampeningFactorDefault (2). Must be >= 1.
	Factor float64

	// MinWeight is the floor of a dampened tenant's effective weight, so a
	// dampened tenant still gets a share. Default DampeningMinWeightDefault
	// (0.1). Range (0, 1].
	MinWeight float64
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
// The Dampening rule, if any, is copied, never modified in place.
func (c Config) WithDefaults() Config {
	c.Quantum = cmp.Or(c.Quantum, QuantumDefault)
	c.MaxBatch = cmp.Or(c.MaxBatch, MaxBatchDefault)
	c.LoneRounds = cmp.Or(c.LoneRounds, 1)
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Dampening != nil {
		d := *c.Dampening
		d.Window = cmp.Or(d.Window, DampeningWindowDefault)
		d.Factor = cmp.Or(d.Factor, DampeningFactorDefault)
		d.MinWeight = cmp.Or(d.MinWeight, DampeningMinWeightDefault)
		c.Dampening = &d
	}
	return c
}

func (c Config) validate() error {
	if c.Quantum < 1 || c.Quantum > QuantumMax {
		return fmt.Errorf("%w: Quantum %d outside [1, %d]", ErrInvalidConfig, c.Quantum, QuantumMax)
	}
	if c.MaxBatch < 1 {
		return fmt.Errorf("%w: MaxBatch %d < 1", ErrInvalidConfig, c.MaxBatch)
	}
	if c.LoneRounds < 1 {
		return fmt.Errorf("%w: LoneRounds %d < 1", ErrInvalidConfig, c.LoneRounds)
	}
	if d := c.Dampening; d != nil {
		if d.Threshold < 1 {
			return fmt.Errorf("%w: Dampening.Threshold %d < 1", ErrInvalidConfig, d.Threshold)
		}
		if d.Window < DampeningWindowMin {
			return fmt.Errorf("%w: Dampening.Window %s < %s", ErrInvalidConfig, d.Window, DampeningWindowMin)
		}
		if !(d.Factor >= 1) { // also rejects NaN
			return fmt.Errorf("%w: Dampening.Factor %v < 1", ErrInvalidConfig, d.Factor)
		}
		if !(d.MinWeight > 0 && d.MinWeight <= 1) {
			return fmt.Errorf("%w: Dampening.MinWeight %v outside (0, 1]", ErrInvalidConfig, d.MinWeight)
		}
	}
	return nil
}

// Key names one queue: a tenant's events for one destination. A Scheduler
// serves one destination, so Dest is the same for all its keys in practice;
// it is part of the key so grants and logs are self-describing.
type Key struct {
	Tenant, Dest string
}

// Grant allows the dispatcher to dispatch one batch of Key's events.
type Grant struct {
	Key Key
	// MaxEvents is the most events the batch may hold: min(MaxBatch,
	// backlog). Always >= 1.
	MaxEvents int
	// MaxCost is the tenant's credit in cost units. The batch should stop
	// before its cost would exceed MaxCost, but always holds at least one
	// event: the overdraft of that event is charged in Done and repaid
	// from later quanta. Always >= 1. Allows implements the rule.
	MaxCost int64
}

// Allows reports whether a batch that already holds taken events costing
// spent may add one more event costing next: taken < MaxEvents, and either
// the batch is empty or spent+next <= MaxCost.
func (g Grant) Allows(taken int, spent, next int64) bool {
	return taken < g.MaxEvents && (taken == 0 || spent+next <= g.MaxCost)
}

// Stats is a snapshot of a Scheduler's counters.
type Stats struct {
	Known    int // keys the scheduler holds state for (idle ones too)
	Active   int // keys with backlog waiting their turn: not blocked, no grant outstanding
	Blocked  int // keys marked blocked (at their slot limit)
	Parked   int // keys another dispatcher grants (SetParked)
	InFlight int // grants handed out by Next and not yet Done

	Round          uint64 // current round number, starting at 1
	Grants         uint64 // grants handed out since New
	Scans          uint64 // queue entries Next examined; Scans/Grants is the amortised cost of Next
	DampenedVisits uint64 // visits whose quantum was lowered by dampening
	LoneRounds     uint64 // extra rounds lone keys took in one visit (Config.LoneRounds)
}

// Scheduler orders dispatch for one destination by weighted deficit round
// robin over its tenants with backlog. See the package documentation for
// the algorithm and its invariants.
//
// A Scheduler is safe for concurrent use: every method takes one mutex and
// does O(1) work (Next is O(1) amortised), and none blocks or calls out.
type Scheduler struct {
	mu  sync.Mutex
	cfg Config

	flows map[Key]*flow

	// newFlows holds flows that have just become active with credit for
	// the current round; Next serves it before the rounds (sparse-flow
	// priority, see the package documentation). It is kept in tiers by
	// the share of the round's quantum a flow will have spent once its
	// next grant is served (newTier), each in arrival order, and Next
	// serves the lowest tier first.
	newFlows [newTiers]flowList

	// lists[cur] holds the flows still to be visited in the current round
	// (in visiting order); lists[1-cur] the flows waiting for the next one.
	lists [2]flowList
	cur   int
	round uint64

	bucketWidth int64 // nanoseconds per dampening bucket; 0 when off

	blocked, parked, inFlight                 int
	grants, scans, dampenedVisits, loneRounds uint64
}

// New returns a Scheduler for one destination, with cfg's zero fields
// defaulted (see Config).
func New(cfg Config) (*Scheduler, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Scheduler{cfg: cfg, flows: make(map[Key]*flow), round: 1}
	if cfg.Dampening != nil {
		s.bucketWidth = int64(cfg.Dampening.Window / windowBuckets)
	}
	return s, nil
}

// SetBacklog records that k has events waiting, with the tenant's weight
// (clamped to [WeightMin, WeightMax]). events is absolute, not a delta; 0
// makes k idle: it leaves the lists, keeping any debt, and what is left of
// its credit counts only until the round ends.
//
// A key that becomes active (it had no backlog) and has credit for the
// current round — it is not in debt and has not had this round's quantum,
// or has some of it left — goes on the new-flows list, which Next serves
// before the rounds: it is granted as soon as the new flows ahead of it
// have been. Any other key joins the current round if it has not had its
// quantum in it, else the next one, so it is granted within one round. The
// new weight takes effect at the key's next quantum.
//
// The backlog is a hint: Done subtracts what was dispatched, and the
// dispatcher corrects it whenever it learns better (a doorbell, or a read
// that found fewer events than granted).
func (s *Scheduler) SetBacklog(k Key, events int64, weight int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.flows[k]
	if f == nil {
		if events <= 0 {
			return
		}
		f = &flow{key: k}
		s.flows[k] = f
	}
	wasIdle := f.backlog == 0
	f.weight = min(max(weight, WeightMin), WeightMax)
	f.backlog = max(events, 0)
	if f.backlog == 0 {
		s.goIdle(f)
		return
	}
	if wasIdle {
		f.activated = true
	}
	if f.list != nil {
		s.retier(f)
		return
	}
	s.requeue(f, false)
}

// retier moves a flow waiting on the new-flows list to a later tier when
// its backlog has grown so that its next grant would take more (newTier):
// a flood that became active with one event, as a small tenant did, and
// has had hundreds more since goes behind the tenants still waiting with a
// few. It never moves a flow to an earlier tier, nor one whose visit goes
// on at the list's head.
func (s *Scheduler) retier(f *flow) {
	i := s.tierOf(f.list)
	if i < 0 || f.visiting {
		return
	}
	if t := s.newTier(f); t > i {
		f.list.remove(f)
		s.newFlows[t].pushBack(f)
	}
}

// SetBlocked marks k as at (true) or below (false) its slot limit. A
// blocked key leaves the round at O(1) cost and is never examined by Next;
// it is charged nothing and earns nothing while blocked. It keeps the credit
// left from its latest quantum and its round: unblocked in the same round,
// it is visited again in that round with what it had left; unblocked in a
// later round, it joins that round and gets one fresh quantum, its old
// positive credit dropped. So a key that blocks often gets at most one
// quantum per round, like everyone else. A key blocked while it waits on
// the new-flows list goes back to it when unblocked, if it still has credit
// for the round then; one blocked after a grant from that list goes back
// to it if unblocked in the same round with credit left.
//
// SetBlocked on an unknown key creates it (weight 1, no backlog), so a
// limit learned before any backlog is kept.
func (s *Scheduler) SetBlocked(k Key, blocked bool) {
	s.setOut(k, blocked, func(f *flow) *bool { return &f.blocked }, &s.blocked)
}

// SetParked takes k out of the rounds (true) while another dispatcher
// grants it, or brings it back (false). A parked key keeps its backlog
// hint, credit and place like a blocked one (see SetBlocked) and is never
// examined by Next. Parking and blocking are independent: a key is granted
// only when it is neither. SetParked on an unknown key creates it (weight
// 1, no backlog), so a key parked before its first doorbell stays parked.
func (s *Scheduler) SetParked(k Key, parked bool) {
	s.setOut(k, parked, func(f *flow) *bool { return &f.parked }, &s.parked)
}

// setOut sets one of the flags that keep k out of the rounds (flag) and
// its count: on unlinks k, off requeues it if it is eligible again. An
// unknown key is created for on (weight 1, no backlog) and ignored for off.
func (s *Scheduler) setOut(k Key, on bool, flag func(*flow) *bool, count *int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.flows[k]
	if f == nil {
		if !on {
			return
		}
		f = &flow{key: k, weight: WeightMin}
		s.flows[k] = f
	}
	p := flag(f)
	if *p == on {
		return
	}
	*p = on
	if on {
		*count++
		if s.isNew(f.list) {
			// Not served yet: back on the new-flows list when eligible
			// again, if it still has credit for the round then.
			f.activated = true
		}
		s.unlink(f)
		return
	}
	*count--
	if f.fromNew && f.lastRound != s.round {
		// Blocked after a grant from the new-flows list (a small tenant
		// at its one slot) and eligible again in a later round: a sparse
		// flow still, as if it had gone idle, with the new round's
		// quantum to spend there (if it is not in debt).
		f.activated = true
	}
	s.requeue(f, false)
}

// Next returns the next grant, or false when no key is dispatchable (all
// idle, blocked or with a grant outstanding). The granted key is not offered
// again until Done(Key, ...) is called for it, so a tenant's batches are
// read one at a time. Next is O(1) amortised in the number of keys.
func (s *Scheduler) Next() (Grant, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var epoch int64
	epochRead := false
	for {
		l := s.newHead()
		if l == nil {
			l = &s.lists[s.cur]
		}
		f := l.head
		if f == nil {
			if s.lists[1-s.cur].len == 0 {
				return Grant{}, false
			}
			s.cur = 1 - s.cur
			s.round++
			continue
		}
		s.scans++
		if f.lastRound != s.round {
			if s.bucketWidth > 0 && !epochRead {
				epoch, epochRead = s.epoch(), true
			}
			f.lastRound = s.round
			q := s.quantum(f, epoch)
			f.quantum, f.spent = q, 0
			f.deficit = min(f.deficit, 0) + q
			if f.deficit <= 0 { // still repaying an overdraft (never a new flow: it admits no debt)
				l.remove(f)
				s.lists[1-s.cur].pushBack(f)
				continue
			}
			if s.active() == 1 && s.inFlight == 0 {
				// Alone: take the next rounds now instead of one by one.
				for r := 1; r < s.cfg.LoneRounds && f.deficit+q <= int64(s.cfg.MaxBatch); r++ {
					f.deficit += q
					f.quantum += q
					s.round++
					f.lastRound = s.round
					s.loneRounds++
				}
			}
		}
		l.remove(f)
		f.fromNew = s.isNew(l)
		f.granted = true
		f.grantMax = min(int64(s.cfg.MaxBatch), f.backlog)
		s.inFlight++
		s.grants++
		return Grant{
			Key:       f.key,
			MaxEvents: int(f.grantMax),
			MaxCost:   f.deficit,
		}, true
	}
}

// Done ends k's outstanding grant, charging what was really dispatched:
// events read and their cost in the Config's cost unit (at least 1 when
// events > 0, so every batch makes progress). Either may be less than
// granted, or 0. With credit left after a grant that dispatched all it
// allowed (MaxEvents), k resumes its visit at the head of its list (the
// new-flows list if its grant came from there, else the current round);
// after one that dispatched fewer, the backlog hint was more than k had
// (a tenant whose events trickle in) and k goes to the tail (of its tier,
// on the new-flows list); with no credit, it waits for the next round. A
// key that Done leaves without backlog is idle, as with SetBacklog(k, 0,
// ...).
//
// events == 0 means nothing was dispatched. If k is blocked (taking its slot
// failed: call SetBlocked(k, true) before Done), it keeps its place and
// credit. Otherwise its turn ends and its credit for this round is dropped,
// so a key whose reads keep coming back empty cannot hold the round.
//
// Done returns ErrNoGrant when k has no grant outstanding.
func (s *Scheduler) Done(k Key, events, cost int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.flows[k]
	if f == nil || !f.granted {
		return fmt.Errorf("done %s/%s: %w", k.Tenant, k.Dest, ErrNoGrant)
	}
	f.granted = false
	s.inFlight--
	events, cost = max(events, 0), max(cost, 0)
	if events > 0 {
		cost = max(cost, 1)
		if s.bucketWidth > 0 {
			if f.win == nil {
				f.win = new(window)
			}
			f.win.add(s.epoch(), events)
		}
	}
	f.deficit -= cost
	f.spent += cost
	f.backlog = max(f.backlog-events, 0)
	if f.backlog == 0 {
		s.goIdle(f)
		return nil
	}
	if events == 0 && !f.blocked {
		f.deficit = min(f.deficit, 0)
	}
	// A visit goes on after a grant that dispatched all it was allowed; one
	// that found fewer events than granted had less waiting than its hint
	// said (a tenant whose events trickle in), and waits its turn again.
	s.requeue(f, events > 0 && events >= f.grantMax)
	return nil
}

// Remove forgets k: a deleted tenant, or a key idle long enough that its
// state (overdraft, dampening window) no longer matters. An outstanding
// grant for k is dropped; its Done returns ErrNoGrant.
func (s *Scheduler) Remove(k Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.flows[k]
	if f == nil {
		return
	}
	s.unlink(f)
	if f.blocked {
		s.blocked--
	}
	if f.parked {
		s.parked--
	}
	if f.granted {
		s.inFlight--
	}
	delete(s.flows, k)
}

// Stats returns a snapshot of the scheduler's counters.
func (s *Scheduler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{
		Known:          len(s.flows),
		Active:         s.active(),
		Blocked:        s.blocked,
		Parked:         s.parked,
		InFlight:       s.inFlight,
		Round:          s.round,
		Grants:         s.grants,
		Scans:          s.scans,
		DampenedVisits: s.dampenedVisits,
		LoneRounds:     s.loneRounds,
	}
}

// requeue puts an eligible flow that is in no list where it belongs:
//   - activated (it had no backlog) with credit for the round
//     (newFlowCredit): the tail of its tier of the new-flows list
//     (newTier);
//   - granted from the new-flows list and credit left in the same round:
//     the head of the new-flows list when continuing the batch it was
//     granted (its visit goes on), else the tail of its tier (back from
//     blocked);
//   - not yet visited this round: the tail of the current round;
//   - visited, credit left, continuing the batch it was granted: the head
//     of the current round (its visit goes on);
//   - visited, credit left, back from blocked: the tail of the current
//     round (spends what it has left, gets nothing new);
//   - visited, no credit left: the tail of the next round.
func (s *Scheduler) requeue(f *flow, continuing bool) {
	if f.list != nil || !f.eligible() {
		return
	}
	activated := f.activated
	f.activated = false
	f.visiting = false
	switch {
	case activated && s.newFlowCredit(f):
		s.newFlows[s.newTier(f)].pushBack(f)
		return
	case f.fromNew && f.lastRound == s.round && f.deficit > 0:
		if continuing { // its visit goes on, ahead of every tier
			s.newFlows[0].pushFront(f)
			f.visiting = true
		} else {
			s.newFlows[s.newTier(f)].pushBack(f)
		}
		return
	}
	f.fromNew = false
	cur := &s.lists[s.cur]
	switch {
	case f.lastRound != s.round:
		cur.pushBack(f)
	case f.deficit <= 0:
		s.lists[1-s.cur].pushBack(f)
	case continuing:
		cur.pushFront(f)
	default:
		cur.pushBack(f)
	}
}

func (s *Scheduler) unlink(f *flow) {
	if f.list != nil {
		f.list.remove(f)
	}
}

// newFlowCredit reports whether a flow that has just become active may be
// served from the new-flows list: it is not in debt, and it has not had
// this round's quantum or has some of it left. A flow that spent its
// quantum this round waits for the next round like any other, so going
// idle and active again earns nothing (see the package documentation).
func (s *Scheduler) newFlowCredit(f *flow) bool {
	if f.lastRound == s.round {
		return f.deficit > 0
	}
	return f.deficit >= 0
}

// newTierScale is the share of a quantum the first tier of the new-flows
// list holds less of (1/512: under one event of the default quantum of
// 500), and newTiers the number of tiers: one per doubling from there to
// the whole quantum, whose tier is bits.Len(newTierScale), the last. The
// first tiers are as narrow as one event so that a tenant with one event
// waiting goes before floods that became active a moment earlier with
// two or three.
const (
	newTierBits  = 9
	newTierScale = 1 << newTierBits
	newTiers     = newTierBits + 2
)

// newTier is the tier of the new-flows list f joins: the share of its
// round's quantum it will have spent once its next grant is served (what
// it spent so far plus that grant: its backlog, at most MaxBatch and what
// is left of the quantum), in tiers of doubling width from under
// 1/newTierScale to the whole quantum. A tenant that comes back now and
// then with a few events is served before one that comes back as often
// with more, and before a flood that has had nothing yet but would take a
// whole quantum: the order of finishing tags in fair queuing (the share
// after the grant, not before it), as least-attained-service scheduling
// would order them, at O(1) cost. A flow that has not had this round's
// quantum counts its whole quantum as left. The backlog is in events and
// the quantum in the cost unit: with cost counted in bytes the tiers are
// approximate, the shares are not (the quantum decides those).
func (s *Scheduler) newTier(f *flow) int {
	spent, q := f.spent, f.quantum
	if f.lastRound != s.round || q <= 0 {
		spent, q = 0, max(s.cfg.Quantum*int64(f.weight), 1)
	}
	next := min(f.backlog, int64(s.cfg.MaxBatch), max(q-spent, 1))
	return min(bits.Len64(uint64((spent+next)*newTierScale/q)), newTiers-1)
}

// newHead returns the lowest tier of the new-flows list that holds a
// flow, or nil when none does.
func (s *Scheduler) newHead() *flowList {
	for i := range s.newFlows {
		if s.newFlows[i].head != nil {
			return &s.newFlows[i]
		}
	}
	return nil
}

// tierOf is the tier of the new-flows list l is, or -1 when it is none
// (a round's list, or nil).
func (s *Scheduler) tierOf(l *flowList) int {
	for i := range s.newFlows {
		if l == &s.newFlows[i] {
			return i
		}
	}
	return -1
}

// isNew says whether l is a tier of the new-flows list.
func (s *Scheduler) isNew(l *flowList) bool { return s.tierOf(l) >= 0 }

// active counts the listed flows.
func (s *Scheduler) active() int {
	n := s.lists[0].len + s.lists[1].len
	for i := range s.newFlows {
		n += s.newFlows[i].len
	}
	return n
}

// goIdle takes a flow without backlog out of the lists. It keeps its
// credit: what is left of this round's quantum for a return within the
// round (the next quantum replaces it, so nothing is hoarded), and debt,
// so draining and refilling cannot erase an overdraft.
func (s *Scheduler) goIdle(f *flow) {
	s.unlink(f)
	f.activated, f.fromNew = false, false
}

// quantum returns the credit f earns for one visit: Quantum·weight, or
// Quantum·max(weight/Factor, MinWeight) while dampened; at least 1.
func (s *Scheduler) quantum(f *flow, epoch int64) int64 {
	d := s.cfg.Dampening
	if d == nil || f.win == nil || f.win.sum(epoch) <= d.Threshold {
		return s.cfg.Quantum * int64(f.weight)
	}
	s.dampenedVisits++
	w := max(float64(f.weight)/d.Factor, d.MinWeight)
	return max(int64(float64(s.cfg.Quantum)*w), 1)
}

func (s *Scheduler) epoch() int64 {
	return s.cfg.Clock().UnixNano() / s.bucketWidth
}
