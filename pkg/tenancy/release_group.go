package tenancy

import (
	"context"
	"sync"
	"time"
)

// releaseGroupMax is the most releases one grouped statement carries.
const releaseGroupMax = 64

// releaseTimeout bounds a grouped release statement. It runs for every
// call in the group, so no one caller's context may end it.
const releaseTimeout = 10 * time.Second

// releaseGroup combines concurrent Release calls into one ReleaseMany
// statement, as a database's group commit combines commits: the first
// caller runs its release at once; calls made while a statement runs queue
// up, and the next statement takes all of them (up to releaseGroupMax).
// Nobody waits for company, so a lone release costs what it did before,
// and under load PostgreSQL runs a fraction of the statements: 16 slots
// released in one statement cost its backend 22 µs of CPU each, one by one
// 115-195 µs (docs/dispatcher.md, "Grouped releases").
//
// The queue is non-empty only while some call leads (runs a statement or
// has been handed the lead): a leader, its statement done, hands the lead
// to the call at the queue's head, which is then in the next statement.
type releaseGroup struct {
	mu      sync.Mutex
	queue   []*releaseCall
	leading bool
	// statements and calls count what the group ran, for tests.
	statements, calls int
}

type releaseCall struct {
	lease Lease
	done  chan error    // the call's outcome; buffered
	lead  chan struct{} // the call runs the next statement; buffered
}

// release queues l and returns its outcome: Release's semantics, whether
// it went out alone or with others.
func (s *Store) releaseGrouped(ctx context.Context, l Lease) error {
	g := &s.releases
	c := &releaseCall{lease: l, done: make(chan error, 1), lead: make(chan struct{}, 1)}
	g.mu.Lock()
	g.queue = append(g.queue, c)
	lead := !g.leading
	g.leading = true
	g.mu.Unlock()
	if !lead {
		select {
		case err := <-c.done:
			return err
		case <-c.lead:
		case <-ctx.Done():
			if g.drop(c) {
				return ctx.Err()
			}
			// Already in a statement, or handed the lead: see it through.
			select {
			case err := <-c.done:
				return err
			case <-c.lead:
			}
		}
	}
	s.runReleases(ctx)
	return <-c.done
}

// drop takes c out of the queue unless a statement took it or it was
// handed the lead; it reports whether it did.
func (g *releaseGroup) drop(c *releaseCall) bool {
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

// runReleases runs one statement for the calls at the head of the queue
// (the caller's among them), delivers their outcomes and hands the lead on.
func (s *Store) runReleases(ctx context.Context) {
	g := &s.releases
	g.mu.Lock()
	n := min(len(g.queue), releaseGroupMax)
	batch := append([]*releaseCall(nil), g.queue[:n]...)
	g.queue = append(g.queue[:0:0], g.queue[n:]...)
	g.statements++
	g.calls += n
	g.mu.Unlock()

	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	errs := s.releaseBatch(rctx, batch)
	cancel()
	for i, c := range batch {
		c.done <- errs[i]
	}

	g.mu.Lock()
	if len(g.queue) > 0 {
		g.queue[0].lead <- struct{}{}
	} else {
		g.leading = false
	}
	g.mu.Unlock()
}

// releaseBatch releases the calls' leases: one alone with releaseOne, more
// with ReleaseMany. When ReleaseMany fails (a stale lease among them, the
// database away) each is released alone, so each call gets its own
// outcome, exactly as Release would have given it.
func (s *Store) releaseBatch(ctx context.Context, batch []*releaseCall) []error {
	errs := make([]error, len(batch))
	if len(batch) > 1 {
		ls := make([]Lease, len(batch))
		for i, c := range batch {
			ls[i] = c.lease
		}
		if s.ReleaseMany(ctx, ls) == nil {
			return errs
		}
	}
	for i, c := range batch {
		errs[i] = s.releaseOne(ctx, c.lease.ID, c.lease.Token)
	}
	return errs
}

// ReleaseStats returns how many release statements Release has run and
// how many Release calls they carried: calls/statements is the grouping
// achieved.
func (s *Store) ReleaseStats() (statements, calls int) {
	g := &s.releases
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.statements, g.calls
}
