package dispatch_test

import (
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dispatch"
)

// The live doorbell reads ahead while the body budget has room and paces
// itself once it fills or a gap opens; each change starts a new consumer
// after the last sequence delivered, so every event is still dispatched
// exactly once. Once all is dispatched, no body is held.
func TestDoorbellPaceKeepsEveryEvent(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Minute)
	tenants := []string{"a", "b", "c"}
	for _, id := range tenants {
		e.tenant(id, 1, 2, pg)
	}
	// About a hundred bodies fit: each burst below fills it.
	d := e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: 50, PollInterval: time.Hour, BodyBudget: 32 << 10}, nil)
	s := e.startSink(pg, 2, nil, func() time.Duration { return 2 * time.Millisecond })
	applied := func() (n int) {
		for _, id := range tenants {
			n += s.events(id)
		}
		return n
	}
	seqs := map[string][]uint64{}
	total := 0
	add := func(got map[string][]uint64) {
		for id, ss := range got {
			seqs[id] = append(seqs[id], ss...)
			total += len(ss)
		}
	}
	// Once an event is applied the doorbell is running: what follows is
	// rung live.
	add(map[string][]uint64{"a": e.publish("a", 1)})
	e.waitFor("the first event applied", func() bool { return applied() == total })
	for range 3 {
		add(e.interleave(200, tenants, 1, 1, 1))
		e.waitFor("the burst applied", func() bool { return applied() == total })
	}
	checkExactlyOnce(t, s.snapshot(), seqs, false)
	// Everything dispatched, no body is held: each index let go of what
	// the grants dispatched, those that read PRODUCTS instead of the index
	// too. Then the doorbell reads ahead again.
	e.waitFor("every body released", func() bool { return d.BodiesHeld() == 0 })
	e.waitFor("the doorbell paced and reading ahead again", func() bool { return d.BellSwitches() >= 2 })
	t.Logf("%d events, doorbell pull changed %d times, bodies refilled %.0f", total, d.BellSwitches(), d.Refilled())
}
