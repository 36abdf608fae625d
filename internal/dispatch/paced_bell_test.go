package dispatch

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// The doorbell's Closed channel closes when the doorbell is stopped and
// its handler is done, not when a switch of its pull replaces its
// consumer.
func TestDoorbellClosedOnlyWhenStopped(t *testing.T) {
	t.Parallel()
	_, nc, js := testenv.JetStream(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	d, err := New(Deps{Store: &tenancy.Store{}, NATS: nc}, &Config{Dests: []string{"postgres"}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := d.startPacedBell(ctx, 1, nil, new(atomic.Uint64), func(jetstream.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	closed := p.Closed()
	p.mu.Lock()
	p.switchPull(ctx, doorbellPull)
	p.mu.Unlock()
	select {
	case <-closed:
		t.Fatal("Closed closed at a switch of the pull")
	case <-time.After(200 * time.Millisecond):
	}
	p.Stop()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Closed not closed 10s after Stop")
	}
}
