package kills_test

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// slotObserver samples live slot leases per (tenant, destination) from
// PostgreSQL throughout the run and keeps the worst excess over the limit:
// of the pair's live batches over max_slots, and of its replay's over the
// replay's own slots.
type slotObserver struct {
	stop func()
	done chan struct{}

	mu        sync.Mutex
	samples   int
	errors    int
	maxOver   int    // worst in-use − max_slots over every sample and pair
	worst     string // the pair and sample of maxOver, when > 0
	atLimit   int    // samples in which some pair used all its slots
	maxInUse  int
	lastError string
}

// observe is one snapshot: live leases and limits of every pair, read in
// one statement so that both come from one snapshot.
const observe = `SELECT l.tenant, l.dest, l.max_slots,
	count(s.slot_no) FILTER (WHERE s.expires_at >= now() AND s.slot_no >= 0) AS in_use,
	COALESCE(c.replay_slots, 1),
	count(s.slot_no) FILTER (WHERE s.expires_at >= now() AND s.slot_no < 0) AS replay_in_use
FROM fairway.limits l LEFT JOIN fairway.slots s ON s.tenant = l.tenant AND s.dest = l.dest
LEFT JOIN fairway.cursors c ON c.tenant = l.tenant AND c.dest = l.dest
GROUP BY l.tenant, l.dest, l.max_slots, c.replay_slots`

func (c *cluster) observeSlots(every time.Duration) *slotObserver {
	ctx, cancel := context.WithCancel(context.Background())
	o := &slotObserver{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			o.sample(ctx, c)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return o
}

func (o *slotObserver) sample(ctx context.Context, c *cluster) {
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rows, err := c.pool.Query(qctx, observe)
	if err != nil {
		o.fail(ctx, err)
		return
	}
	defer rows.Close()
	over, inUseMax, full, worst := 0, 0, false, ""
	for rows.Next() {
		var tenant, dest string
		var limit, inUse, replayLimit, replayInUse int
		if err := rows.Scan(&tenant, &dest, &limit, &inUse, &replayLimit, &replayInUse); err != nil {
			o.fail(ctx, err)
			return
		}
		if inUse-limit > over {
			over, worst = inUse-limit, fmt.Sprintf("%s/%s: %d live leases, limit %d", tenant, dest, inUse, limit)
		}
		if replayInUse-replayLimit > over {
			over, worst = replayInUse-replayLimit, fmt.Sprintf("%s/%s: %d live leases of its replay, which has %d slots", tenant, dest, replayInUse, replayLimit)
		}
		inUseMax = max(inUseMax, inUse)
		full = full || (limit > 0 && inUse >= limit)
	}
	if err := rows.Err(); err != nil {
		o.fail(ctx, err)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.samples++
	if over > o.maxOver {
		o.maxOver, o.worst = over, worst+" at "+time.Now().Format(time.RFC3339Nano)
	}
	if full {
		o.atLimit++
	}
	o.maxInUse = max(o.maxInUse, inUseMax)
}

func (o *slotObserver) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return // stopping
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.errors++
	o.lastError = err.Error()
}

// finish stops sampling and returns the figures.
func (o *slotObserver) finish() slotFigures {
	o.stop()
	<-o.done
	o.mu.Lock()
	defer o.mu.Unlock()
	return slotFigures{samples: o.samples, errors: o.errors, lastError: o.lastError,
		maxOver: o.maxOver, worst: o.worst, atLimit: o.atLimit, maxInUse: o.maxInUse}
}

type slotFigures struct {
	samples, errors, maxOver, atLimit, maxInUse int
	lastError, worst                            string
}
