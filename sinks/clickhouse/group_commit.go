package clickhouse

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairwayhq/fairway/internal/sink"
)

// item is the rows of one Apply call, queued for or inside an insert.
type item struct {
	// ctx is the Apply call's: an item whose ctx ends while queued is never
	// inserted, and a combined insert is cancelled only when the ctx of
	// every member has ended.
	ctx    context.Context
	batch  []sink.Record
	skip   []bool // records refused by validation
	latest []int  // sink.Latest(batch, skip)
	rows   int    // records not skipped: rows for product_events
	// hold: the item's tenant was caught up (sink.CaughtUp), so a round of
	// such items may wait to fill (Config.FillRows, FillWait).
	hold     bool
	queuedAt time.Time

	// taken is set, under groupCommit.mu, once the item has left the
	// queue: it is in an insert, or has been given its result.
	taken bool
	// err and members are the result, set before done is closed: the
	// insert's error and how many items it carried (0: never inserted).
	err     error
	members int
	done    chan struct{}
}

// groupCommit combines concurrent Apply calls into one insert round. One
// goroutine (run) inserts: while it is busy, arriving items queue, and its
// next round takes every queued item, up to maxRows rows. Before a round it
// may linger (see Config.Linger) so that the items of the round just ended
// can come back and join, and, while every queued item is held (item.hold),
// wait to fill (Config.FillRows, FillWait).
type groupCommit struct {
	s        *Sink
	linger   time.Duration
	maxRows  int
	fillRows int
	fillWait time.Duration // 0: no filling

	mu     sync.Mutex
	queue  []*item
	queued int // rows in queue
	closed bool

	wake   chan struct{} // capacity 1: something was queued
	stop   chan struct{} // closed by close
	exited chan struct{} // closed when run returns
	ctx    context.Context
	cancel context.CancelFunc

	// lingers and fills count the rounds that waited for the linger and
	// to fill, for tests.
	lingers atomic.Int64
	fills   atomic.Int64

	// Owned by run.
	lastMembers int
	lastEnd     time.Time
}

func newGroupCommit(s *Sink, linger time.Duration, maxRows, fillRows int, fillWait time.Duration) *groupCommit {
	ctx, cancel := context.WithCancel(context.Background())
	g := &groupCommit{
		s: s, linger: linger, maxRows: maxRows, fillRows: min(fillRows, maxRows), fillWait: fillWait,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), exited: make(chan struct{}),
		ctx: ctx, cancel: cancel,
	}
	go g.run()
	return g
}

// do queues it and waits for its result: the error of the insert that
// carried it and how many items that insert carried. When ctx ends while
// it is still queued, it leaves the queue and do returns ctx.Err() with 0
// members; once it is in an insert, do waits for that insert's result
// (the insert is cancelled when every member's ctx has ended).
func (g *groupCommit) do(ctx context.Context, it *item) (members int, err error) {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return 0, ErrClosed
	}
	it.queuedAt = time.Now()
	g.queue = append(g.queue, it)
	g.queued += it.rows
	g.mu.Unlock()
	g.signal()

	select {
	case <-it.done:
	case <-ctx.Done():
		g.mu.Lock()
		if !it.taken {
			g.remove(it)
			g.mu.Unlock()
			return 0, ctx.Err()
		}
		g.mu.Unlock()
		<-it.done
	}
	return it.members, it.err
}

// remove takes it out of the queue; g.mu is held.
func (g *groupCommit) remove(it *item) {
	if i := slices.Index(g.queue, it); i >= 0 {
		g.queue = slices.Delete(g.queue, i, i+1)
		g.queued -= it.rows
		it.taken = true
	}
}

func (g *groupCommit) signal() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

func (g *groupCommit) run() {
	defer close(g.exited)
	for {
		select {
		case <-g.wake:
		case <-g.stop:
			return
		}
		if !g.waitLinger() || !g.waitFill() {
			return
		}
		if members := g.take(); len(members) > 0 {
			g.flush(members)
		}
		g.mu.Lock()
		more := len(g.queue) > 0
		g.mu.Unlock()
		if more {
			g.signal()
		}
	}
}

// waitLinger waits until Linger after the last round ended while fewer
// items are queued than that round carried (they may be on their way back)
// and the queue holds less than maxRows. A lone caller, a caller after a
// pause, or a full queue does not wait. It returns false when closed.
func (g *groupCommit) waitLinger() bool {
	deadline := g.lastEnd.Add(g.linger)
	for waited := false; ; waited = true {
		d := time.Until(deadline)
		if d <= 0 {
			return true
		}
		g.mu.Lock()
		enough := len(g.queue) >= g.lastMembers || g.queued >= g.maxRows
		g.mu.Unlock()
		if enough {
			return true
		}
		if !waited {
			g.lingers.Add(1)
		}
		if expired, open := g.pause(d); expired || !open {
			return open
		}
	}
}

// pause waits up to d for an item to be queued. expired is true when d
// passed first, open false when the group was closed.
func (g *groupCommit) pause(d time.Duration) (expired, open bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-g.wake:
		return false, true
	case <-t.C:
		return true, true
	case <-g.stop:
		return false, false
	}
}

// waitFill waits while every queued item is held, fewer than fillRows rows
// are queued and the oldest item has waited less than fillWait: the
// tenants queued are caught up, so a bigger, later insert costs them only
// latency and ClickHouse fewer parts to merge. An item that is not held
// ends the wait at once. It returns false when closed.
func (g *groupCommit) waitFill() bool {
	if g.fillWait <= 0 {
		return true
	}
	for waited := false; ; waited = true {
		g.mu.Lock()
		var d time.Duration
		if len(g.queue) > 0 && g.queued < g.fillRows && !slices.ContainsFunc(g.queue, func(it *item) bool { return !it.hold }) {
			d = g.fillWait - time.Since(g.queue[0].queuedAt)
		}
		g.mu.Unlock()
		if d <= 0 {
			return true
		}
		if !waited {
			g.fills.Add(1)
			g.s.m.heldRounds.Inc()
		}
		if _, open := g.pause(d); !open {
			return false
		}
	}
}

// take removes the next round's items from the queue, oldest first, while
// their rows fit maxRows (the first always does). Items whose ctx has ended
// get their ctx error instead: they are never inserted.
func (g *groupCommit) take() []*item {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*item
	rows := 0
	keep := g.queue[:0]
	for _, it := range g.queue {
		switch {
		case it.ctx.Err() != nil:
			it.taken, it.err = true, it.ctx.Err()
			close(it.done)
		case len(out) == 0 || rows+it.rows <= g.maxRows:
			it.taken = true
			out = append(out, it)
			rows += it.rows
		default:
			keep = append(keep, it)
		}
	}
	clear(g.queue[len(keep):])
	g.queue = keep
	g.queued = 0
	for _, it := range keep {
		g.queued += it.rows
	}
	return out
}

// flush inserts members in one round and gives each the result. The round
// runs under its own context, cancelled when the ctx of every member has
// ended or the sink is closed — but never once the round has returned:
// clickhouse-go's batch.Send watches its ctx from a goroutine that may still
// run after Send returns (contextWatchdog, v2.50), and a cancel seen then
// closes a connection that is already back in the pool, failing the next
// round with "use of closed network connection". The round's ctx derives
// from context.Background, so leaving it uncancelled holds nothing.
func (g *groupCommit) flush(members []*item) {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		mu       sync.Mutex
		finished bool
	)
	cancelRound := func() {
		mu.Lock()
		defer mu.Unlock()
		if !finished {
			cancel()
		}
	}
	var left atomic.Int64
	left.Store(int64(len(members)))
	stops := make([]func() bool, 0, len(members)+1)
	stops = append(stops, context.AfterFunc(g.ctx, cancelRound))
	for _, it := range members {
		stops = append(stops, context.AfterFunc(it.ctx, func() {
			if left.Add(-1) == 0 {
				cancelRound()
			}
		}))
	}
	err := g.s.insert(ctx, members)
	mu.Lock()
	finished = true
	mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	g.lastMembers, g.lastEnd = len(members), time.Now()
	for _, it := range members {
		it.err, it.members = err, len(members)
		close(it.done)
	}
}

// close fails the queued items with ErrClosed, cancels the round in flight
// and waits for run to return.
func (g *groupCommit) close() {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	g.closed = true
	for _, it := range g.queue {
		it.taken, it.err = true, ErrClosed
		close(it.done)
	}
	g.queue, g.queued = nil, 0
	g.mu.Unlock()
	g.cancel()
	close(g.stop)
	<-g.exited
}
