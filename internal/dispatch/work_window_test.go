package dispatch_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/work"
)

// With slow sinks and slot limits far above what they take, the work window
// keeps what waits in WORK to about the window, not to the slots; no item
// waits long enough in WORK for its lease to expire, so nothing is
// re-dispatched; and every event is covered exactly once. Without the
// window (DeepWork) the same backlog queues as deep as the slots allow.
func TestWorkWindowKeepsWorkShallow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		deep bool
	}{{"window", false}, {"deep", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const (
				n     = 1500
				batch = 10
				limit = 100
			)
			e := setup(t, 3*time.Second)
			tenants := []string{"a", "b", "c"}
			for _, tn := range tenants {
				e.tenant(tn, 1, limit, pg)
			}
			seqs := e.interleave(n/len(tenants), tenants, 1, 1, 1)
			// Sinks slow enough (40 items/s) that, without the window, the
			// dispatcher queues most of the 150 items even on a loaded machine.
			s := e.startSink(pg, 2, nil, func() time.Duration { return 50 * time.Millisecond })
			d := e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: batch, PollInterval: time.Hour, DeepWork: tc.deep}, nil)
			var peak atomic.Uint64
			e.waitFor("every event applied", func() bool {
				cons, err := e.js.Consumer(e.ctx, work.StreamName, work.ConsumerName(pg))
				if err == nil {
					if p := cons.CachedInfo().NumPending; p > peak.Load() {
						peak.Store(p)
					}
				}
				return s.events("a")+s.events("b")+s.events("c") >= n
			})
			checkExactlyOnce(t, s.snapshot(), seqs, tc.deep)
			t.Logf("peak items waiting in WORK: %d; re-dispatched orphans: %.0f", peak.Load(), d.Recovered(pg))
			if tc.deep {
				if peak.Load() < 100 {
					t.Errorf("without the window at most %d items waited in WORK; the test cannot tell the window's effect", peak.Load())
				}
				return
			}
			if bound := uint64(32 + 4); peak.Load() > bound {
				t.Errorf("%d items waited in WORK, window %d", peak.Load(), bound)
			}
			if r := d.Recovered(pg); r != 0 {
				t.Errorf("%.0f orphans re-dispatched: leases expired while items waited", r)
			}
		})
	}
}
