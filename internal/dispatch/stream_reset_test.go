package dispatch_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/status"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

func (e *env) counter(reg prometheus.Gatherer, name, dest string) float64 {
	e.t.Helper()
	return testenv.CounterBy(e.t, name, "dest", reg)[dest]
}

// The NATS server is replaced under a running dispatcher: PRODUCTS is
// created anew, empty, and acme's cursor points past its end. The
// dispatcher holds the pair, counts it, stops (its doorbell follows the
// old stream's sequences); `fairway status` says `stream reset`; run
// again it dispatches nothing of acme's, not even once the new stream
// passes the old cursor, until the cursor is reset to the first event,
// and then every new event goes out once.
func TestStreamRecreatedHoldsThePairUntilItsCursorIsReset(t *testing.T) {
	t.Parallel()
	e := setup(t, 30*time.Second)
	e.tenant("acme", 1, 4, tenancy.DestPostgres)
	sink := e.startSink(tenancy.DestPostgres, 2, nil, func() time.Duration { return 0 })
	e.publish("acme", 20)
	cfg := &dispatch.Config{Dests: []string{tenancy.DestPostgres}, PollInterval: 100 * time.Millisecond}
	reg1 := prometheus.NewRegistry()
	_, done := e.run(dispatch.Deps{Registry: reg1}, cfg)
	e.waitFor("the old stream's 20 events", func() bool { return sink.events("acme") == 20 })

	if err := e.js.DeleteStream(e.ctx, events.StreamName); err != nil {
		t.Fatal(err)
	}
	stream, err := events.EnsureStream(e.ctx, e.js, events.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, dispatch.ErrStreamMovedBack) {
			t.Fatalf("Run returned %v, want ErrStreamMovedBack", err)
		}
	case <-e.ctx.Done():
		t.Fatal("the dispatcher went on with a stream that went back")
	}
	if n := e.counter(reg1, "fairway_dispatcher_stream_resets_total", tenancy.DestPostgres); n != 1 {
		t.Fatalf("stream_resets_total = %v, want 1", n)
	}
	src := &status.Source{Pairs: e.st, Reader: work.NewReader(e.nc, "")}
	rows, err := src.Rows(e.ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Reason != status.ReasonStreamReset || rows[0].WaitDetail == "" {
		t.Fatalf("status %+v, want stream reset with its detail", rows)
	}

	// Run again, as a supervisor would. The new stream grows past the old
	// cursor (21): dispatching from it would skip 1..20.
	reg2 := prometheus.NewRegistry()
	e.run(dispatch.Deps{Registry: reg2}, cfg)
	fresh := e.publish("acme", 25)
	e.waitFor("a grant that finds the pair held", func() bool {
		return e.counter(reg2, "fairway_dispatcher_at_limit_total", tenancy.DestPostgres) > 0
	})
	if n := sink.events("acme"); n != 20 {
		t.Fatalf("the held pair was dispatched: %d events", n)
	}
	before := len(sink.snapshot())

	_, moves, err := e.st.ResetCursors(e.ctx, dispatch.StreamPosition(stream), "acme", "", tenancy.ResetToFirst)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(moves, []tenancy.CursorMove{{Tenant: "acme", Dest: tenancy.DestPostgres, From: 21, To: 1}}) {
		t.Fatalf("moves %+v", moves)
	}
	e.waitFor("the new stream's events", func() bool { return sink.events("acme") == 20+25 })
	more := e.publish("acme", 3)
	e.waitFor("events stored after the reset", func() bool { return sink.events("acme") == 20+25+3 })
	checkExactlyOnce(t, sink.snapshot()[before:], map[string][]uint64{"acme": append(fresh, more...)}, false)
	if rows, err := src.Rows(e.ctx, "acme"); err != nil || rows[0].Reason == status.ReasonStreamReset {
		t.Fatalf("status after the reset: %+v %v", rows, err)
	}
}

// A cursor behind the stream's first sequence (events purged before they
// were dispatched) is not held: the pair goes on from the first event the
// stream holds, and is counted once for that cursor, however many scans
// see it.
func TestCursorBehindTheStreamIsCountedOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, 30*time.Second)
	e.tenant("acme", 1, 2, tenancy.DestPostgres)
	seqs := e.publish("acme", 10)
	stream, err := e.js.Stream(e.ctx, events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(e.ctx, jetstream.WithPurgeSequence(seqs[5])); err != nil { // removes the first 5
		t.Fatal(err)
	}
	if err := e.st.SetDestPaused(e.ctx, "acme", tenancy.DestPostgres, true); err != nil {
		t.Fatal(err)
	}
	sink := e.startSink(tenancy.DestPostgres, 1, nil, func() time.Duration { return 0 })
	reg := prometheus.NewRegistry()
	d, _ := e.run(dispatch.Deps{Registry: reg}, &dispatch.Config{Dests: []string{tenancy.DestPostgres}, PollInterval: 50 * time.Millisecond})
	e.waitFor("three poll scans", func() bool { return d.Wakeups("poll") >= 3 })
	if n := e.counter(reg, "fairway_dispatcher_cursor_behind_stream_total", tenancy.DestPostgres); n != 1 {
		t.Fatalf("cursor_behind_stream_total = %v after three scans, want 1", n)
	}
	if err := e.st.SetDestPaused(e.ctx, "acme", tenancy.DestPostgres, false); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the events the stream still holds", func() bool { return sink.events("acme") == 5 })
	checkExactlyOnce(t, sink.snapshot(), map[string][]uint64{"acme": seqs[5:]}, false)
	if n := e.counter(reg, "fairway_dispatcher_stream_resets_total", tenancy.DestPostgres); n != 0 {
		t.Fatalf("a purge held the pair: stream_resets_total = %v", n)
	}
}
