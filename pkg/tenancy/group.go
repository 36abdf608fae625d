package tenancy

import (
	"context"
	"sync"
	"time"
)

// groupTimeout bounds a grouped statement. It runs for every call in the
// group, so no one caller's context may end it.
const groupTimeout = 10 * time.Second

// grouper combines concurrent calls of one kind (releases, dispatches) into
// one statement, as a database's group commit combines commits: the first
// caller runs its statement; calls made while a statement runs queue up,
// and the next statement takes all of them (up to max, and never two with
// the same key). A short statement's cost is mostly per statement, not per
// row (BenchmarkReleaseCPU, BenchmarkDispatchCPU; docs/dispatcher.md,
// "Grouped releases and dispatches"), so under load PostgreSQL runs a
// fraction of the statements.
//
// While calls come often from several callers (the last statement began
// less than busyGap before, and carried more than one call or left others
// queued), a leader first lingers for company, as PostgreSQL's
// commit_delay does with commit_siblings: up to linger, or until max calls
// wait, never past a queued call's deadline, and no longer than
// lingerGap after it began lingering or the last call joined. Callers that come back in a burst
// (the grants a statement ended, starting again) then go together as soon
// as the burst is in, rather than wait out linger for calls that cannot
// come while every caller already waits. A call after a quiet spell,
// or from a caller that calls again and again alone, runs at once, so a
// lone call costs what it did alone.
//
// The queue is non-empty only while some call leads (runs a statement or
// has been handed the lead): a leader, its statement done, hands the lead
// to the call at the queue's head, which is then in the next statement.
type grouper[A, R any] struct {
	max    int
	key    func(A) string // calls with one key never share a statement
	run    func(ctx context.Context, args []A) []R
	linger time.Duration // 0: never wait for company

	mu      sync.Mutex
	queue   []*groupCall[A, R]
	leading bool
	last    time.Time     // when the last statement began
	company bool          // the last statement carried several calls or left some queued
	full    chan struct{} // buffered: max calls wait, a lingering leader goes
	joined  chan struct{} // buffered: a call queued while a leader lingers
	// statements and calls count what the group ran (Store.ReleaseStats,
	// Store.DispatchStats).
	statements, calls int
}

type groupCall[A, R any] struct {
	arg      A
	deadline time.Time // the caller's; zero: none
	res      R
	done     chan struct{} // closed when res is set
	lead     chan struct{} // buffered: the call runs the next statement
}

// do queues arg and returns its result, whether it went out alone or with
// others. A call whose ctx has ended, or ends while it waits in the queue,
// returns ok false: nothing was done for it. Once a statement has taken it
// (or it was handed the lead), it sees that statement through, within the
// earliest deadline of the calls in it.
func (g *grouper[A, R]) do(ctx context.Context, arg A) (res R, ok bool) {
	if ctx.Err() != nil {
		return res, false
	}
	c := &groupCall[A, R]{arg: arg, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	c.deadline, _ = ctx.Deadline()
	g.mu.Lock()
	g.queue = append(g.queue, c)
	lead := !g.leading
	g.leading = true
	if len(g.queue) == g.max && g.full != nil {
		select {
		case g.full <- struct{}{}:
		default:
		}
	}
	if !lead && g.joined != nil {
		select {
		case g.joined <- struct{}{}:
		default:
		}
	}
	g.mu.Unlock()
	if !lead {
		select {
		case <-c.done:
			return c.res, true
		case <-c.lead:
		case <-ctx.Done():
			if g.drop(c) {
				return res, false
			}
			select {
			case <-c.done:
				return c.res, true
			case <-c.lead:
			}
		}
	}
	g.runNext(ctx)
	<-c.done
	return c.res, true
}

// drop takes c out of the queue unless a statement took it or it was
// handed the lead; it reports whether it did.
func (g *grouper[A, R]) drop(c *groupCall[A, R]) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(c.lead) > 0 {
		return false
	}
	for i, q := range g.queue {
		if q == c {
			g.queue = append(g.queue[:i:i], g.queue[i+1:]...)
			return true
		}
	}
	return false
}

// runNext runs one statement for calls from the head of the queue (the
// caller's, at its head, among them), delivers their results and hands
// the lead on.
func (g *grouper[A, R]) runNext(ctx context.Context) {
	g.lingerForCompany()
	g.mu.Lock()
	var (
		batch, rest []*groupCall[A, R]
		seen        map[string]bool // keys in batch; nil without g.key
	)
	if g.key != nil {
		seen = map[string]bool{}
	}
	for _, c := range g.queue {
		if len(batch) == g.max {
			rest = append(rest, c)
			continue
		}
		if seen != nil {
			k := g.key(c.arg)
			if seen[k] {
				rest = append(rest, c)
				continue
			}
			seen[k] = true
		}
		batch = append(batch, c)
	}
	g.queue = rest
	g.last = time.Now()
	g.statements++
	g.calls += len(batch)
	g.mu.Unlock()

	// The statement runs on no one caller's context, but within the
	// earliest deadline among them (and groupTimeout): a caller bounds
	// what it waits for as it did alone.
	args := make([]A, len(batch))
	deadline := time.Now().Add(groupTimeout)
	for i, c := range batch {
		args[i] = c.arg
		if !c.deadline.IsZero() && c.deadline.Before(deadline) {
			deadline = c.deadline
		}
	}
	rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	res := g.run(rctx, args)
	cancel()
	for i, c := range batch {
		c.res = res[i]
		close(c.done)
	}

	g.mu.Lock()
	g.company = len(batch) > 1 || len(g.queue) > 0
	if len(g.queue) > 0 {
		g.queue[0].lead <- struct{}{}
	} else {
		g.leading = false
	}
	g.mu.Unlock()
}

// lingerGap is how long a lingering leader waits for a call to join, from
// when it begins to linger and again after each call that joins: calls
// that come often come closer together than this.
func (g *grouper[A, R]) lingerGap() time.Duration { return g.linger / 4 }

// busyGap is how recently the last statement must have begun for a
// leader to linger: calls then come at least about every busyGap.
func (g *grouper[A, R]) busyGap() time.Duration { return 4 * g.linger }

// lingerForCompany waits up to linger for more calls to queue, while calls
// come often from several callers and fewer than max wait, and not past
// the earliest deadline of the calls queued.
func (g *grouper[A, R]) lingerForCompany() {
	if g.linger <= 0 {
		return
	}
	g.mu.Lock()
	linger := g.linger
	for _, c := range g.queue {
		if !c.deadline.IsZero() {
			linger = min(linger, time.Until(c.deadline)/2)
		}
	}
	wait := len(g.queue) < g.max && g.company && time.Since(g.last) < g.busyGap() && linger > 0
	if g.full == nil {
		g.full, g.joined = make(chan struct{}, 1), make(chan struct{}, 1)
	}
	for _, c := range []chan struct{}{g.full, g.joined} {
		select { // a signal from before this leader lingers
		case <-c:
		default:
		}
	}
	full, joined := g.full, g.joined
	g.mu.Unlock()
	if !wait {
		return
	}
	t, idle := time.NewTimer(linger), time.NewTimer(min(g.lingerGap(), linger))
	defer t.Stop()
	defer idle.Stop()
	for {
		select {
		case <-t.C:
			return
		case <-full:
			return
		case <-idle.C:
			return
		case <-joined:
			idle.Reset(g.lingerGap())
		}
	}
}

func (g *grouper[A, R]) stats() (statements, calls int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.statements, g.calls
}
