package dispatch

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// replayFeed learns a replayed range's sequences and store times for one
// (tenant, destination) while it replays, so that its grants are cut like
// the live ones (tight ranges, lists, store times: the sinks read the
// events without headers) instead of from a read. The doorbell and the
// backfill cannot tell: a replay runs behind what they delivered, and the
// index (the live lane's) forgot it. A dense replayed range needs no feed: it is cut by
// arithmetic, its times learned with a few direct gets (destination.dense).
//
// It is one ephemeral pull consumer on PRODUCTS, filtered to the tenant's
// subjects, headers only, no acks, in memory, from the replay's cursor, on
// the doorbell connection. It fetches a few replay batches at a time and
// only while its index holds fewer than Config.ReplayLookahead events, so
// a 1M-event replay never holds a million entries, it stays at most that
// far ahead of the replay's rate, and its deliveries are spread over the
// replay as evenly as its grants. It stops by itself at the range's end (replayUntil); the
// destination stops it when the replay ends, is cancelled or moved, when
// another dispatcher takes the pair over, and when the dispatcher stops.
// Replays are rare operator actions: one transient consumer per active
// replay, not one per tenant.
//
// Whatever the feed does not know (not started yet, behind, failed) is
// read; the cursor check in tenancy.DispatchReplay still decides every
// range.
type replayFeed struct {
	tenant, dest string
	start, until uint64 // the range it covers: [start, until)
	bound        int    // most events ix holds
	chunk        int    // most events one fetch asks for
	stop         context.CancelFunc
	room         chan struct{} // the destination took events: there may be room
	onHeld       func(n int)   // hooks.feedHeld

	mu       sync.Mutex
	ix       seqIndex
	covered  uint64 // every event of the tenant in [start, covered] was added to ix
	pending  uint64 // the tenant's events after covered, as the server counted them
	complete bool   // covered reaches until-1: nothing more to fetch
	failed   bool   // gave up: the destination cuts the rest from its other sources
}

// Replay feed tuning.
const (
	feedWait        = time.Second     // a fetch waits at most this long for events
	feedInactive    = 2 * time.Minute // the server deletes a feed's consumer left alone this long (a crashed dispatcher's)
	feedMaxFailures = 3               // consecutive failures before a feed gives up
	// A fetch asks for at most this many replay batches (Config.ReplayBatch)
	// of events: small pulls keep pace with the replay's grants instead of
	// coming as bursts on the doorbell's connection and the server.
	feedChunkBatches = 2
)

// startFeed starts a feed of tenant's events in [start, until) for x; it
// runs until the replay is over or ctx (the dispatcher's loop context)
// ends. x.mu must be held.
func (x *destination) startFeed(ctx context.Context, tenant string, start, until uint64) *replayFeed {
	d := x.d
	ctx, cancel := context.WithCancel(ctx)
	f := &replayFeed{
		tenant: tenant, dest: x.name, start: start, until: until, bound: d.cfg.ReplayLookahead,
		chunk: max(1, min(d.cfg.ReplayLookahead/2, feedChunkBatches*d.cfg.ReplayBatch)),
		stop:  cancel, room: make(chan struct{}, 1),
		covered: start - 1, onHeld: d.hooks.feedHeld,
	}
	d.m.feeds.Inc()
	d.feeds.Go(func() {
		defer d.m.feeds.Dec()
		f.run(ctx, d)
	})
	return f
}

// run fetches the tenant's events into ix while there is room, until the
// range is covered, ctx ends or it fails feedMaxFailures times in a row.
func (f *replayFeed) run(ctx context.Context, d *Dispatcher) {
	var (
		cons      jetstream.Consumer
		delivered uint64 // consumer sequence of cons's last delivery
		failures  int
	)
	drop := func() {
		if cons == nil {
			return
		}
		name := cons.CachedInfo().Name
		cons = nil
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = d.bellJS.DeleteConsumer(dctx, d.cfg.Stream, name) // else the server does after feedInactive
	}
	defer drop()
	fail := func(err error) bool {
		failures++
		drop()
		if failures < feedMaxFailures {
			sleepCtx(ctx, time.Duration(failures)*100*time.Millisecond)
			return false
		}
		if ctx.Err() == nil {
			d.log.Warn("replay feed failed; the replay's events are read instead", "tenant", f.tenant, "dest", f.dest, "err", err)
			d.m.errors.WithLabelValues(f.dest, "replay_feed").Inc()
		}
		f.mu.Lock()
		f.failed = true
		f.mu.Unlock()
		return true
	}
	for ctx.Err() == nil {
		f.mu.Lock()
		room, complete, next := f.bound-f.ix.count(), f.complete, f.covered+1
		f.mu.Unlock()
		if complete {
			return
		}
		if room < f.chunk {
			select {
			case <-ctx.Done():
				return
			case <-f.room:
			}
			continue
		}
		if cons == nil {
			c, err := f.consumer(ctx, d, next)
			if err != nil {
				if fail(err) {
					return
				}
				continue
			}
			cons, delivered = c, 0
		}
		fctx, cancel := context.WithTimeout(ctx, feedWait)
		batch, err := cons.Fetch(f.chunk, jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			if ctx.Err() == nil && fail(err) {
				return
			}
			continue
		}
		lost := false
		for m := range batch.Messages() {
			if lost {
				continue // drain
			}
			md, err := m.Metadata()
			if err != nil || md.Sequence.Consumer != delivered+1 {
				// A delivery went missing: start again after what is known.
				lost = true
				continue
			}
			delivered = md.Sequence.Consumer
			f.add(md.Sequence.Stream, md.Timestamp, md.NumPending)
		}
		cancel()
		switch berr := batch.Error(); {
		case ctx.Err() != nil:
			return
		case lost || berr != nil && fctx.Err() == nil:
			if fail(fmt.Errorf("replay feed of %s: lost a delivery or %v", f.tenant, berr)) {
				return
			}
		default:
			failures = 0
		}
	}
}

// consumer creates the feed's consumer from sequence from.
func (f *replayFeed) consumer(ctx context.Context, d *Dispatcher, from uint64) (jetstream.Consumer, error) {
	filter, err := d.rd.TenantSubjects(ctx, f.tenant)
	if err != nil {
		return nil, err
	}
	cfg := jetstream.ConsumerConfig{
		Description:       fmt.Sprintf("fairway replay feed: %s %s for %s", f.tenant, f.dest, d.cfg.Holder),
		FilterSubjects:    []string{filter},
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       from,
		AckPolicy:         jetstream.AckNonePolicy,
		HeadersOnly:       true,
		MemoryStorage:     true,
		Replicas:          1,
		InactiveThreshold: feedInactive,
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := d.bellJS.CreateConsumer(cctx, d.cfg.Stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("dispatch: replay feed consumer: %w", err)
	}
	return c, nil
}

// add records the tenant's event at seq, stored at at, with pending more
// of the tenant's events after it in the stream.
func (f *replayFeed) add(seq uint64, at time.Time, pending uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.complete || seq <= f.covered {
		return
	}
	if seq >= f.until {
		// Past the range: every event of it is known.
		f.covered, f.complete, f.pending = f.until-1, true, pending+1
		return
	}
	f.ix.add(seq, at, indexMaxRuns)
	f.covered, f.pending = seq, pending
	if f.onHeld != nil {
		f.onHeld(f.ix.count())
	}
	if pending == 0 {
		// Nothing of the tenant's after seq in the stream: events stored
		// from now on come after the stream's last sequence, which is at
		// least until-1 (the pair's cursor was there when the replay began).
		f.covered, f.complete = f.until-1, true
	}
}

// take cuts up to n of the tenant's events from cursor into batches of at
// most size, as seqIndex.take does, with their store times. ok is false
// when the feed cannot tell: the cursor is not inside what it covers (it
// is before start, or beyond what was fetched so far), or it failed. rest
// counts the tenant's events after those taken, the replay's and later
// ones.
func (f *replayFeed) take(cursor uint64, n, size int) (ranges []tenancy.Range, counts []int, lists [][]uint64, times []*work.Times, first time.Time, rest uint64, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed || cursor < f.start || cursor < f.ix.floor {
		return nil, nil, nil, nil, time.Time{}, 0, false
	}
	// Forget what is behind the cursor (the grants before this one, or
	// ranges read while the feed was behind), so it fetches on.
	f.ix.trim(cursor)
	select {
	case f.room <- struct{}{}:
	default:
	}
	if cursor > f.covered {
		return nil, nil, nil, nil, time.Time{}, 0, false // not fetched that far yet
	}
	ranges, counts, lists, first, rest = f.ix.take(cursor, n, size)
	if len(ranges) == 0 {
		return nil, nil, nil, nil, time.Time{}, 0, false
	}
	times = make([]*work.Times, len(ranges))
	for i, r := range ranges {
		times[i] = f.ix.times(r.From, r.To, counts[i])
	}
	return ranges, counts, lists, times, first, rest + f.pending, true
}

// reaches says whether the feed can tell what follows cursor: it is not
// before the feed's start nor before what it forgot.
func (f *replayFeed) reaches(cursor uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return cursor >= f.start && cursor >= f.ix.floor
}

// fromFeed cuts a replaying tenant's grant from its replay feed, starting
// the feed on the replay's first grant (which is then read). ok
// is false when the feed cannot tell.
func (x *destination) fromFeed(ts *tenantState, tenant string, cursor uint64, n int) (ranges []tenancy.Range, counts []int, lists [][]uint64, times []*work.Times, first time.Time, rest uint64, ok bool) {
	d := x.d
	if d.cfg.ReplayLookahead < 0 {
		return nil, nil, nil, nil, time.Time{}, 0, false
	}
	d.mu.Lock()
	ctx := d.loopCtx
	d.mu.Unlock()
	x.mu.Lock()
	f := ts.feed
	if f != nil && (f.until != ts.replayUntil || !f.reaches(cursor)) {
		x.stopFeed(ts) // a new replay, or the cursor moved back
		f = nil
	}
	if f == nil && cursor < ts.replayUntil && ctx != nil && ctx.Err() == nil {
		ts.feed = x.startFeed(ctx, tenant, cursor, ts.replayUntil)
	}
	x.mu.Unlock()
	if f == nil {
		return nil, nil, nil, nil, time.Time{}, 0, false
	}
	return f.take(cursor, n, x.size)
}

// stopFeed stops ts's replay feed, if any. x.mu must be held.
func (x *destination) stopFeed(ts *tenantState) {
	if ts.feed != nil {
		ts.feed.stop()
		ts.feed = nil
	}
}

// endFeed stops ts's replay feed once it no longer serves the replay: the
// replay is over or cancelled (the cursor at or past replayUntil), it is a
// new one, or the cursor moved back before the feed's start. x.mu must be
// held.
func (x *destination) endFeed(ts *tenantState) {
	if f := ts.feed; f != nil && (ts.cursor >= ts.replayUntil || f.until != ts.replayUntil || ts.cursor != 0 && ts.cursor < f.start) {
		x.stopFeed(ts)
	}
}
