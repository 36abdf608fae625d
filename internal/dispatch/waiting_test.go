package dispatch

import (
	"testing"
	"time"

	"github.com/fairwayhq/fairway/pkg/events"
)

// The backlog a doorbell ring gives the scheduler is the number of the
// tenant's events the index holds from its cursor on, where the index
// holds them all, and the span from the cursor to the last event rung
// only where it does not: a small tenant whose three events interleave
// with floods' events is three events, not thousands, and is served
// among the lightest new flows (scheduler.TestNewFlowsByShareAfterGrant).
func TestWaitingCountsIndexedEvents(t *testing.T) {
	t.Parallel()
	at := time.Now()
	ring := func(ix *seqIndex, ts *tenantState, seqs ...uint64) {
		for _, s := range seqs {
			ix.add(s, at, indexMaxRuns)
			ts.lastSeq = max(ts.lastSeq, s)
		}
	}
	const liveFrom, backFrom = 1000, 100
	cases := []struct {
		name     string
		backDone bool
		setup    func(ts *tenantState)
		want     int64
	}{
		{"fresh, cursor not loaded", true, func(ts *tenantState) {
			ts.fresh = true
			ring(&ts.live, ts, 1200, 5000, 9000)
		}, 3},
		{"cursor past the doorbell's start", true, func(ts *tenantState) {
			ts.cursor, ts.live.floor = 1500, 1500
			ring(&ts.live, ts, 1600, 4000, 9000)
		}, 3},
		{"the index dropped some", true, func(ts *tenantState) {
			ts.cursor = 1500
			ts.live.floor = 3000 // what lies between 1500 and 3000 is only in PRODUCTS
			ring(&ts.live, ts, 4000, 9000)
		}, 9000 - 1500 + 1},
		{"cursor in the backfill's region, backfill done", true, func(ts *tenantState) {
			ts.cursor = 150
			ts.back.floor = 150
			ring(&ts.back, ts, 200, 700)
			ring(&ts.live, ts, 2000)
		}, 3},
		{"backfill on its way, nothing dispatched", false, func(ts *tenantState) {
			ts.cursor = 1
			ts.backFirst, ts.backExpect = 120, 4
			ts.lastSeq = 900
			ring(&ts.back, ts, 120)
			ring(&ts.live, ts, 3000, 6000)
		}, 4 + 2},
		{"backfill on its way, part dispatched", false, func(ts *tenantState) {
			ts.cursor = 400
			ts.backFirst, ts.backExpect = 120, 4
			ring(&ts.live, ts, 3000)
		}, 3000 - 400 + 1},
		{"cursor not loaded, not fresh", true, func(ts *tenantState) {
			ring(&ts.live, ts, 1200, 5000)
		}, 5000},
		{"nothing after the cursor", true, func(ts *tenantState) {
			ts.cursor, ts.lastSeq = 5001, 5000
		}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := &Dispatcher{parts: newPartReads(events.Layout{})}
			d.readsFrom(backFrom, liveFrom)
			d.parts.parts[0].backDone.Store(c.backDone)
			x := &destination{d: d, tenants: map[string]*tenantState{}}
			ts := &tenantState{weight: 1}
			c.setup(ts)
			if got := x.waiting(ts); got != c.want {
				t.Fatalf("waiting %d, want %d", got, c.want)
			}
		})
	}
}

// A grant takes room in the work window for the items it may publish: one
// for a few events, up to the grant's batches for a flood's; the window
// lets a grant begin while this dispatcher's items waiting in WORK and
// those reserved are below its size.
func TestWorkWindowReservesByGrant(t *testing.T) {
	t.Parallel()
	w := &workWindow{grant: 4, size: 8}
	for _, c := range []struct{ events, want int }{{1, 1}, {3, 1}, {500, 1}, {501, 2}, {2000, 4}, {100_000, 4}} {
		r := w.reserve(c.events, 500)
		if r != c.want {
			t.Fatalf("a grant of %d events reserved %d items, want %d", c.events, r, c.want)
		}
		w.settle(r)
	}
	small := w.reserve(3, 500)
	flood := w.reserve(2000, 500)
	if !w.room() {
		t.Fatalf("no room with %d items reserved of 8", small+flood)
	}
	w.waiting = []waitingItem{{seq: 1}, {seq: 2}, {seq: 3}}
	if w.room() {
		t.Fatal("room with 3 waiting and 5 reserved of 8")
	}
	for seq := range uint64(4) {
		w.published(10+seq, 100)
	}
	w.settle(flood)
	if w.room() {
		t.Fatal("room with 7 waiting and 1 reserved of 8")
	}
	w.waiting = w.waiting[2:] // the consumer delivered two
	w.published(20, 100)
	w.settle(small)
	if !w.room() {
		t.Fatal("no room with 6 waiting of 8")
	}
	w.published(21, 100)
	w.published(22, 100)
	if w.room() {
		t.Fatal("room with 8 waiting of 8")
	}
}
