package dispatch_test

import (
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
)

// A tenant's high events go before its normal ones, and those before its
// bulk ones, whatever their order in the stream: with one slot and a bulk
// import queued first, the tenant's later normal and high events are
// dispatched long before the import is through, high first; each
// priority's items hold its events only, each exactly once.
func TestPrioritiesOrderATenantsEvents(t *testing.T) {
	t.Parallel()
	const bulk, normal, high = 3000, 20, 20
	e := setup(t, time.Minute)
	e.tenant("acme", 1, 1, pg)
	seqs := map[events.Priority][]uint64{events.PriorityBulk: e.publishOf("acme", events.PriorityBulk, bulk)}
	seqs[events.PriorityNormal] = e.publishOf("acme", events.PriorityNormal, normal)
	seqs[events.PriorityHigh] = e.publishOf("acme", events.PriorityHigh, high)
	d := e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: 100, PollInterval: time.Hour}, nil)
	// Slow enough that the import takes a few seconds: 30 items of 100.
	s := e.startSink(pg, 4, nil, func() time.Duration { return 100 * time.Millisecond })
	e.waitFor("every event dispatched", func() bool { return s.events("acme") == bulk+normal+high })

	items := s.snapshot()
	done := map[events.Priority]int{} // index of the item that completed each priority
	count := map[events.Priority]int{}
	byPrio := map[events.Priority][]work.Item{}
	for i, it := range items {
		p := it.Priority
		if p == "" {
			t.Fatalf("item %d..%d carries no priority", it.FromSeq, it.ToSeq)
		}
		byPrio[p] = append(byPrio[p], it)
		count[p] += it.Count
		if count[p] == len(seqs[p]) {
			done[p] = i
		}
	}
	if !(done[events.PriorityHigh] < done[events.PriorityNormal] && done[events.PriorityNormal] < done[events.PriorityBulk]) {
		t.Errorf("items that completed high, normal, bulk: %d, %d, %d of %d; want high first, bulk last",
			done[events.PriorityHigh], done[events.PriorityNormal], done[events.PriorityBulk], len(items))
	}
	if done[events.PriorityNormal] > 5 {
		t.Errorf("the normal events were through only at item %d, behind the bulk import", done[events.PriorityNormal])
	}
	for p, its := range byPrio {
		checkExactlyOnce(t, its, map[string][]uint64{"acme": seqs[p]}, false)
		if got := d.PriorityEvents(pg, p); got != float64(len(seqs[p])) {
			t.Errorf("fairway_dispatcher_priority_events_total{priority=%q} = %v, want %d", p, got, len(seqs[p]))
		}
	}
}
