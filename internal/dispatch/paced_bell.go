package dispatch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The doorbell's pull decides where a backlog that grows faster than the
// grants take it waits. A large pull keeps the doorbell at the stream's
// end: every event is indexed as soon as it is stored, so a small tenant's
// event is granted ahead of the floods at once, and the floods' wait in
// the index with their bodies. That holds while the body budget has room.
// Once it is full, bodies are dropped and read again (the refill, or the
// sinks one event at a time for tenants with few events waiting), and
// with thousands of interleaved floods those reads cost the server more
// than the stream's whole drain. A small pull (a round trip every half
// of it) lets the doorbell fall behind the floods being published instead,
// so the backlog waits in the stream.
//
// So the live doorbell reads ahead (doorbellPullAhead) while the budget is
// under a quarter used and no gap is open, and paces itself
// (doorbellPull) once half of it is used or a gap opened, with the
// quarter between as hysteresis. A switch stops the ordered consumer and
// starts a new one at the sequence after the last it delivered, so no
// event is missed or rung twice.
const (
	// doorbellPull is the paced pull, the backfill's and the refill's.
	doorbellPull = 4096
	// doorbellPullAhead is the pull while the body budget has room.
	doorbellPullAhead = 16384
	// bellPaceEvery is how often the doorbell's pull is reconsidered.
	bellPaceEvery = 50 * time.Millisecond
)

// pacedBell is the live doorbell's consumer: a jetstream.ConsumeContext
// whose ordered consumer is replaced when the pull changes.
type pacedBell struct {
	d      *Dispatcher
	handle jetstream.MessageHandler
	from   uint64 // where the doorbell started

	seq     *atomic.Uint64 // the sequence it is delivering now (the handler stores it)
	filters []string       // its reader's partitions' (partReads.filters)

	mu      sync.Mutex
	cc      jetstream.ConsumeContext
	pull    int
	stopped bool
	quit    chan struct{}
	closed  chan struct{} // closed once stopped and the last consumer's handler is done
}

// startPacedBell starts a live doorbell from sequence from on the
// partitions filters name (none: every one); handle stores each
// message's sequence in seq.
func (d *Dispatcher) startPacedBell(ctx context.Context, from uint64, filters []string, seq *atomic.Uint64, handle jetstream.MessageHandler) (*pacedBell, error) {
	p := &pacedBell{d: d, handle: handle, from: from, seq: seq, filters: filters, quit: make(chan struct{}), closed: make(chan struct{})}
	p.pull = p.wantPull(doorbellPull)
	cc, err := d.consumeStream(ctx, from, p.pull, filters, handle, "doorbell")
	if err != nil {
		return nil, err
	}
	p.cc = cc
	d.m.bellPull.Set(float64(p.pull))
	go p.pace(ctx)
	return p, nil
}

// wantPull is the pull the doorbell should have now, given it has cur.
func (p *pacedBell) wantPull(cur int) int {
	bb := p.d.bodies
	if bb == nil || bb.max <= 0 {
		return doorbellPullAhead // no bodies held: reading ahead costs the index only
	}
	used := bb.used.Load()
	switch {
	case bb.open.Load() || used >= bb.max/2:
		return doorbellPull
	case used < bb.max/4:
		return doorbellPullAhead
	}
	return cur
}

// pace switches the pull when the budget says so, until ctx ends or the
// doorbell is stopped.
func (p *pacedBell) pace(ctx context.Context) {
	t := time.NewTicker(bellPaceEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.quit:
			return
		case <-t.C:
		}
		p.mu.Lock()
		if want := p.wantPull(p.pull); (want != p.pull || p.cc == nil) && !p.stopped {
			p.switchPull(ctx, want)
		}
		p.mu.Unlock()
	}
}

// switchPull replaces the consumer with one asking for pull messages at a
// time, from the sequence after the last delivered. p.mu must be held. A
// consumer that cannot start is tried again at the next tick (p.cc nil).
func (p *pacedBell) switchPull(ctx context.Context, pull int) {
	d := p.d
	if !p.stopConsumer(ctx) {
		return
	}
	next := max(p.from, p.seq.Load()+1)
	cc, err := d.consumeStream(ctx, next, pull, p.filters, p.handle, "doorbell")
	if err != nil {
		if ctx.Err() == nil {
			d.log.Warn("restarting the doorbell failed; retrying", "from", next, "err", err)
			d.m.errors.WithLabelValues("", "doorbell").Inc()
		}
		return
	}
	d.log.Debug("doorbell pull", "pull", pull, "from", next)
	p.cc, p.pull = cc, pull
	d.m.bellSwitches.Inc()
	d.m.bellPull.Set(float64(pull))
}

// stopConsumer stops the consumer and waits for its handler to return for
// the last time; false when ctx ended first. p.mu must be held.
func (p *pacedBell) stopConsumer(ctx context.Context) bool {
	if p.cc == nil {
		return true
	}
	p.cc.Stop()
	select {
	case <-p.cc.Closed(): // the handler has returned for the last time
	case <-ctx.Done():
		return false
	}
	p.cc = nil
	return true
}

// Stop stops the doorbell; later calls do nothing.
func (p *pacedBell) Stop() { p.end(jetstream.ConsumeContext.Stop) }

// Drain stops the doorbell after what it has received is handled.
func (p *pacedBell) Drain() { p.end(jetstream.ConsumeContext.Drain) }

// end stops pacing and ends the consumer with how (Stop or Drain), once.
func (p *pacedBell) end(how func(jetstream.ConsumeContext)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	p.stopped = true
	close(p.quit)
	if p.cc == nil {
		close(p.closed)
		return
	}
	how(p.cc)
	cc := p.cc // the last: no switch replaces it once stopped
	go func() {
		<-cc.Closed()
		close(p.closed)
	}()
}

// Closed is closed once the doorbell is stopped (Stop, Drain) and its
// handler has returned for the last time; a switch of its pull before
// that does not close it.
func (p *pacedBell) Closed() <-chan struct{} { return p.closed }
