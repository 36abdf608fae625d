package dispatch

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

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

// A look that cannot read the consumer keeps what the window knew: the
// items waiting still count, and a destination without sinks stays held to
// its bytes. Only looks failing for workWindowOpenAfter open the window
// (as for a NATS user without the permission), and the first look that
// reads closes it again.
func TestWorkWindowKeepsStateWhenALookFails(t *testing.T) {
	t.Parallel()
	_, _, js := testenv.JetStream(t)
	ctx := context.Background()
	if _, err := work.EnsureStream(ctx, js, work.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	const dest = "postgres"
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
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
	if _, err := js.CreateOrUpdateConsumer(ctx, work.StreamName, jetstream.ConsumerConfig{
		Durable: work.ConsumerName(dest), FilterSubject: work.FilterSubject(dest), AckPolicy: jetstream.AckExplicitPolicy,
	}); err != nil {
		t.Fatal(err)
	}
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
