package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairwayhq/fairway/internal/work"
)

// workWindow keeps what waits in WORK for one destination shallow: about
// what its sinks take at once. WORK is a FIFO queue per destination, so an
// item published behind a deep queue is applied after all of it, whatever
// order the scheduler chose; kept shallow, the order of the grants is the
// order of application, a small tenant's item is not queued behind the
// floods' items, and no lease expires on an item that merely waits.
//
// It counts this dispatcher's own items: those it published that the
// sinks' consumer (work.ConsumerName) has not delivered yet, known from the
// stream sequence each publish returned and the consumer's last delivered
// one. A destination takes a grant only while those, plus what grants in
// flight may still publish, are below the window. Counting its own items,
// not the consumer's whole NumPending, keeps the window per dispatcher:
// where several dispatchers share the sinks, one granting a flood fills
// its own window and the others' small grants still go out, queued behind
// at most one window of the flood's items, as with one dispatcher. The
// window grows while sinks wait for work with none pending although the
// window held grants back (the sinks could take more), and shrinks slowly
// while more than half of it waits, never below its start: a floor that
// keeps sinks fed between two looks. Without the consumer (no sink of the
// destination has ever started) the items wait for the first sink, and
// the window holds them to bytes (Config.WorkWithoutSink) rather than
// items: WORK, on disk or in memory, is shared by every destination, and
// one without sinks must not fill it; a WORK created anew meanwhile (a server restart
// took it) held none of them. A look that cannot read the consumer (a
// timeout under load) changes nothing; once looks have failed for
// workWindowOpenAfter (a NATS user without $JS.API.CONSUMER.INFO.WORK.>,
// say), the window opens: every grant may begin, and what is published
// waits for the sinks as it would without a window, until a look reads
// the consumer again. An unreadable consumer is reported.
type workWindow struct {
	js       jetstream.JetStream
	consumer string
	grant    int // the most items one grant publishes (Config.GrantBatches)
	// sizeG and waitingG show size and waiting at each look.
	sizeG, waitingG prometheus.Gauge

	// noSinkBytes bounds the bytes waiting while the consumer does not
	// exist (Config.WorkWithoutSink); negative: no bound.
	noSinkBytes int64

	mu       sync.Mutex
	size     int           // the window: items that may wait in WORK
	waiting  []waitingItem // this dispatcher's items not delivered at the last look
	bytes    int64         // the sizes of waiting
	noSink   bool          // the consumer did not exist at the last look
	lookedAt time.Time     // when the last look was
	// failingSince is when the looks began to fail; zero while the last
	// one read the consumer (or found it missing). open: they have
	// failed for workWindowOpenAfter, and every grant may begin until a
	// look reads the consumer.
	failingSince time.Time
	open         bool
	reserved     int  // items grants in flight may still publish
	full         bool // a grant was held back since the last look
}

// waitingItem is an item published and not yet delivered: its stream
// sequence and size.
type waitingItem struct {
	seq   uint64
	bytes int64
}

// Bounds of the window, in items.
const (
	workWindowMin = 8
	workWindowMax = 4096
	// workWindowEvery is how often the window looks at the consumer,
	// workWindowNoSinkEvery while the consumer does not exist.
	workWindowEvery       = 20 * time.Millisecond
	workWindowNoSinkEvery = time.Second
	// workWindowOpenAfter is how long looks must fail before the window
	// opens; a look more than workWindowFailGap after the one before
	// begins a new run of failures.
	workWindowOpenAfter = 5 * time.Second
	workWindowFailGap   = 3 * time.Second
)

func newWorkWindow(js jetstream.JetStream, dest string, grant int, noSinkBytes int64, m *metrics) *workWindow {
	// Until the first look the consumer is not known to exist: the window
	// holds items to noSinkBytes, so that a destination without sinks
	// does not get a window of items first.
	w := &workWindow{js: js, consumer: work.ConsumerName(dest), grant: grant, size: max(workWindowMin, 2*grant), noSinkBytes: noSinkBytes, noSink: true,
		sizeG: m.workWindow.WithLabelValues(dest), waitingG: m.workWaiting.WithLabelValues(dest)}
	w.sizeG.Set(float64(w.size))
	return w
}

// room says whether a grant may begin: this dispatcher's items waiting in
// WORK (as of the last look, with those published since) and those
// reserved by grants in flight are below the window. Once the grant is known, reserve takes room for its items.
func (w *workWindow) room() bool {
	if w == nil {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.roomLocked() {
		w.full = !w.noSink
		return false
	}
	return true
}

// roomLocked is room's test; w.mu must be held. Without a sink it is one
// of bytes, and one grant in flight at most beyond them.
func (w *workWindow) roomLocked() bool {
	if w.open {
		return true
	}
	if w.noSink {
		return w.noSinkBytes < 0 || (w.bytes < w.noSinkBytes && w.reserved < w.grant)
	}
	return len(w.waiting)+w.reserved < w.size
}

// sinkless says whether the destination's consumer did not exist at the
// last look and its items fill the bound: recovery then leaves its
// orphans for later, as a batch dispatched again would only add a copy to
// WORK that no sink takes, past the bound.
func (w *workWindow) sinkless() bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.noSink && !w.roomLocked()
}

// reserve takes room for the items of a grant of up to events events cut
// into work items of size events: at least one, at most the grant's
// batches. A small tenant's grant of a few events takes one item's room,
// not a flood's whole grant's, so the window holds back floods, not the
// grants that go before them. It returns what it reserved, for settle.
func (w *workWindow) reserve(events, size int) int {
	if w == nil {
		return 0
	}
	n := min(max((events+size-1)/max(size, 1), 1), w.grant)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reserved += n
	return n
}

// published records an item of size bytes this dispatcher published at
// stream sequence seq: it waits until the consumer has delivered it.
func (w *workWindow) published(seq uint64, size int) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waiting = append(w.waiting, waitingItem{seq: seq, bytes: int64(size)})
	w.bytes += int64(size)
}

// settle ends a grant's reservation of reserved items, after its items
// were published (published) or handed back.
func (w *workWindow) settle(reserved int) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reserved -= reserved
}

// look reads the consumer's state and adapts the window. It reports
// whether there is room now.
func (w *workWindow) look(ctx context.Context) (room bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	w.mu.Lock()
	known := len(w.waiting) // items published since are not judged by what is read now
	w.mu.Unlock()
	info, err := w.consumerInfo(ctx)
	noSink := errors.Is(err, jetstream.ErrConsumerNotFound)
	var last uint64 // WORK's last sequence, without a consumer; 0: unknown
	if noSink {
		if s, serr := w.js.Stream(ctx, work.StreamName); serr == nil {
			last = s.CachedInfo().State.LastSeq
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	full := w.full
	w.full = false
	now, prev := time.Now(), w.lookedAt
	w.lookedAt = now
	if err != nil && !noSink {
		// A look that fails (a timeout under load, a NATS reconnect) says
		// nothing about WORK: the window keeps what it knew. Only looks
		// failing one after the other for workWindowOpenAfter open it: a
		// NATS user without the permission sees timeouts too, and must
		// not be held back for good.
		if w.failingSince.IsZero() || now.Sub(prev) > workWindowFailGap {
			w.failingSince = now
		}
		if now.Sub(w.failingSince) >= workWindowOpenAfter {
			w.open, w.noSink = true, false
			w.dropWaiting(func(waitingItem) bool { return true })
		}
		w.waitingG.Set(float64(len(w.waiting)))
		return w.roomLocked(), err
	}
	w.failingSince, w.open = time.Time{}, false
	w.noSink = noSink
	switch {
	case noSink:
		// The items wait for the first sink, unless WORK is new: then
		// the stream's sequences are below them. Only look() drops
		// items, so the first known are those it knew before reading.
		if last > 0 {
			w.dropKnown(known, func(it waitingItem) bool { return it.seq > last })
		}
		err = nil
	default:
		// The consumer delivers in stream order (redeliveries aside), so
		// what it has not delivered is above its last delivered sequence.
		w.dropWaiting(func(it waitingItem) bool { return it.seq <= info.Delivered.Stream })
		floor := max(workWindowMin, 2*w.grant)
		switch {
		case info.NumPending == 0 && info.NumWaiting > 0 && full:
			w.size = min(w.size+w.size/2, workWindowMax) // sinks wait for work: let more through
		case len(w.waiting) > w.size/2:
			w.size = max(w.size-w.size/8, floor)
		}
	}
	w.sizeG.Set(float64(w.size))
	w.waitingG.Set(float64(len(w.waiting)))
	return w.roomLocked(), err
}

// dropWaiting forgets the waiting items gone says are no longer waiting;
// w.mu must be held.
func (w *workWindow) dropWaiting(gone func(waitingItem) bool) {
	w.dropKnown(len(w.waiting), gone)
}

// dropKnown is dropWaiting among the first n waiting items only; w.mu
// must be held.
func (w *workWindow) dropKnown(n int, gone func(waitingItem) bool) {
	n = min(n, len(w.waiting))
	kept := slices.DeleteFunc(w.waiting[:n:n], func(it waitingItem) bool {
		if gone(it) {
			w.bytes -= it.bytes
			return true
		}
		return false
	})
	w.waiting = append(kept, w.waiting[n:]...)
}

// opened says the looks have failed long enough to open the window.
func (w *workWindow) opened() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.open
}

// idle says the window has nothing to learn from the consumer: none of
// this dispatcher's items waiting, none reserved, and no grant held back,
// or no consumer a second ago. A destination without traffic (a partner of
// a quiet tenant, say) then costs no request, and one without sinks one a
// second.
func (w *workWindow) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.noSink && time.Since(w.lookedAt) < workWindowNoSinkEvery {
		return true // the first sink is awaited: a look a second will see it
	}
	return len(w.waiting) == 0 && w.reserved == 0 && !w.full
}

func (w *workWindow) consumerInfo(ctx context.Context) (*jetstream.ConsumerInfo, error) {
	c, err := w.js.Consumer(ctx, work.StreamName, w.consumer)
	if err != nil {
		return nil, err
	}
	return c.CachedInfo(), nil
}

// run looks every workWindowEvery, unless idle, and wakes the destination
// when there is room, until ctx ends. onLook has each look's error (nil:
// it read the consumer, or found it missing).
func (w *workWindow) run(ctx context.Context, wake func(), onLook func(error)) {
	t := time.NewTicker(workWindowEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if w.idle() {
			continue // nothing published or held back since: nothing to learn
		}
		room, err := w.look(ctx)
		if ctx.Err() == nil {
			onLook(err)
		}
		if room {
			wake()
		}
	}
}

// reporter returns run's onLook for destination dest: each failing look
// counts in errs, and log has a warning each time the failures open the
// window and a note when a look reads the consumer again after that, so
// that every spell without a bound shows in the log, not only the first.
func (w *workWindow) reporter(log *slog.Logger, dest string, errs prometheus.Counter) func(error) {
	var warned bool // the window opened since the last look that read
	return func(err error) {
		if err == nil {
			if warned {
				warned = false
				log.Info("reading the sinks' consumer on WORK again; what waits there is bounded again", "dest", dest)
			}
			return
		}
		errs.Inc()
		if !warned && w.opened() {
			warned = true
			log.Warn("cannot read the sinks' consumer on WORK; what waits there is not bounded until it can", "dest", dest, "err", err)
		}
	}
}
