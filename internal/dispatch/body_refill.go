package dispatch

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/pkg/events"
)

// The refill reads, in one pass of an ordered consumer, the bodies the
// budget could not hold when the doorbell or the backfill delivered them
// (bodyBudget's gap), and hands them to the indexes that still wait for
// them, as room frees. Without it, every item cut from the gap would be
// read by its sink: for tenants whose events interleave, a filtered scan
// of the stream per item, whose cost grows with the number of tenants.
// With it, what overflowed the budget is read twice in stream order, and
// the grants of tenants with a batch or more waiting hold back a moment
// for their bodies (carried, gate.go) rather than go out bare.

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
		if tenant, op, p, ok := parseSubject(m.Subject()); ok {
			full = d.refillBody(ctx, tenant, p, seq, m.Data(), op)
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

// refillBody hands the body of the tenant's event of priority p at seq to
// the indexes of the destinations this dispatcher owns that hold the
// sequence without it. full says the budget had no room for it.
func (d *Dispatcher) refillBody(ctx context.Context, tenant string, p events.Priority, seq uint64, data []byte, op events.Op) (full bool) {
	var want []*destination
	for _, x := range d.destsOf(ctx, tenant, false) {
		if d.owns(tenant, x.name) && x.wantsBody(tenant, p, seq) {
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
		if !x.attachBody(tenant, p, seq, body) {
			body.release()
		}
	}
	d.m.refilled.Add(1)
	return false
}

// wantsBody says whether the index of the tenant's events of priority p
// holds seq, not yet dispatched, without its body.
func (x *destination) wantsBody(tenant string, p events.Priority, seq uint64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	ts := x.tenants[laneKey(tenant, p)]
	return ts != nil && seq >= ts.cursor && x.indexOf(ts, seq).lacksBody(seq)
}

// attachBody gives the tenant's index the body of seq; it reports whether
// the index took it (and its reference). A grant held back for its bodies
// (waitForBodies) goes on once a batch of them has come.
func (x *destination) attachBody(tenant string, p events.Priority, seq uint64, body *heldBody) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	ts := x.tenants[laneKey(tenant, p)]
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

// indexOf is the index that holds seq: the doorbell's from where it
// began delivering the tenant's partition on, else the backfill's. x.mu
// must be held.
func (x *destination) indexOf(ts *tenantState, seq uint64) *seqIndex {
	if lf := x.d.parts.liveFrom(ts.part); lf != 0 && seq >= lf {
		return &ts.live
	}
	return &ts.back
}
