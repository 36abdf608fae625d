package dispatch

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/dispatch/scheduler"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Cursors are sequences of PRODUCTS. When the stream goes back — a NATS
// server replaced by an empty one, the stream deleted and created again,
// or restored from an older backup — cursors point past its end, and
// dispatching on from them would skip every event until the stream
// reached them. Every scan (at start and each PollInterval) checks the
// stream first (tenancy.CheckStream): a pair whose cursor does not fit is
// held in PostgreSQL, so no dispatcher dispatches it (its grants end in
// tenancy.ErrStreamReset, which blocks the tenant like its slot limit),
// `fairway status` says `stream reset`, and `fairway cursors reset` moves
// the cursor and releases it. Nothing is skipped unless an operator says
// so.
//
// A running dispatcher whose stream went back also stops (Run returns
// ErrStreamMovedBack): its doorbell waits at a sequence the new stream has
// not reached, and its index holds the old stream's sequences. Run again,
// it starts over on the stream as it is.
//
// A cursor behind the stream's first sequence (purge, MaxAge, MaxBytes
// removed events before they were dispatched) is not held: holding would
// not bring them back. Dispatch goes on from the first event the stream
// still holds; a pair found with backlog in that state is logged and
// counted (fairway_dispatcher_cursor_behind_stream_total) once per cursor.

// streamResets is what the dispatcher keeps for the checks.
type streamResets struct {
	// stop ends Run with a cause; nil outside Run.
	stop func(error)

	mu     sync.Mutex
	behind map[scheduler.Key]uint64 // pairs reported behind the stream's first sequence, by the cursor reported
}

// StreamPosition reads where stream is, for tenancy.CheckStream and
// tenancy.ResetCursors.
func StreamPosition(stream jetstream.Stream) func(context.Context) (tenancy.StreamPosition, error) {
	return func(ctx context.Context) (tenancy.StreamPosition, error) {
		info, err := stream.Info(ctx)
		if err != nil {
			return tenancy.StreamPosition{}, fmt.Errorf("stream info: %w", err)
		}
		return tenancy.StreamPosition{Name: info.Config.Name, Created: info.Created,
			FirstSeq: info.State.FirstSeq, LastSeq: info.State.LastSeq}, nil
	}
}

// checkStream holds the pairs whose cursor does not fit stream
// (tenancy.CheckStream), counts and logs each, and stops a running
// dispatcher whose stream went back. It returns the stream's first
// sequence.
func (d *Dispatcher) checkStream(ctx context.Context, stream jetstream.Stream) (first uint64, err error) {
	// What the doorbell has seen, read before the stream: a stream whose
	// last sequence is now below it went back.
	var seen uint64
	running := false
	if from := d.liveFrom.Load(); from != 0 { // the stream ended at from-1 when Run began
		running, seen = true, max(d.bellSeen(), from-1)
	}
	check, err := d.st.CheckStream(ctx, StreamPosition(stream))
	if err != nil {
		return 0, fmt.Errorf("dispatch: check stream %s: %w", d.cfg.Stream, err)
	}
	for _, h := range check.Held {
		d.m.streamResets.WithLabelValues(h.Dest).Inc()
		d.log.Error("cursor does not belong to the stream; the pair is held until an operator resets it (fairway cursors reset)",
			"tenant", h.Tenant, "dest", h.Dest, "cursor", h.NextSeq, "why", h.Detail)
	}
	pos := check.Position
	if running && (check.Recreated || seen > pos.LastSeq) {
		d.log.Error("the stream went back under the dispatcher (recreated or restored); stopping, to start over on it when run again",
			"stream", pos.Name, "last_seq", pos.LastSeq, "doorbell_seq", seen, "recreated", check.Recreated)
		if stop := d.resets.stop; stop != nil {
			stop(fmt.Errorf("%w: %s at sequence %d, the doorbell at %d", ErrStreamMovedBack, pos.Name, pos.LastSeq, seen))
		}
	}
	return pos.FirstSeq, nil
}

// noteBehind reports, once per cursor, a pair with backlog whose cursor is
// behind the stream's first sequence: the tenant's events in between, if
// it had any, were removed before they were dispatched.
func (d *Dispatcher) noteBehind(x *destination, tenant string, cursor, first, backlog uint64) {
	if backlog == 0 || cursor >= first {
		return
	}
	k := x.key(tenant)
	d.resets.mu.Lock()
	if d.resets.behind == nil {
		d.resets.behind = map[scheduler.Key]uint64{}
	}
	seen := d.resets.behind[k] == cursor
	d.resets.behind[k] = cursor
	d.resets.mu.Unlock()
	if seen {
		return
	}
	d.m.behindStream.WithLabelValues(x.name).Inc()
	d.log.Warn("cursor is behind the stream's first sequence: the tenant's events before it, if any, were removed (purge, MaxAge, MaxBytes) before they were dispatched; dispatching from the first one the stream holds",
		"tenant", tenant, "dest", x.name, "cursor", cursor, "first_seq", first, "backlog", backlog)
}
