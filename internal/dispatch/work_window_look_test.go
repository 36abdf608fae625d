package dispatch

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
)

// failingConsumers is a JetStream whose consumer reads fail while fail is
// set, as a consumer-info request that times out does.
type failingConsumers struct {
	jetstream.JetStream
	fail atomic.Bool
}

func (f *failingConsumers) Consumer(ctx context.Context, stream, name string) (jetstream.Consumer, error) {
	if f.fail.Load() {
		return nil, context.DeadlineExceeded
	}
	return f.JetStream.Consumer(ctx, stream, name)
}

// windowSetup returns a server's JetStream with WORK and the metrics a
// window counts in.
func windowSetup(t *testing.T) (jetstream.JetStream, *metrics) {
	t.Helper()
	_, _, js := testenv.JetStream(t)
	if _, err := work.EnsureStream(context.Background(), js, work.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return js, m
}

// addSinksConsumer creates the consumer dest's sinks share.
func addSinksConsumer(t *testing.T, js jetstream.JetStream, dest string) {
	t.Helper()
	if _, err := js.CreateOrUpdateConsumer(context.Background(), work.StreamName, jetstream.ConsumerConfig{
		Durable: work.ConsumerName(dest), FilterSubject: work.FilterSubject(dest), AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
}

// A look that cannot read the consumer keeps what the window knew: the
// items waiting still count, and a destination without sinks stays held to
// its bytes. Only looks failing for workWindowOpenAfter open the window
// (as for a NATS user without the permission), and the first look that
// reads closes it again.
func TestWorkWindowKeepsStateWhenALookFails(t *testing.T) {
	t.Parallel()
	js, m := windowSetup(t)
	ctx := context.Background()
	const dest = "postgres"
	fj := &failingConsumers{JetStream: js}

	// Before any look read the consumer, a failing one keeps the
	// destination held to bytes.
	w := newWorkWindow(fj, dest, 1, 100, m)
	fj.fail.Store(true)
	if _, err := w.look(ctx); err == nil {
		t.Fatal("a failing look reported no error")
	}
	w.published(1, 100)
	if w.room() {
		t.Fatal("a failing first look opened a destination not known to have sinks")
	}

	// With the consumer, items this dispatcher published and the
	// consumer has not delivered fill the window.
	fj.fail.Store(false)
	addSinksConsumer(t, js, dest)
	w = newWorkWindow(fj, dest, 1, 100, m)
	fill := func() { // publishes a window's worth of items
		for i := range w.size {
			ack, err := js.Publish(ctx, work.Subject(dest, "acme"), []byte{byte(i)})
			if err != nil {
				t.Fatal(err)
			}
			w.published(ack.Sequence, 1)
		}
	}
	fill()
	if room, err := w.look(ctx); err != nil || room {
		t.Fatalf("look with the window full: room %v, err %v; want no room", room, err)
	}
	full := len(w.waiting)

	fj.fail.Store(true)
	if room, err := w.look(ctx); err == nil || room {
		t.Fatalf("failing look with the window full: room %v, err %v; want no room and the error", room, err)
	}
	if len(w.waiting) != full || w.sinkless() {
		t.Fatalf("a failing look left %d items waiting (sinkless %v), want the %d it knew", len(w.waiting), w.sinkless(), full)
	}

	// A failure long ago, with no look since, begins no run of
	// failures: this one is the first of a new run.
	w.mu.Lock()
	w.failingSince, w.lookedAt = time.Now().Add(-time.Hour), time.Now().Add(-time.Hour)
	w.mu.Unlock()
	if room, err := w.look(ctx); err == nil || room {
		t.Fatalf("failing look an hour after the last failure: room %v, err %v; want no room and the error", room, err)
	}

	w.mu.Lock()
	w.failingSince = time.Now().Add(-workWindowOpenAfter)
	w.mu.Unlock()
	if room, err := w.look(ctx); err == nil || !room {
		t.Fatalf("look after failing for %v: room %v, err %v; want room and the error", workWindowOpenAfter, room, err)
	}
	// Open, it lets every grant begin, however many items go out.
	fill()
	fill()
	if !w.room() {
		t.Fatalf("no room in the opened window with %d items published since", len(w.waiting))
	}

	// The first look that reads closes it again, counting what went out
	// while it was open.
	fj.fail.Store(false)
	if room, err := w.look(ctx); err != nil || room {
		t.Fatalf("first look that reads again, with %d items waiting: room %v, err %v; want no room", len(w.waiting), room, err)
	}
	if !w.failingSince.IsZero() || w.opened() {
		t.Fatal("a look that read the consumer left the window open or the failure's start")
	}
}

// Every spell of failing looks that opens the window is in the log, not
// only the first one, and so is the look that reads the consumer again.
func TestWorkWindowReportsEverySpell(t *testing.T) {
	t.Parallel()
	js, m := windowSetup(t)
	ctx := context.Background()
	const dest = "postgres"
	addSinksConsumer(t, js, dest)
	fj := &failingConsumers{JetStream: js}
	w := newWorkWindow(fj, dest, 1, 100, m)
	w.published(1, 100) // something waits: every look asks the consumer
	var logs bytes.Buffer
	errs := m.errors.WithLabelValues(dest, "work window")
	report := w.reporter(slog.New(slog.NewTextHandler(&logs, nil)), dest, errs)
	look := func() {
		_, err := w.look(ctx)
		report(err)
	}
	spell := func() { // looks fail until the window opens, and once more
		fj.fail.Store(true)
		look()
		w.mu.Lock()
		w.failingSince = time.Now().Add(-workWindowOpenAfter)
		w.mu.Unlock()
		look()
		look()
		if !w.opened() {
			t.Fatal("looks failing for workWindowOpenAfter left the window closed")
		}
	}
	spell()
	fj.fail.Store(false)
	look()
	spell()

	out := logs.String()
	if n := strings.Count(out, "cannot read the sinks' consumer"); n != 2 {
		t.Fatalf("%d warnings for two spells, want 2:\n%s", n, out)
	}
	if n := strings.Count(out, "consumer on WORK again"); n != 1 {
		t.Fatalf("%d notes that the consumer reads again, want 1:\n%s", n, out)
	}
	if n := testutil.ToFloat64(errs); n != 6 {
		t.Fatalf("errors counted %v, want the 6 failing looks", n)
	}
}
