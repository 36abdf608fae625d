package dispatch

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fairwayhq/fairway/internal/dispatch/scheduler"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// take must cut exactly what cut cuts from a read of the same sequences.
func TestSeqIndexTakeMatchesCut(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 500 {
		var ix seqIndex
		var seqs []uint64
		seq := uint64(rng.IntN(5) + 1)
		for range rng.IntN(60) {
			seq += uint64(1 + rng.IntN(3)*rng.IntN(2)) // runs with gaps
			seqs = append(seqs, seq)
			ix.add(seq, time.Time{}, 1000)
		}
		cursor := uint64(1 + rng.IntN(10))
		n, size := 1+rng.IntN(40), 1+rng.IntN(12)
		ranges, counts, lists, _, rest := ix.take(cursor, n, size)

		var read []work.Stored
		for _, s := range seqs {
			if s >= cursor && len(read) < n {
				read = append(read, work.Stored{Seq: s})
			}
		}
		var wantR []tenancy.Range
		var wantC []int
		var wantL [][]uint64
		if len(read) > 0 {
			wantR, wantC, wantL = cut(read, size)
		}
		known := 0
		for _, s := range seqs {
			if s >= cursor {
				known++
			}
		}
		if !slices.Equal(ranges, wantR) || !slices.Equal(counts, wantC) || !slices.EqualFunc(lists, wantL, slices.Equal) || rest != uint64(known-len(read)) {
			t.Fatalf("trial %d: seqs %v cursor %d n %d size %d:\n take %v %v %v rest %d\n cut  %v %v %v rest %d",
				trial, seqs, cursor, n, size, ranges, counts, lists, rest, wantR, wantC, wantL, known-len(read))
		}
	}
}

// The index keeps its count of sequences as runs are added, trimmed and
// forgotten at maxRuns, instead of walking every run per grant; through a
// long life of interleaved adds and takes it must equal what walking the
// runs gives, and take's rest what is left after the taken.
func TestSeqIndexCountFollowsRuns(t *testing.T) {
	t.Parallel()
	walk := func(ix *seqIndex) int {
		n := 0
		for _, r := range ix.runs {
			n += int(r.n)
		}
		return n
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 200 {
		var ix seqIndex
		maxRuns := 1 + rng.IntN(8)
		seq, cursor := uint64(1), uint64(1)
		for op := range 300 {
			switch rng.IntN(3) {
			case 0, 1:
				seq += uint64(1 + rng.IntN(3)*rng.IntN(2))
				ix.add(seq, time.Time{}, maxRuns)
			case 2:
				before := walk(&ix)
				_, counts, _, _, rest := ix.take(cursor, 1+rng.IntN(10), 1+rng.IntN(4))
				taken := sum(counts)
				if after := walk(&ix); rest != uint64(after-taken) || after > before {
					t.Fatalf("trial %d op %d: take at %d: rest %d, want %d of %d known", trial, op, cursor, rest, after-taken, after)
				}
				cursor += uint64(rng.IntN(6)) // a grant moves it, not always past all it took
			}
			if got, want := ix.count(), walk(&ix); got != want {
				t.Fatalf("trial %d op %d: count %d, runs hold %d (%v)", trial, op, got, want, ix.runs)
			}
			if len(ix.runs) > maxRuns {
				t.Fatalf("trial %d op %d: %d runs, at most %d", trial, op, len(ix.runs), maxRuns)
			}
		}
	}
}

// BenchmarkSeqIndexTake is one grant's take from a tenant whose events
// interleave one by one with another's (every run one event long) at
// indexMaxRuns runs, the index a backfill of two interleaved floods
// builds: the grant takes 4 batches of 500 and the next begins past them.
func BenchmarkSeqIndexTake(b *testing.B) {
	var ix seqIndex
	seq := uint64(1)
	for range indexMaxRuns {
		ix.add(seq, time.Time{}, indexMaxRuns)
		seq += 2
	}
	cursor := uint64(1)
	b.ResetTimer()
	for b.Loop() {
		ranges, _, _, _, _ := ix.take(cursor, 2000, 500)
		cursor = ranges[len(ranges)-1].To + 1
		for range 2000 { // the backfill delivers as much again
			ix.add(seq, time.Time{}, indexMaxRuns)
			seq += 2
		}
	}
}

func TestSeqIndexAdd(t *testing.T) {
	t.Parallel()
	var ix seqIndex
	t0 := time.Unix(100, 0)
	for _, s := range []uint64{5, 6, 7, 6, 9, 10, 12} { // 6 again: a redelivery
		ix.add(s, t0.Add(time.Duration(s)*time.Millisecond), 100)
	}
	runs := func() [][2]uint64 {
		var out [][2]uint64
		for _, r := range ix.runs {
			out = append(out, [2]uint64{r.first, r.last()})
		}
		return out
	}
	timeOf := func(seq uint64) int64 {
		p, ok := ix.locate(seq)
		if !ok {
			t.Fatalf("seq %d not in the index", seq)
		}
		ms, _ := ix.timeMs(p)
		return ms - t0.UnixMilli()
	}
	if want := [][2]uint64{{5, 7}, {9, 10}, {12, 12}}; !slices.Equal(runs(), want) || ix.count() != 6 {
		t.Fatalf("runs %v (%d events), want %v", runs(), ix.count(), want)
	}
	for _, s := range []uint64{5, 6, 7, 9, 10, 12} {
		if got := timeOf(s); got != int64(s) {
			t.Fatalf("seq %d stored at +%d ms, want +%d", s, got, s)
		}
	}
	// Over maxRuns the oldest runs go and floor moves past them.
	ix.add(20, t0, 3)
	if ix.floor != 9 || len(ix.runs) != 3 || ix.runs[0].first != 9 || ix.count() != 4 {
		t.Fatalf("after overflow: floor %d runs %v", ix.floor, runs())
	}
	ix.trim(10)
	if want := [][2]uint64{{10, 10}, {12, 12}, {20, 20}}; !slices.Equal(runs(), want) || ix.floor != 10 || timeOf(10) != 10 || timeOf(12) != 12 {
		t.Fatalf("trim(10): %v floor %d", runs(), ix.floor)
	}
	ix.add(8, t0.Add(8*time.Millisecond), 3) // below what the index knows: ignored
	if ix.runs[0].first != 10 {
		t.Fatalf("a sequence below the floor was added: %v", runs())
	}
	ix.trim(100)
	if len(ix.runs) != 0 || ix.count() != 0 {
		t.Fatalf("trim(100): %v", runs())
	}
}

// The index hands out each event's store time as its own millisecond (what
// a read with headers gives, truncated), across runs, and nothing when it
// does not know every event of the range or a time does not fit.
func TestSeqIndexTimes(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 24, 10, 0, 0, 700_000, time.UTC) // 0.7 ms past a millisecond
	var ix seqIndex
	stored := map[uint64]time.Time{}
	for i, s := range []uint64{3, 4, 5, 8, 9, 11} {
		at := t0.Add(time.Duration(i)*1500*time.Microsecond + time.Duration(s)*time.Hour)
		stored[s] = at
		ix.add(s, at, 100)
	}
	check := func(from, to uint64, count int) {
		t.Helper()
		tm := ix.times(from, to, count)
		if tm == nil {
			t.Fatalf("times(%d, %d, %d) = nil", from, to, count)
		}
		i := 0
		for s := from; s <= to; s++ {
			want, ok := stored[s]
			if !ok {
				continue
			}
			got := tm.At(i)
			if !got.Equal(time.UnixMilli(want.UnixMilli())) { // its own millisecond
				t.Errorf("seq %d: time %v, stored %v", s, got, want)
			}
			i++
		}
		if i != count {
			t.Fatalf("%d known events in %d..%d, asked for %d", i, from, to, count)
		}
	}
	check(3, 5, 3)
	check(4, 9, 4)
	check(3, 11, 6)
	if ix.times(3, 11, 5) != nil || ix.times(3, 12, 7) != nil || ix.times(1, 3, 2) != nil {
		t.Fatal("times of a range the index does not know exactly")
	}
	ix.trim(4)
	check(4, 8, 3)
	// A time before its run's start (a clock step back) loses the run's times.
	ix.add(12, t0, 100)
	if ix.times(11, 12, 2) != nil {
		t.Fatal("times of a run whose clock went back")
	}
	check(8, 9, 2)
}

// The doorbell indexes an event under its stored subject's tenant and
// priority (products.[<partition>.]<tenant>.<op>[.<priority>]); anything
// else is no tenant's event.
func TestParseSubject(t *testing.T) {
	t.Parallel()
	type want struct {
		tenant string
		op     events.Op
		p      events.Priority
		ok     bool
	}
	for subject, w := range map[string]want{
		"products.acme.upsert":          {"acme", events.OpUpsert, events.PriorityNormal, true},
		"products.acme.delete":          {"acme", events.OpDelete, events.PriorityNormal, true},
		"products.acme.upsert.high":     {"acme", events.OpUpsert, events.PriorityHigh, true},
		"products.acme.delete.bulk":     {"acme", events.OpDelete, events.PriorityBulk, true},
		"products.5.acme.upsert":        {"acme", events.OpUpsert, events.PriorityNormal, true},
		"products.5.acme.delete.bulk":   {"acme", events.OpDelete, events.PriorityBulk, true},
		"products.3.upsert":             {"3", events.OpUpsert, events.PriorityNormal, true},
		"products.3.upsert.high":        {"3", events.OpUpsert, events.PriorityHigh, true},
		"products.0.3.upsert.high":      {"3", events.OpUpsert, events.PriorityHigh, true},
		"products.0.upsert.upsert":      {"upsert", events.OpUpsert, events.PriorityNormal, true},
		"products.5.acme.upsert.normal": {},
		"products.acme.upsert.normal":   {},
		"products.acme.upsert.x":        {},
		"products.acme":                 {},
		"products.acme.x.y.z":           {},
		"products..upsert":              {},
		"products.acme.":                {},
		"other.acme.upsert":             {},
	} {
		tenant, op, p, ok := parseSubject(subject)
		if ok != w.ok || ok && (tenant != w.tenant || op != w.op || p != w.p) {
			t.Errorf("parseSubject(%q) = %q %q %q %v; want %+v", subject, tenant, op, p, ok, w)
		}
	}
}

// grantingDestination is a destination "postgres" of a dispatcher that is
// not running, with batches of 10 and grants of up to 4 of them, and its
// scheduler.
func testScheduler(t *testing.T, sc scheduler.Config) *scheduler.Scheduler {
	t.Helper()
	s, err := scheduler.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testMetrics are a dispatcher's metrics on a registry of their own.
func testMetrics(t *testing.T) *metrics {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func grantingDestination(t *testing.T) (*Dispatcher, *destination, *scheduler.Scheduler) {
	t.Helper()
	return grantingDestinationOf(t, 10)
}

// grantingDestinationOf is grantingDestination with batches of batch.
func grantingDestinationOf(t *testing.T, batch int) (*Dispatcher, *destination, *scheduler.Scheduler) {
	t.Helper()
	cfg := (&Config{Dests: []string{"postgres"}, BatchSize: batch, GrantBatches: 4}).WithDefaults()
	d := &Dispatcher{cfg: cfg, parts: newPartReads(events.Layout{}), m: testMetrics(t)}
	sc := scheduler.Config{Quantum: cfg.quantum("postgres"), MaxBatch: cfg.BatchSize * cfg.GrantBatches, LoneRounds: cfg.GrantBatches}
	sched, err := scheduler.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	return d, newDestination(d, "postgres", sched, testScheduler(t, sc)), sched
}

// While the backfill rings a tenant's backlog oldest first, the scheduler's
// hint stays at what the start-up scan counted: a grant may then take as
// much as the backlog allows, not only what the backfill rang so far
// (which made the first grants short batches even once the backfill had
// caught up). fromIndex cuts what has been delivered by the time the grant
// runs (TestGrantCutsWhatBackfillDelivered).
func TestBackfillKeepsScanBacklog(t *testing.T) {
	t.Parallel()
	_, x, sched := grantingDestination(t)
	// The scan: 200 events of solo from sequence 1.
	x.seed(tenancy.PairState{Tenant: "solo", NextSeq: 1, Weight: 1}, events.PriorityNormal, 200, 1, denseRun{}, x.asOf())
	at := time.Unix(1_764_000_000, 0)
	for seq := uint64(1); seq <= 16; seq++ {
		x.bell("solo", events.PriorityNormal, seq, at, nil, true)
	}
	g, ok := sched.Next()
	if !ok {
		t.Fatal("no grant")
	}
	if g.MaxEvents != 40 {
		t.Fatalf("first grant may take %d events, want 40 (4 batches of 10 of the scanned 200)", g.MaxEvents)
	}
}

// While the backfill is on its way, a grant is cut from what it has
// delivered even when that is less than the grant may take; only a tenant
// of which it has delivered nothing past the cursor yet is read.
func TestGrantCutsWhatBackfillDelivered(t *testing.T) {
	t.Parallel()
	d, x, _ := grantingDestination(t)
	d.readsFrom(1, 1001) // the backfill covers 1..1000, and has delivered up to 32
	x.seed(tenancy.PairState{Tenant: "solo", NextSeq: 1, Weight: 1}, events.PriorityNormal, 500, 1, denseRun{}, x.asOf())
	x.seed(tenancy.PairState{Tenant: "late", NextSeq: 1, Weight: 1}, events.PriorityNormal, 500, 40, denseRun{}, x.asOf())
	at := time.Unix(1_764_000_000, 0)
	for seq := uint64(1); seq <= 32; seq += 2 {
		x.bell("solo", events.PriorityNormal, seq, at, nil, true) // 16 events, every other sequence
	}
	ts := x.state("solo")
	ranges, counts, _, _, _, ok := x.fromIndex(ts, 1, 40)
	if !ok || sum(counts) != 16 || len(ranges) != 2 || ranges[0].From != 1 || ranges[1].To != 31 {
		t.Fatalf("grant of 40 with 16 delivered: ok %v, ranges %v, counts %v; want the 16 in batches of 10 and 6", ok, ranges, counts)
	}
	if _, _, _, _, _, ok := x.fromIndex(x.state("late"), 1, 40); ok {
		t.Fatal("a tenant the backfill delivered nothing of yet is cut from the index, want a read")
	}
}

// A grant cut from the index while the backfill is still delivering does
// not know all its tenant has waiting (TestGrantCutsWhatBackfillDelivered:
// 16 of a backlog of 500), so its last item is not marked caught up; once
// the backfill is done, or from any other source, nothing pending means
// caught up.
func TestCaughtUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		source   string
		pending  uint64
		backDone bool
		want     bool
	}{
		{"index", 0, false, false},
		{"index", 0, true, true},
		{"index", 3, true, false},
		{"read", 0, false, true},
		{"dense", 0, false, true},
		{"feed", 0, false, true},
		{"read", 1, true, false},
	} {
		if got := caughtUp(tc.source, tc.pending, tc.backDone); got != tc.want {
			t.Errorf("caughtUp(%s, pending %d, backfill done %v) = %v, want %v", tc.source, tc.pending, tc.backDone, got, tc.want)
		}
	}
}

// A pair this dispatcher does not grant (parked for another one) forgets
// what the scan says was dispatched, so its index does not grow with every
// event the doorbell rings.
func TestSeedTrimsUngrantedIndex(t *testing.T) {
	t.Parallel()
	cfg := (&Config{Dests: []string{"postgres"}, BatchSize: 10}).WithDefaults()
	d := &Dispatcher{cfg: cfg, parts: newPartReads(events.Layout{}), m: testMetrics(t)}
	sc := scheduler.Config{Quantum: cfg.quantum("postgres"), MaxBatch: cfg.BatchSize}
	sched, err := scheduler.New(sc)
	if err != nil {
		t.Fatal(err)
	}
	x := newDestination(d, "postgres", sched, testScheduler(t, sc))
	d.readsFrom(0, 1) // the doorbell follows the stream from its start
	x.seed(tenancy.PairState{Tenant: "other", NextSeq: 1, Weight: 1}, events.PriorityNormal, 0, 0, denseRun{}, x.asOf())
	at := time.Unix(1_764_000_000, 0)
	for seq := uint64(1); seq <= 100; seq++ {
		x.bell("other", events.PriorityNormal, seq, at, nil, false)
	}
	// The owner dispatched 90 of them; a poll tells this dispatcher.
	x.seed(tenancy.PairState{Tenant: "other", NextSeq: 91, Weight: 1}, events.PriorityNormal, 10, 91, denseRun{}, x.asOf())
	x.mu.Lock()
	held := x.tenants["other"].live.count()
	x.mu.Unlock()
	if held != 10 {
		t.Errorf("index holds %d sequences, want the 10 not dispatched yet", held)
	}

	// A cursor still before the doorbell's start leaves the live index
	// alone: a floor there would make fromIndex read PRODUCTS for the
	// tenant's next live events (the 10,000-tenant benchmark's second
	// round took 17 s instead of 5).
	d.readsFrom(0, 200)
	x.seed(tenancy.PairState{Tenant: "fresh", NextSeq: 150, Weight: 1}, events.PriorityNormal, 0, 0, denseRun{}, x.asOf())
	x.mu.Lock()
	floor := x.tenants["fresh"].live.floor
	x.mu.Unlock()
	if floor != 0 {
		t.Errorf("live index floor %d after a seed below liveFrom, want 0", floor)
	}
}

// While the start-up backfill is still delivering a tenant's backlog (as
// the start-up scan counted it), a grant that could cut only a short
// batch is held back, every time, until the backfill has rung the rest of
// a batch or for backfillWaitMax: two hundred interleaved floods were
// otherwise cut in batches of a few dozen events at the backfill's pace, a
// grant, a statement and a work item each. Once the backfill has rung all
// of the backlog it counted, a short grant is held once and the next cuts
// whatever is there. A full batch is never held, nor is a cursor in the
// doorbell's part of the index.
func TestWaitForBackfill(t *testing.T) {
	t.Parallel()
	x, sched, m, ts, k, grant := soloInBackfill(t)
	backInRounds := func() {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			if g, ok := sched.Next(); ok && g.Key == k {
				x.mu.Lock()
				ts.granted = true
				x.mu.Unlock()
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("solo never back in the rounds after its wait")
			}
			time.Sleep(time.Millisecond)
		}
	}
	grant()
	for i := range 2 { // its counted backlog is still to come: held each time
		if cutNothing := i == 1; !x.waitForBackfill(k, ts, 1, 6*(1-i), !cutNothing) {
			t.Fatalf("short grant %d while the backfill has more of solo's backlog to ring: not held back", i+1)
		}
		if _, ok := sched.Next(); ok {
			t.Fatal("solo granted again during its wait")
		}
		backInRounds()
	}
	// The backfill rings the whole backlog the scan counted (500 events
	// from 1, every other sequence here).
	at := time.Unix(1_764_000_000, 0)
	for seq := uint64(1); seq < 1000; seq += 2 {
		x.bell("solo", events.PriorityNormal, seq, at, nil, true)
	}
	x.mu.Lock()
	ts.granted = false
	_ = sched.Done(k, 0, 500)
	x.mu.Unlock()
	grant()
	if x.waitForBackfill(k, ts, 1, 0, false) {
		t.Fatal("a grant the index cuts nothing for, once the backlog was rung: held back instead of read")
	}
	if !x.waitForBackfill(k, ts, 1, 6, true) {
		t.Fatal("a short grant once the backlog was rung: not held back once")
	}
	backInRounds()
	if x.waitForBackfill(k, ts, 1, 6, true) {
		t.Fatal("held back twice in a row once the backlog was rung; the grant after a wait cuts what is there")
	}
	// That grant dispatches its 6 events and ends.
	x.mu.Lock()
	ts.granted = false
	_ = sched.Done(k, 6, 494)
	x.mu.Unlock()
	grant()
	if x.waitForBackfill(k, ts, 7, 10, true) {
		t.Fatal("a full batch held back")
	}
	if x.waitForBackfill(k, ts, 1001, 3, true) {
		t.Fatal("a cursor in the doorbell's part held back")
	}
	if !x.waitForBackfill(k, ts, 7, 4, true) {
		t.Fatal("a short grant after one that was not held: not held back")
	}
	// The backfill rings 6 more of solo's events, the rest of a batch:
	// solo is back in the rounds at once, well before backfillWaitMax.
	for seq := uint64(1001); seq < 1011; seq += 2 {
		x.bell("solo", events.PriorityNormal, seq, at, nil, true)
		if _, ok := sched.Next(); ok {
			t.Fatalf("solo granted after %d of the 6 events it waits for", (seq-1001)/2+1)
		}
	}
	x.bell("solo", events.PriorityNormal, 1011, at, nil, true)
	if g, ok := sched.Next(); !ok || g.Key != k {
		t.Fatalf("after the backfill rang the rest of a batch: grant %+v, %v; want solo's", g, ok)
	}
	if got := testutil.ToFloat64(m.backfillWaits.WithLabelValues("postgres")); got != 4 {
		t.Fatalf("backfill_waits_total %v, want 4", got)
	}
	// A tenant with only a few counted is read at once, however far the
	// backfill still is from its events.
	x.seed(tenancy.PairState{Tenant: "tiny", NextSeq: 1, Weight: 1}, events.PriorityNormal, 3, 900, denseRun{}, x.asOf())
	if x.waitForBackfill(x.key("tiny"), x.state("tiny"), 1, 0, false) {
		t.Fatal("a tenant with 3 events counted held back for the backfill")
	}
}

// A flood of less than a batch whose events interleave with others' (in
// every block of the backlog) waits for the start-up backfill while it
// has rung none of them, however often it is granted, rather than read
// PRODUCTS with a subject filter, which costs the server a load of every
// block; once some have been rung, its next grant cuts them. A tenant
// with no more than backfillReadMax still to come from the backfill reads
// at once: few counted, or most of its count rung by the doorbell when
// it was counted (the count runs to the stream's end; events stored
// since do not count), or a state made after the backfill passed its
// cursor, to which the backfill brings nothing.
func TestFloodWaitsForBackfill(t *testing.T) {
	t.Parallel()
	d, x, _ := grantingDestinationOf(t, 500)
	d.readsFrom(1, 100_001)
	x.seed(tenancy.PairState{Tenant: "flood", NextSeq: 1, Weight: 1}, events.PriorityNormal, 200, 7, denseRun{}, x.asOf())
	k, ts := x.key("flood"), x.state("flood")
	for i := range 2 {
		if !x.waitForBackfill(k, ts, 1, 0, false) {
			t.Fatalf("grant %d of a flood of 200 counted, none rung: read instead of held back", i+1)
		}
	}
	x.bell("flood", events.PriorityNormal, 7, time.Unix(1_764_000_000, 0), nil, true)
	if x.waitForBackfill(k, ts, 1, 1, true) {
		t.Fatal("a flood's grant after its wait, with some of it rung: held back again instead of cut")
	}
	seed := func(tenant string, backlog, first uint64) (scheduler.Key, *tenantState) {
		x.seed(tenancy.PairState{Tenant: tenant, NextSeq: 1, Weight: 1}, events.PriorityNormal, backlog, first, denseRun{}, x.asOf())
		return x.key(tenant), x.state(tenant)
	}
	if k, ts := seed("few", backfillReadMax, 9); x.waitForBackfill(k, ts, 1, 0, false) {
		t.Fatalf("a tenant with %d events counted held back for the backfill", backfillReadMax)
	}
	if k, ts := seed("more", backfillReadMax+1, 9); !x.waitForBackfill(k, ts, 1, 0, false) {
		t.Fatalf("a tenant with %d events counted, none rung: read instead of held back", backfillReadMax+1)
	}
	ring := func(tenant string, from, to uint64) { // the doorbell's live events
		for seq := from; seq <= to; seq++ {
			x.bell(tenant, events.PriorityNormal, seq, time.Unix(1_764_000_000, 0), nil, false)
		}
	}
	ring("mixed", 100_001, 100_020) // stored before the count: 20 of the 30 counted
	if k, ts := seed("mixed", 30, 11); x.waitForBackfill(k, ts, 1, 0, false) {
		t.Fatal("a tenant with 30 counted of which the doorbell had rung 20: held back for the backfill")
	}
	k, ts = seed("busy", 200, 15)
	ring("busy", 100_021, 100_320) // stored after the count: none of the 200 counted
	if !x.waitForBackfill(k, ts, 1, 0, false) {
		t.Fatal("a flood of 200 counted, none rung by the backfill, 300 stored since: read instead of held back")
	}
	d.parts.parts[0].backSeq.Store(50_000) // the backfill is past 50,000
	if k, ts := seed("late", 200, 13); x.waitForBackfill(k, ts, 1, 0, false) {
		t.Fatal("a state made after the backfill passed its cursor: held back for the backfill")
	}
}

// soloInBackfill is a destination (batches of 10) whose start-up backfill
// is to deliver sequences 1 to 1000, with one tenant, solo, whose 500
// events begin at 1; grant takes solo's next grant.
func soloInBackfill(t *testing.T) (x *destination, sched *scheduler.Scheduler, m *metrics, ts *tenantState, k scheduler.Key, grant func()) {
	t.Helper()
	var d *Dispatcher
	d, x, sched = grantingDestination(t)
	m = d.m
	d.readsFrom(1, 1001)
	x.seed(tenancy.PairState{Tenant: "solo", NextSeq: 1, Weight: 1}, events.PriorityNormal, 500, 1, denseRun{}, x.asOf())
	ts = x.state("solo")
	k = x.key("solo")
	grant = func() {
		t.Helper()
		g, ok := sched.Next()
		if !ok || g.Key != k {
			t.Fatalf("grant %+v, %v; want one of solo", g, ok)
		}
		x.mu.Lock()
		ts.granted = true
		x.mu.Unlock()
	}
	return x, sched, m, ts, k, grant
}

// A hold (a wait for the backfill, a replay's rate) that a release's
// wake-up ended before its time is over: neither its timer nor the
// backfill's bells may then put back in the rounds a tenant that has
// since found its slot limit; only a release does.
func TestStaleHoldKeepsLimitBlock(t *testing.T) {
	t.Parallel()
	x, sched, _, ts, k, grant := soloInBackfill(t)
	atLimit := func() { // the grant's DispatchMany found no free slot
		x.mu.Lock()
		gen := ts.gen
		ts.granted, ts.full, ts.freed = false, true, 0
		x.blockUnlessReleased(k, ts, gen)
		_ = sched.Done(k, 0, 0)
		x.mu.Unlock()
	}
	at := time.Unix(1_764_000_000, 0)
	for _, hold := range []struct {
		name  string
		start func()
	}{
		{"a wait for the backfill", func() {
			if !x.waitForBackfill(k, ts, 1, 6, true) {
				t.Fatal("a short grant from the backfill's part not held back")
			}
		}},
		{"a replay's rate", func() { x.throttle(k, ts, backfillWaitMax) }},
	} {
		grant()
		hold.start()
		if _, ok := sched.Next(); ok {
			t.Fatalf("%s: solo granted during the hold", hold.name)
		}
		x.unblock("solo", 1) // a release ends the hold early
		grant()
		atLimit()
		for seq := uint64(1); seq <= 12; seq++ {
			x.bell("solo", events.PriorityNormal, seq, at, nil, true)
		}
		time.Sleep(3 * backfillWaitMax) // the hold's own timer has fired
		if g, ok := sched.Next(); ok {
			t.Fatalf("%s: solo, at its slot limit, granted (%+v) after its hold had ended", hold.name, g)
		}
		x.unblock("solo", 1)
		if g, ok := sched.Next(); !ok || g.Key != k {
			t.Fatalf("%s: after a release: grant %+v, %v; want solo's", hold.name, g, ok)
		}
		x.mu.Lock()
		_ = sched.Done(k, 0, 0)
		x.mu.Unlock()
	}
}

// A tenant new since the start (none of its events before the doorbell's
// first) is not held back for the start-up backfill, which has nothing of
// it to ring: its first short grant goes out at once. A tenant the
// start-up scan saw still waits for a batch of its backlog.
func TestNewTenantDoesNotWaitForBackfill(t *testing.T) {
	t.Parallel()
	d, x, _ := grantingDestination(t)
	d.before = map[string]bool{"old": true}
	d.readsFrom(1, 1001) // the backfill covers 1..1000 and is still on its way
	at := time.Unix(1_764_000_000, 0)
	d.rung.Store("new", uint64(1001))
	x.bell("new", events.PriorityNormal, 1001, at, nil, false)
	ts := x.state("new")
	if !ts.fresh {
		t.Fatal("a tenant first rung by the doorbell after the start is not fresh")
	}
	if x.waitForBackfill(x.key("new"), ts, 1, 1, true) {
		t.Error("the new tenant's one-event grant is held for the backfill")
	}
	x.seed(tenancy.PairState{Tenant: "old", NextSeq: 1, Weight: 1}, events.PriorityNormal, 500, 1, denseRun{}, x.asOf())
	x.bell("old", events.PriorityNormal, 1, at, nil, true)
	if !x.waitForBackfill(x.key("old"), x.state("old"), 1, 1, true) {
		t.Error("a scanned tenant's short grant is not held for the backfill")
	}
}

// A read of PostgreSQL taken before a grant of the tenant ended (a poll's
// scan, a reload) does not put its cursor back: the next grant would
// begin where the last one began and lose the cursor check to it. A read
// taken after the grant applies.
func TestStaleSeedKeepsTheGrantsCursor(t *testing.T) {
	t.Parallel()
	d, x, _ := grantingDestination(t)
	d.readsFrom(0, 1)
	x.seed(tenancy.PairState{Tenant: "acme", NextSeq: 1, Weight: 1}, events.PriorityNormal, 30, 1, denseRun{}, x.asOf())
	cursor := func() uint64 {
		x.mu.Lock()
		defer x.mu.Unlock()
		return x.tenants["acme"].cursor
	}

	asOf := x.asOf() // a poll reads the cursor, 1, ...
	x.mu.Lock()
	ts := x.tenants["acme"]
	ts.granted = true
	x.mu.Unlock()
	x.finish(ts, 11, 10, 20, ts.bells) // ... a grant of 10 ends ...
	if x.seed(tenancy.PairState{Tenant: "acme", NextSeq: 1, Weight: 1}, events.PriorityNormal, 30, 1, denseRun{}, asOf) {
		t.Error("a read from before the grant seeded the tenant")
	}
	if c := cursor(); c != 11 {
		t.Fatalf("cursor %d after a read from before the grant, want the grant's 11", c)
	}

	x.seed(tenancy.PairState{Tenant: "acme", NextSeq: 21, Weight: 1}, events.PriorityNormal, 10, 21, denseRun{}, x.asOf())
	if c := cursor(); c != 21 {
		t.Fatalf("cursor %d after a read from after the grant, want 21", c)
	}
}
