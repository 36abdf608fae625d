package dispatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fairwayhq/fairway/internal/dispatch"
)

// With Deps.Doorbell set, the doorbell and the backfill deliver every
// event's sequence on that connection and none on the main one, and the
// events they announce are dispatched exactly once; without it, the same
// deliveries arrive on the main connection. The connections' InMsgs tell
// the two apart: the main connection's own traffic (scan, reads where
// the index cannot tell yet, work item acks) stays well below the
// deliveries, one per event.
func TestDoorbellConnection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		separate bool
	}{{"separate", true}, {"shared", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, time.Minute)
			tenants := []string{"a", "b", "c"}
			const backlog, live = 200, 3000
			for _, id := range tenants {
				e.tenant(id, 1, 2, pg)
			}
			// Delivered by the backfill: interleaved, as a backlog of one
			// tenant's own run is cut by arithmetic and never delivered
			// (docs/dispatcher.md, Dense backlogs).
			seqs := e.interleave(backlog, tenants, 1, 1, 1)
			connect := func(name string) *nats.Conn {
				nc, err := nats.Connect(e.url, nats.Name(name))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(nc.Close)
				return nc
			}
			mainNC, bellNC := connect("dispatcher"), connect("dispatcher-doorbell")
			deps := dispatch.Deps{Store: e.st, NATS: mainNC}
			if tc.separate {
				deps.Doorbell = bellNC
			}
			// No fallback rescan: only the doorbell tells of the live events.
			// One batch of 100 per grant bounds what a read (where the index
			// cannot tell yet) brings in on the main connection.
			d, err := dispatch.New(deps, &dispatch.Config{Dests: []string{pg}, BatchSize: 100, GrantBatches: 1, PollInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			s := e.startSink(pg, 4, nil, func() time.Duration { return 0 })
			ctx, cancel := context.WithCancel(e.ctx)
			done := make(chan error, 1)
			go func() { done <- d.Run(ctx) }()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("run: %v", err)
				}
			})
			for _, id := range tenants {
				seqs[id] = append(seqs[id], e.publish(id, live)...) // delivered by the doorbell
			}
			e.waitFor("every event dispatched", func() bool {
				for id := range seqs {
					if s.events(id) < len(seqs[id]) {
						return false
					}
				}
				return true
			})
			checkExactlyOnce(t, s.snapshot(), seqs, false)

			total := uint64(len(tenants) * (backlog + live))
			mainIn, bellIn := mainNC.Stats().InMsgs, bellNC.Stats().InMsgs
			t.Logf("events %d; messages in: main connection %d, doorbell connection %d; grants from the index %.0f, from reads %.0f",
				total, mainIn, bellIn, d.Grants(pg, "index"), d.Grants(pg, "read"))
			if d.Grants(pg, "index") == 0 {
				t.Error("no grant was cut from what the doorbell delivered")
			}
			if tc.separate {
				if bellIn < total {
					t.Errorf("doorbell connection received %d messages, fewer than the %d events it must announce", bellIn, total)
				}
				if mainIn >= total {
					t.Errorf("main connection received %d messages for %d events: the doorbell's deliveries are on it", mainIn, total)
				}
				return
			}
			if mainIn < total {
				t.Errorf("shared: main connection received %d messages, fewer than the %d events the doorbell announces", mainIn, total)
			}
			if bellIn != 0 {
				t.Errorf("shared: the unused connection received %d messages", bellIn)
			}
		})
	}
}
