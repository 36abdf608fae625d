package dispatch_test

import (
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// A rewound cursor is dispatched again at once (no poll: the poll interval
// is an hour), flagged as a replay, one batch per grant and no faster than
// the replay's rate; meanwhile another tenant's new events go out as usual.
func TestReplayIsThrottledAndPickedUpAtOnce(t *testing.T) {
	t.Parallel()
	const (
		n     = 3000
		batch = 100
		rate  = 1000 // events/s: the replay takes at least (n-batch)/rate = 2.9 s
	)
	e := setup(t, time.Minute)
	e.tenant("big", 1, 8, pg)
	e.tenant("live", 1, 1, pg)
	seqs := e.publish("big", n)
	d := e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: batch, PollInterval: time.Hour, ReplayRate: 1}, nil)
	s := e.startSink(pg, 8, nil, func() time.Duration { return 0 })
	e.waitFor("big's events dispatched once", func() bool { return s.events("big") == n })
	// live's first event comes from the startup read; the later ones from
	// the doorbell's index, so every read below would be the replay's.
	liveSeqs := e.publish("live", 1)
	e.waitFor("live's first event", func() bool { return s.events("live") == 1 })
	before := len(s.snapshot())
	reads := d.Grants(pg, "read")

	start := time.Now()
	prev, err := e.st.Rewind(e.ctx, tenancy.Rewind{Tenant: "big", Dest: pg, From: seqs[0], Rate: rate})
	if err != nil {
		t.Fatal(err)
	}
	if prev != seqs[n-1]+1 {
		t.Fatalf("rewind from %d, want %d", prev, seqs[n-1]+1)
	}
	e.waitFor("the replay under way", func() bool { return s.events("big") > n })
	liveSeqs = append(liveSeqs, e.publish("live", 5)...)
	e.waitFor("live's events", func() bool { return s.events("live") == len(liveSeqs) })
	liveDone := s.events("big")
	e.waitFor("big's events dispatched twice", func() bool { return s.events("big") >= 2*n })
	took := time.Since(start)

	if liveDone >= 2*n {
		t.Errorf("live's events were dispatched only after the whole replay (%d of big's events by then)", liveDone)
	}
	if min := time.Duration(float64(n-batch) / rate * float64(time.Second)); took < min {
		t.Errorf("replay of %d events at %d/s took %v, want at least %v", n, rate, took, min)
	}
	if got := d.Throttled(pg); got == 0 {
		t.Errorf("no grant was held back by the replay's rate")
	}
	// big's events are consecutive in the stream: the replay is cut by
	// arithmetic, never read.
	if got := d.Grants(pg, "read") - reads; got != 0 {
		t.Errorf("%v grants of a dense replay read PRODUCTS", got)
	}
	if d.Grants(pg, "dense") == 0 {
		t.Errorf("no grant of the dense replay was cut by arithmetic")
	}
	var replayed []uint64
	for _, it := range s.snapshot()[before:] {
		switch {
		case it.Tenant == "live" && it.Replay:
			t.Errorf("live's item %d..%d flagged as a replay", it.FromSeq, it.ToSeq)
		case it.Tenant == "big" && !it.Replay:
			t.Errorf("replayed item %d..%d not flagged as a replay", it.FromSeq, it.ToSeq)
		case it.Tenant == "big" && it.Count > batch:
			t.Errorf("replayed item %d..%d holds %d events, more than one batch (%d)", it.FromSeq, it.ToSeq, it.Count, batch)
		}
		if it.Tenant == "big" {
			replayed = append(replayed, it.FromSeq)
		}
	}
	for _, it := range s.snapshot()[:before] {
		if it.Replay {
			t.Errorf("first dispatch of %s %d..%d flagged as a replay", it.Tenant, it.FromSeq, it.ToSeq)
		}
	}
	checkExactlyOnce(t, filterTenant(s.snapshot()[before:], "big"), map[string][]uint64{"big": seqs}, false)
	t.Logf("replayed %d events in %v (%d items), %v throttled grants", n, took.Round(time.Millisecond), len(replayed), d.Throttled(pg))
}

// An unthrottled replay of a range shared with another tenant is read
// from PRODUCTS (not cut by arithmetic) and dispatched exactly once more,
// without being held back.
func TestReplayUnthrottled(t *testing.T) {
	t.Parallel()
	const n, batch = 2000, 100
	e := setup(t, time.Minute)
	e.tenant("big", 1, 8, pg)
	e.tenant("other", 1, 8, pg)
	seqs := e.interleave(n/100, []string{"big", "other"}, 100, 1)["big"]
	d := e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: batch, PollInterval: time.Hour, ReplayRate: 1}, nil)
	s := e.startSink(pg, 8, nil, func() time.Duration { return 0 })
	e.waitFor("big's events dispatched once", func() bool { return s.events("big") == n })
	e.waitFor("other's events dispatched", func() bool { return s.events("other") == n/100 })
	before := len(s.snapshot())
	if _, err := e.st.Rewind(e.ctx, tenancy.Rewind{Tenant: "big", Dest: pg, From: seqs[0], Rate: tenancy.ReplayUnthrottled}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("big's events dispatched twice", func() bool { return s.events("big") >= 2*n })
	if got := d.Throttled(pg); got != 0 {
		t.Errorf("%v grants of an unthrottled replay held back", got)
	}
	if got := d.Grants(pg, "dense"); got != 0 {
		t.Errorf("%v grants of a range shared with another tenant cut by arithmetic", got)
	}
	checkExactlyOnce(t, filterTenant(s.snapshot()[before:], "big"), map[string][]uint64{"big": seqs}, false)
}

func filterTenant(items []work.Item, tenant string) []work.Item {
	var out []work.Item
	for _, it := range items {
		if it.Tenant == tenant {
			out = append(out, it)
		}
	}
	return out
}

// A replaying tenant's live events do not wait for its replay: the replay
// runs in its own lane, with its own cursor and slot, so with the
// tenant's one slot and a slow replay the live events are applied while
// the replay is far from done, and neither lane dispatches the other's
// events.
func TestLiveEventsFlowDuringTheirTenantsReplay(t *testing.T) {
	t.Parallel()
	const (
		n     = 3000
		batch = 100
		rate  = 300 // events/s: the replay takes about 10 s
	)
	e := setup(t, time.Minute)
	e.tenant("big", 1, 1, pg)
	seqs := e.publish("big", n)
	e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: batch, PollInterval: time.Hour}, nil)
	s := e.startSink(pg, 8, nil, func() time.Duration { return 0 })
	e.waitFor("big's events dispatched once", func() bool { return s.events("big") == n })
	before := len(s.snapshot())
	if _, err := e.st.Rewind(e.ctx, tenancy.Rewind{Tenant: "big", Dest: pg, From: seqs[0], Rate: rate}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the replay under way", func() bool { return s.events("big") > n })
	live := e.publish("big", 20)
	e.waitFor("big's live events applied", func() bool {
		got := 0
		for _, it := range s.snapshot()[before:] {
			if !it.Replay && it.FromSeq >= live[0] {
				got += it.Count
			}
		}
		return got == len(live)
	})
	replayed := 0
	for _, it := range s.snapshot()[before:] {
		if it.Replay {
			replayed += it.Count
		}
	}
	if replayed >= n/2 {
		t.Errorf("big's live events were applied only after %d of its %d replayed events", replayed, n)
	}
	ps, err := e.st.PairState(e.ctx, "big", pg)
	if err != nil {
		t.Fatal(err)
	}
	if !ps.Replaying() || ps.NextSeq != live[len(live)-1]+1 {
		t.Errorf("pair %+v, want the replay still running and the cursor past the live events", ps)
	}
	e.waitFor("big's events dispatched twice", func() bool { return s.events("big") >= 2*n+len(live) })
	var replay, rest []work.Item
	for _, it := range filterTenant(s.snapshot()[before:], "big") {
		if it.Replay {
			replay = append(replay, it)
		} else {
			rest = append(rest, it)
		}
	}
	checkExactlyOnce(t, replay, map[string][]uint64{"big": seqs}, false)
	checkExactlyOnce(t, rest, map[string][]uint64{"big": live}, false)
}

// A replay whose range holds none of its tenant's events (a bounded one
// over other tenants' events) ends by itself at once, without waiting for
// a poll (an hour here), and one that widens it to the tenant's later
// events replays those.
func TestReplayOfNothingEnds(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Minute)
	e.tenant("big", 1, 2, pg)
	e.tenant("other", 1, 2, pg)
	e.publish("big", 100)
	between := e.publish("other", 100)
	last := e.publish("big", 100)
	e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: 100, PollInterval: time.Hour}, nil)
	s := e.startSink(pg, 4, nil, func() time.Duration { return 0 })
	e.waitFor("big's events dispatched", func() bool { return s.events("big") == 200 })
	replaying := func() bool {
		ps, err := e.st.PairState(e.ctx, "big", pg)
		if err != nil {
			t.Fatal(err)
		}
		return ps.Replaying()
	}
	if _, err := e.st.Rewind(e.ctx, tenancy.Rewind{Tenant: "big", Dest: pg, From: between[0], Last: between[len(between)-1]}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the empty replay over", func() bool { return !replaying() })
	if got := s.events("big"); got != 200 {
		t.Errorf("%d of big's events applied, want 200: the empty replay dispatched some", got)
	}
	if _, err := e.st.Rewind(e.ctx, tenancy.Rewind{Tenant: "big", Dest: pg, From: between[0], Last: between[len(between)-1]}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.Rewind(e.ctx, tenancy.Rewind{Tenant: "big", Dest: pg, From: last[0], Last: last[len(last)-1]}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("big's last events replayed", func() bool { return s.events("big") == 300 })
	e.waitFor("the widened replay over", func() bool { return !replaying() })
}
