package dispatch

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/dispatch/scheduler"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// The refill reads, in one pass of an ordered consumer, the bodies the
// budget could not hold when the doorbell or the backfill delivered them
// (bodyBudget's gap), and hands them to the indexes that still wait for
// them, as room frees. Without it, every item cut from the gap would be
// read by its sink: for tenants whose events interleave, a filtered scan
// of the stream per item, whose cost grows with the number of tenants.
// With it, what overflowed the budget is read twice in stream order, and
// the grants of tenants with a batch or more waiting hold back a moment
// for their bodies (waitForBodies) rather than go out bare.

// refillLoop runs a refill pass whenever a gap is open and the budget has
// room, until ctx ends.
func (d *Dispatcher) refillLoop(ctx context.Context) {
	bb := d.bodies
	for {
		select {
		case <-ctx.Done():
			return
		case <-bb.roomy:
		}
		for ctx.Err() == nil && bb.open.Load() && bb.used.Load() <= bb.max-bb.max/4 {
			if err := d.refill(ctx); err != nil {
				d.log.Warn("refilling event bodies failed; retrying", "err", err)
				sleepCtx(ctx, d.cfg.RetryDelay)
			}
		}
	}
}

// refill runs one pass: from the gap's start until the gap is read, the
// budget is full again, or a body below the pass's position was dropped
// (the next pass starts there).
func (d *Dispatcher) refill(ctx context.Context) error {
	bb := d.bodies
	bb.mu.Lock()
	from := bb.gap.from
	bb.gap.restart = false
	bb.mu.Unlock()
	if from == 0 {
		return nil
	}
	pass, cancel := context.WithCancel(ctx)
	defer cancel()
	cons, err := d.bellJS.OrderedConsumer(pass, d.cfg.Stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   from,
	})
	if err != nil {
		return fmt.Errorf("refill consumer: %w", err)
	}
	done := make(chan struct{})
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if pass.Err() != nil {
			return
		}
		md, err := m.Metadata()
		if err != nil {
			return
		}
		seq := md.Sequence.Stream
		full := false
		if tenant, ok := subjectTenant(m.Subject()); ok {
			full = d.refillBody(ctx, tenant, seq, m.Data(), subjectOp(m.Subject(), tenant))
		}
		bb.mu.Lock()
		end := true
		switch {
		case bb.gap.restart:
		case full:
			bb.gap.from = seq
		case seq >= bb.gap.to:
			bb.gap = bodyGap{}
			bb.open.Store(false)
		default:
			bb.gap.from, end = seq+1, false
		}
		bb.mu.Unlock()
		if end {
			cancel()
			close(done)
		}
	}, jetstream.PullMaxMessages(doorbellPull), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		d.log.Debug("refill consumer", "err", err)
	}))
	if err != nil {
		return fmt.Errorf("refill consume: %w", err)
	}
	defer cc.Stop()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// refillBody hands the body of the tenant's event at seq to the indexes
// of the destinations this dispatcher owns that hold the sequence without
// it. full says the budget had no room for it.
func (d *Dispatcher) refillBody(ctx context.Context, tenant string, seq uint64, data []byte, op events.Op) (full bool) {
	var want []*destination
	for _, x := range d.destsOf(ctx, tenant, false) {
		if d.owns(tenant, x.name) && x.wantsBody(tenant, seq) {
			want = append(want, x)
		}
	}
	if len(want) == 0 {
		return false
	}
	body := d.bodies.hold(data, op, len(want))
	if body == nil {
		return op != "" && len(data) > 0
	}
	for _, x := range want {
		if !x.attachBody(tenant, seq, body) {
			body.release()
		}
	}
	d.m.refilled.Add(1)
	return false
}

// wantsBody says whether the tenant's index holds seq, not yet dispatched,
// without its body.
func (x *destination) wantsBody(tenant string, seq uint64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	ts := x.tenants[tenant]
	return ts != nil && seq >= ts.cursor && x.indexOf(ts, seq).lacksBody(seq)
}

// attachBody gives the tenant's index the body of seq; it reports whether
// the index took it (and its reference). A grant held back for its bodies
// (waitForBodies) goes on once a batch of them has come.
func (x *destination) attachBody(tenant string, seq uint64, body *heldBody) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	ts := x.tenants[tenant]
	if ts == nil || seq < ts.cursor || !x.indexOf(ts, seq).attach(seq, body) {
		return false
	}
	switch {
	case ts.bodyNeed > 1:
		ts.bodyNeed--
	case ts.bodyNeed == 1:
		x.endHold(x.key(tenant), ts, ts.hold)
		ts.bodyWaited = false // the wait was worth it: the next one may wait too
	}
	return true
}

// indexOf is the index that holds seq: the doorbell's from liveFrom on,
// else the backfill's. x.mu must be held.
func (x *destination) indexOf(ts *tenantState, seq uint64) *seqIndex {
	if lf := x.d.liveFrom.Load(); lf != 0 && seq >= lf {
		return &ts.live
	}
	return &ts.back
}

// bodyWaitMax is how long a grant held back for its bodies
// (waitForBodies) waits at most.
const bodyWaitMax = 250 * time.Millisecond

// carried trims a grant cut from the index while a gap is open to what
// carries its bodies: the batches, from the first, that carry them, and
// the others stay in the index for the refill. When the first lacks
// bodies that are to come from the refill, it keeps the part of it that
// has them if that is half a batch or more; otherwise a tenant with a
// batch or more waiting is held back (held true) until they have come,
// bodyWaitMax has passed or a slot is released, and its next grant after
// a wait that timed out keeps that part, however short, or goes out
// without bodies. A tenant with less waits for nothing: its sink reads
// its few events by sequence. Returning the part that has its bodies
// frees the budget the refill needs to bring the rest.
func (x *destination) carried(k scheduler.Key, ts *tenantState, b *cutBatches) (held bool) {
	keep := 0
	for keep < len(b.bodies) && b.bodies[keep] != nil {
		keep++
	}
	if keep == len(b.ranges) || !x.d.bodies.inGap(b.ranges[keep].To) {
		return false
	}
	if keep > 0 {
		b.keep(keep)
		return false
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	r := b.ranges[0]
	ix := x.indexOf(ts, r.From)
	part, last := ix.bodiedPrefix(r.From, r.To)
	switch {
	case part >= max(x.size/2, 1) || part > 0 && ts.bodyWaited:
		ts.bodyWaited = false
		b.keep(1)
		b.pending += uint64(b.counts[0] - part)
		b.ranges[0], b.counts[0], b.times[0] = tenancy.Range{From: r.From, To: last}, part, nil
		b.bodies[0] = ix.bodies(r.From, last, part)
		b.lists[0] = nil
		if listSeqs(b.ranges[0], part) {
			b.lists[0] = ix.list(b.ranges[0])
		}
		return false
	case ts.bodyWaited || ts.live.count()+ts.back.count() < x.size:
		ts.bodyWaited = false
		return false
	}
	ts.bodyWaited = true
	x.d.m.bodyWaits.WithLabelValues(x.name).Inc()
	x.holdBack(k, ts, bodyWaitMax)
	ts.bodyNeed = ix.missingBodies(r.From, r.To)
	return true
}

// cutBatches are a grant's batches as cut: per batch its range, its count
// of events, its sequences when listed, its events' store times and
// bodies when known; pending counts the tenant's events after them.
type cutBatches struct {
	ranges  []tenancy.Range
	counts  []int
	lists   [][]uint64
	times   []*work.Times
	bodies  [][]work.Body
	pending uint64
}

// keep keeps the first n batches; the others' events count as pending.
func (b *cutBatches) keep(n int) {
	for _, c := range b.counts[n:] {
		b.pending += uint64(c)
	}
	b.ranges, b.counts, b.lists, b.times, b.bodies = b.ranges[:n], b.counts[:n], b.lists[:n], b.times[:n], b.bodies[:n]
}
