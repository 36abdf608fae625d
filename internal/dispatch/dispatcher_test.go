package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/dispatch/scheduler"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

const pg = tenancy.DestPostgres

// With every tenant backlogged and the dispatcher the bottleneck
// (Concurrency 1), the first five rounds split 25/15/10 batches' worth of
// events between weights 5/3/2: counted in events dispatched, not time.
func TestWeightedShares(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Minute)
	weights := map[string]int{"a": 5, "b": 3, "c": 2}
	for id, w := range weights {
		e.tenant(id, w, 100, pg)
		e.publish(id, 3000)
	}
	const batch, rounds = 50, 5
	// Grants in the order they committed: with Concurrency 1 they are cut
	// and committed one at a time, in the scheduler's order. (Their items
	// are published after each grant ends, so WORK's order may differ by
	// a grant here and there.) Each tenant's events are one run of
	// sequences, so a batch's range is its count of events.
	type committed struct {
		tenant string
		events int
	}
	var (
		mu     sync.Mutex
		grants []committed
	)
	e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: batch, Concurrency: 1}, func(d *dispatch.Dispatcher) {
		d.SetAfterCommit(func(ls []tenancy.Lease) {
			c := committed{tenant: ls[0].Tenant}
			for _, l := range ls {
				c.events += int(l.ToSeq - l.FromSeq + 1)
			}
			mu.Lock()
			grants = append(grants, c)
			mu.Unlock()
		})
	})
	// Five rounds are 2,500 events. Count events, not batches: a grant is
	// occasionally cut into one batch more than usual (the index held its
	// sequences as two runs), which shifts a batch count but not the
	// events each grant carries.
	total := rounds * batch * (5 + 3 + 2)
	var first []committed
	e.waitFor("five rounds of grants", func() bool {
		mu.Lock()
		defer mu.Unlock()
		first = slices.Clone(grants)
		n := 0
		for _, c := range first {
			n += c.events
		}
		return n >= total
	})
	got, n := map[string]int{}, 0
	for _, c := range first {
		if n >= total {
			break
		}
		got[c.tenant] += c.events
		n += c.events
	}
	if n != total {
		t.Fatalf("the first grants end at %d events, not at the end of round %d (%d events)", n, rounds, total)
	}
	for id, w := range weights {
		if want := w * rounds * batch; got[id] != want {
			t.Errorf("tenant %s (weight %d): %d events in the first %d rounds, want %d", id, w, got[id], rounds, want)
		}
	}
}

// Thirty tenants in three groups of weight 1, 2 and 4, their backlogs
// interleaved event by event in the stream before the dispatcher starts,
// slot limits too high to decide and the sink the bottleneck: while every
// tenant is still backlogged, the events applied split between the groups
// as their weights say (within 5% of each group's share), and each tenant
// gets its group's share (within 20% or two batches: a weight-1 tenant's
// share is a few batches). The start-up backfill delivers every tenant's
// events at the same pace; the weights must show in what the sink
// applies, not only in whole reads. The shares count from the start: a
// tenant whose events just arrived goes first once, whatever its weight,
// and pays for it in the rounds after (sparse-flow priority), so the
// window is long enough for that to even out. "live": the same with the
// backlogs published after the dispatcher started, by tenants it first
// sees then, whose weights it loads at once (first_sight.go), not at the
// next poll. The two run one after the other: each keeps a slow sink busy
// for a while.
func TestWeightedSharesInterleaved(t *testing.T) {
	t.Parallel()
	t.Run("queued", func(t *testing.T) { weightedInterleaved(t, false) })
	t.Run("live", func(t *testing.T) { weightedInterleaved(t, true) })
}

// weightedInterleaved is TestWeightedSharesInterleaved, with the backlogs
// published before the dispatcher starts or, live, after it started.
func weightedInterleaved(t *testing.T, live bool) {
	const (
		perGroup = 10
		backlog  = 1000 // events per tenant
		batch    = 10
	)
	e := setupWithin(t, time.Minute, 4*time.Minute)
	weights := map[string]int{}
	var tenants []string
	for _, w := range []int{1, 2, 4} {
		for i := range perGroup {
			id := fmt.Sprintf("w%d-%02d", w, i)
			weights[id] = w
			tenants = append(tenants, id)
			e.tenant(id, w, 10_000, pg)
		}
	}
	runs := make([]int, len(tenants))
	for i := range runs {
		runs[i] = 1
	}
	cfg := &dispatch.Config{Dests: []string{pg}, BatchSize: batch, PollInterval: time.Hour}
	var (
		seqs map[string][]uint64
		s    *sink
		d    *dispatch.Dispatcher
	)
	if live {
		// No sink until every backlog is rung: one item at most goes out
		// before it (WorkWithoutSink), and the shares are those of tenants
		// all backlogged.
		cfg.WorkWithoutSink = 1
		var rung atomic.Int64
		d = e.start(cfg, func(d *dispatch.Dispatcher) { d.SetOnBell(func(string, uint64) { rung.Add(1) }) })
		e.waitFor("the dispatcher running", d.Running)
		seqs = e.interleave(backlog, tenants, runs...)
		e.waitFor("every backlog rung", func() bool { return rung.Load() == int64(len(tenants)*backlog) })
		s = e.startSink(pg, 2, nil, func() time.Duration { return 2 * time.Millisecond })
	} else {
		seqs = e.interleave(backlog, tenants, runs...)
		s = e.startSink(pg, 2, nil, func() time.Duration { return 2 * time.Millisecond })
		d = e.start(cfg, nil)
	}

	// The weight-4 tenants run out first, when about backlog*70/4 events
	// are applied: compare the shares of the applied events until 80% of
	// that, when every tenant is still backlogged.
	total := 0
	for _, w := range weights {
		total += w
	}
	window := backlog * total / 4 * 8 / 10
	got, n := appliedShares(e, s, window)
	group := map[int]int{}
	for id, c := range got {
		group[weights[id]] += c
	}
	for _, w := range []int{1, 2, 4} {
		want := float64(n) * float64(w*perGroup) / float64(total)
		if dev := float64(group[w])/want - 1; dev > 0.05 || dev < -0.05 {
			t.Errorf("weight %d: %d of the first %d events applied, want %.0f (%+.1f%%)", w, group[w], n, want, 100*dev)
		}
	}
	for _, id := range tenants {
		want := float64(n) * float64(weights[id]) / float64(total)
		if off := math.Abs(float64(got[id]) - want); off > max(0.2*want, 2*batch) {
			dev := float64(got[id])/want - 1
			t.Errorf("tenant %s (weight %d): %d of the first %d events applied, want %.0f (%+.1f%%)", id, weights[id], got[id], n, want, 100*dev)
		}
	}
	t.Logf("first %d events applied: weight 1 %d, 2 %d, 4 %d", n, group[1], group[2], group[4])

	e.waitFor("every event applied", func() bool { return s.total() >= len(tenants)*backlog })
	checkExactlyOnce(t, s.snapshot(), seqs, false)
	if r := d.Recovered(pg); r != 0 {
		t.Errorf("%.0f orphans re-dispatched", r)
	}
}

// appliedShares waits until s has applied window events, and returns how
// many of those events each tenant had, and their total (window, or a
// little more: whole items).
func appliedShares(e *env, s *sink, window int) (got map[string]int, n int) {
	e.t.Helper()
	var applied []work.Item
	e.waitFor("the window's events applied", func() bool {
		applied = s.snapshot()
		n := 0
		for _, it := range applied {
			n += it.Count
		}
		return n >= window
	})
	got = map[string]int{}
	for _, it := range applied {
		if n >= window {
			break
		}
		got[it.Tenant] += it.Count
		n += it.Count
	}
	return got, n
}

// A tenant arriving with one event behind another's 200k backlog is
// dispatched before that tenant's next ⌈weight⌉ batches.
func TestLateArrival(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Minute)
	const weightA = 3
	e.tenant("a", weightA, 1000, pg)
	e.tenant("b", 1, 1, pg)
	e.publish("a", 200_000)

	var grantsA, committedA atomic.Int32
	paused, gate := make(chan struct{}), make(chan struct{})
	bellB := make(chan struct{}, 1)
	e.start(&dispatch.Config{Dests: []string{pg}, Concurrency: 1}, func(d *dispatch.Dispatcher) {
		d.SetBeforeDispatch(func(g scheduler.Grant) {
			if g.Key.Tenant == "a" && grantsA.Add(1) == 5 {
				close(paused)
				<-gate
			}
		})
		d.SetAfterCommit(func(ls []tenancy.Lease) {
			if ls[0].Tenant == "a" {
				committedA.Add(int32(len(ls)))
			}
		})
		d.SetOnBell(func(tenant string, _ uint64) {
			if tenant == "b" {
				select {
				case bellB <- struct{}{}:
				default:
				}
			}
		})
	})
	<-paused // the loop holds a grant of a's, mid-round
	// Grants end at their commit and publish after (pipelined grants):
	// the items of a's earlier grants may still be on their way. Count
	// from the last of them.
	e.waitFor("a's committed batches on WORK", func() bool {
		n := 0
		for _, it := range e.workItems(1, e.workLastSeq()) {
			if it.Tenant == "a" {
				n++
			}
		}
		return n >= int(committedA.Load())
	})
	before := e.workLastSeq()
	e.publish("b", 1)
	<-bellB // the dispatcher knows b has an event
	close(gate)

	var itemsA int
	e.waitFor("b's work item", func() bool {
		last := e.workLastSeq()
		if last <= before {
			return false
		}
		itemsA = 0
		for _, it := range e.workItems(before+1, last) {
			if it.Tenant == "b" {
				return true
			}
			itemsA++
		}
		return false
	})
	if itemsA > weightA {
		t.Fatalf("a got %d batches after b arrived and before b's one event; want at most ⌈weight⌉ = %d", itemsA, weightA)
	}
	t.Logf("a dispatched %d batches between b's arrival and b's dispatch (bound %d)", itemsA, weightA)
}

// A tenant first seen waits for its first-sight load out of the rounds
// (holdForSight), and a grant that comes before the load gives its place
// back (waitForSight): with one place, a known tenant's event is
// dispatched while the new tenant's load is held up, and the new
// tenant's once the load is in.
func TestWaitForSightFreesThePlace(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Minute)
	e.tenant("fresh", 1, 10, pg)
	e.tenant("known", 1, 10, pg)
	e.publish("known", 1) // counted by the start-up scan: no first-sight load

	loading, load := make(chan struct{}), make(chan struct{})
	granted := make(chan struct{})
	var loadOnce, grantOnce sync.Once
	e.start(&dispatch.Config{Dests: []string{pg}, Concurrency: 1}, func(d *dispatch.Dispatcher) {
		d.SetSight(func(_ string, tenants []string) {
			if slices.Contains(tenants, "fresh") {
				loadOnce.Do(func() { close(loading) })
				<-load
			}
		})
		d.SetBeforeDispatch(func(g scheduler.Grant) {
			if g.Key.Tenant == "fresh" {
				grantOnce.Do(func() { close(granted) })
			}
		})
	})
	release := sync.OnceFunc(func() { close(load) })
	defer release()
	dispatched := func(tenant string, n int) func() bool {
		return func() bool {
			c := 0
			for _, it := range e.workItems(1, e.workLastSeq()) {
				if it.Tenant == tenant {
					c += it.Count
				}
			}
			return c >= n
		}
	}
	e.waitFor("known's first event dispatched", dispatched("known", 1))
	e.publish("fresh", 1)
	<-loading // fresh's load is held up
	<-granted // and its grant has begun
	e.publish("known", 1)
	testenv.Eventually(t, 10*time.Second, "known's second event dispatched while fresh's load is held up", func() error {
		if !dispatched("known", 2)() {
			return errors.New("not on WORK")
		}
		return nil
	})
	release()
	e.waitFor("fresh's event dispatched once its load is in", dispatched("fresh", 1))
}

// A lone tenant with limit 4 gets exactly 4 slots busy, never a 5th, and a
// release refills at once (work conserving, Limit).
func TestWorkConserving(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Minute)
	e.tenant("solo", 1, 4, pg)
	seqs := e.publish("solo", 80)
	e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: 10}, nil)

	inUse := func() int {
		n, err := e.st.InUse(e.ctx, "solo", pg)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	e.waitFor("4 work items", func() bool { return e.workLastSeq() >= 4 })
	if n := inUse(); n != 4 {
		t.Fatalf("in use %d, want 4", n)
	}
	// Releasing one slot refills it: one more item, never more than 4 held.
	// (A 5th item before a release would make the sequence below fail.)
	for want := uint64(5); want <= 8; want++ {
		items := e.workItems(want-4, want-4)
		if err := e.st.Release(e.ctx, items[0].LeaseID, items[0].Token); err != nil {
			t.Fatal(err)
		}
		e.waitFor("a refill", func() bool { return e.workLastSeq() >= want })
		if last := e.workLastSeq(); last != want {
			t.Fatalf("%d work items after %d releases, want %d", last, want-4, want)
		}
		if n := inUse(); n != 4 {
			t.Fatalf("in use %d after a refill, want 4", n)
		}
	}
	checkExactlyOnce(t, e.workItems(1, 8), map[string][]uint64{"solo": seqs}, false)
}

// A lone tenant's grant dispatches several batches at once — one read, one
// DispatchMany, one item per batch — as many as it has free slots, up to
// GrantBatches; GrantBatches 1 goes batch by batch.
func TestGrantBatches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		grantBatches, limit, want int
	}{
		{grantBatches: 4, limit: 8, want: 4}, // credit of 4 lone rounds
		{grantBatches: 4, limit: 3, want: 3}, // slots run out first
		{grantBatches: 1, limit: 8, want: 1},
	} {
		t.Run(fmt.Sprintf("grant %d limit %d", tc.grantBatches, tc.limit), func(t *testing.T) {
			t.Parallel()
			e := setup(t, time.Minute)
			e.tenant("solo", 1, tc.limit, pg)
			seqs := e.publish("solo", 200)
			first := make(chan int, 1)
			e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: 10, GrantBatches: tc.grantBatches}, func(d *dispatch.Dispatcher) {
				d.SetAfterCommit(func(ls []tenancy.Lease) {
					select {
					case first <- len(ls):
					default:
					}
				})
			})
			if got := <-first; got != tc.want {
				t.Fatalf("first grant dispatched %d batches, want %d", got, tc.want)
			}
			e.waitFor("items for every free slot", func() bool { return e.workLastSeq() >= uint64(min(tc.limit, 20)) })
			items := e.workItems(1, e.workLastSeq())
			if len(items) > tc.limit {
				t.Fatalf("%d items dispatched with limit %d and no release", len(items), tc.limit)
			}
			want := seqs[:len(items)*10]
			checkExactlyOnce(t, items, map[string][]uint64{"solo": want}, false)
		})
	}
}

// Several tenants with different limits, fake sinks holding work a while:
// an observer never sees more live leases than a tenant's limit, sinks never
// hold more items of one tenant at once than its limit, and every sequence
// is dispatched exactly once.
func TestSlotLimitEndToEnd(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Minute)
	limits := map[string]int{"t1": 1, "t2": 2, "t3": 3, "t4": 2}
	seqs := map[string][]uint64{}
	sinkLimits := map[string]int{}
	for id, lim := range limits {
		e.tenant(id, 1, lim, pg)
		sinkLimits[id+"/"+pg] = lim
	}
	for id := range limits {
		seqs[id] = e.publish(id, 1500)
	}
	var holdN atomic.Int64
	s := e.startSink(pg, 8, sinkLimits, func() time.Duration {
		return time.Duration(holdN.Add(1)%4) * time.Millisecond
	})
	e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: 25}, nil)

	var samples, violations int
	e.waitFor("all events dispatched and applied", func() bool {
		rows, err := e.pool.Query(e.ctx, `SELECT s.tenant, count(*) FILTER (WHERE s.expires_at >= now()), l.max_slots
			FROM fairway.slots s JOIN fairway.limits l USING (tenant, dest) GROUP BY s.tenant, l.max_slots`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var tenant string
			var live, max int
			if err := rows.Scan(&tenant, &live, &max); err != nil {
				t.Fatal(err)
			}
			samples++
			if live > max {
				violations++
				t.Errorf("%s: %d live leases, limit %d", tenant, live, max)
			}
		}
		rows.Close()
		for id := range limits {
			if s.events(id) < 1500 {
				return false
			}
		}
		return true
	})
	s.mu.Lock()
	for _, msg := range s.errs {
		t.Error(msg)
	}
	peaks := s.peak
	s.mu.Unlock()
	checkExactlyOnce(t, s.snapshot(), seqs, false)
	t.Logf("%d observer samples, %d violations; sink peaks %v", samples, violations, peaks)
}

// Batches are cut from what the doorbell and the backfill delivered,
// without reading PRODUCTS, and cover every sequence exactly once: a
// backlog of interleaved tenants stored before the dispatcher started (the
// backfill), events stored while it runs (the doorbell), and — with the
// backfill off — the old backlog read from the stream. A cursor moved back
// (replay) is read again, never cut from what the index forgot.
func TestIndexedDispatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		backfill int64
	}{{"backfill", 0}, {"no backfill", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, time.Minute)
			sizes := map[string]int{"a": 7, "b": 3, "c": 1}
			seqs := map[string][]uint64{}
			for id := range sizes {
				e.tenant(id, 1, 2, pg)
			}
			publish := func(rounds int) {
				for range rounds {
					for _, id := range []string{"a", "b", "c"} {
						seqs[id] = append(seqs[id], e.publish(id, sizes[id])...)
					}
				}
			}
			publish(40) // interleaved backlog: runs of 7, 3 and 1
			total := func() (n int) {
				for _, s := range seqs {
					n += len(s)
				}
				return n
			}
			s := e.startSink(pg, 4, nil, func() time.Duration { return 0 })
			d := e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: 20, Backfill: tc.backfill, PollInterval: 100 * time.Millisecond}, nil)
			applied := func() (n int) {
				for id := range sizes {
					n += s.events(id)
				}
				return n
			}
			e.waitFor("the backlog applied", func() bool { return applied() >= total() })
			publish(40) // live
			e.waitFor("the live events applied", func() bool { return applied() >= total() })
			checkExactlyOnce(t, s.snapshot(), seqs, false)

			// A replay moves a's cursor back behind what the index still
			// knows: those ranges must come from reads, each item counting
			// exactly the events its range holds.
			if err := e.st.SetCursor(e.ctx, "a", pg, seqs["a"][0]); err != nil {
				t.Fatal(err)
			}
			e.waitFor("a's events applied again", func() bool { return s.events("a") >= 2*len(seqs["a"]) })
			for _, it := range s.snapshot() {
				n := 0
				for _, q := range seqs[it.Tenant] {
					if q >= it.FromSeq && q <= it.ToSeq {
						n++
					}
				}
				if n != it.Count {
					t.Errorf("item %s/%d-%d counts %d events, its range holds %d", it.Tenant, it.FromSeq, it.ToSeq, it.Count, n)
				}
			}
			// Every item, cut from the index or from a read, carries its
			// events' store times, to the millisecond, never later; an item
			// cut from the index carries its events' bodies, with their ops,
			// exactly as PRODUCTS stores them.
			rd := work.NewReader(e.nc, "")
			carried := 0
			for _, it := range s.snapshot() {
				stored, err := rd.ReadItemHeaders(e.ctx, it)
				if err != nil {
					t.Fatal(err)
				}
				if it.Bodies != nil {
					carried++
					checkCarried(t, it, stored)
					continue
				}
				if it.Times == nil {
					t.Fatalf("item %s/%d-%d has no store times", it.Tenant, it.FromSeq, it.ToSeq)
				}
				for i, m := range stored {
					if at := it.Times.At(i); !at.Equal(time.UnixMilli(m.Time.UnixMilli())) {
						t.Fatalf("item %s/%d-%d event %d: time %v, stored %v", it.Tenant, it.FromSeq, it.ToSeq, i, at, m.Time)
					}
				}
			}
			if carried == 0 {
				t.Error("no item carried its events' bodies")
			}
			indexed, read := d.Grants(pg, "index"), d.Grants(pg, "read")
			t.Logf("grants from the index %.0f, from reads %.0f", indexed, read)
			if indexed == 0 {
				t.Fatalf("no grant was cut from the index (%.0f reads)", read)
			}
		})
	}
}

// Tenants whose first events come after the dispatcher started are cut
// from the index from their first event, though their cursors (1) lie
// before the doorbell's start: the start-up scan saw none of their events,
// so the doorbell rang all of them. A tenant whose events were rung before
// it had a destination is not: those come from a read of PRODUCTS, and
// every event is still dispatched exactly once.
func TestNewTenantsCutFromTheIndex(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Minute)
	e.tenant("old", 1, 4, pg)
	seqs := map[string][]uint64{"old": e.publish("old", 30)}
	s := e.startSink(pg, 4, nil, func() time.Duration { return 0 })
	// No poll: a poll's count may run ahead of the doorbell and bring a
	// grant the index cannot cut yet, which reads.
	d := e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: 10, PollInterval: time.Hour}, nil)
	applied := func(ids ...string) (n, want int) {
		for _, id := range ids {
			n += s.events(id)
			want += len(seqs[id])
		}
		return n, want
	}
	e.waitFor("old's backlog applied", func() bool { n, want := applied("old"); return n >= want })
	reads := d.Grants(pg, "read")

	fresh := []string{"n1", "n2", "n3"}
	for _, id := range fresh {
		e.tenant(id, 1, 4, pg)
	}
	for id, q := range e.interleave(20, fresh, 3, 2, 1) {
		seqs[id] = append(seqs[id], q...)
	}
	e.waitFor("the new tenants' events applied", func() bool { n, want := applied(fresh...); return n >= want })
	if got := d.Grants(pg, "read"); got != reads {
		t.Errorf("%.0f grants read PRODUCTS for tenants the doorbell rang from their first event; want 0", got-reads)
	}

	// "late" publishes before it has a destination: the doorbell rings
	// its events, no destination indexes them.
	seqs["late"] = e.publish("late", 12)
	e.tenant("late", 1, 4, pg)
	seqs["late"] = append(seqs["late"], e.publish("late", 5)...)
	e.waitFor("late's events applied", func() bool { n, want := applied("late"); return n >= want })
	checkExactlyOnce(t, s.snapshot(), seqs, false)
}

// Tenants whose backlogs interleave event by event (catalogs imported at
// once): each batch's range holds the others' events, so its item lists
// its sequences and the sink reads them without headers: two tenants'
// batches span twice their count, and the sink reads the range, keeping
// the listed events (up to work.SeqsMax); twenty tenants' small batches
// (work.SeqsSmall) span twenty times their count, and the sink looks each
// listed sequence up, as it does for two hundred tenants' larger batches,
// which span two hundred times their count (work.LookupRead). None makes
// the server scan the range with a subject filter.
func TestInterleavedBatchesListed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		tenants      int
		each, batch  int
		rangeReadMin int // items the sink reads as their whole range
	}{
		{"two tenants", 2, 1200, 200, 12},
		{"twenty tenants", 20, 150, work.SeqsSmall, 0},
		{"two hundred tenants", 200, 100, 100, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, time.Minute)
			var tenants []string
			runs := make([]int, tc.tenants)
			for i := range tc.tenants {
				tenants = append(tenants, fmt.Sprintf("t%02d", i))
				e.tenant(tenants[i], 1, 4, pg)
				runs[i] = 1
			}
			seqs := e.interleave(tc.each, tenants, runs...)
			s := e.startSink(pg, 4, nil, func() time.Duration { return 0 })
			// Without bodies held (BodyBudget), as for a backlog past the budget.
			e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: tc.batch, PollInterval: time.Hour, BodyBudget: -1}, nil)
			e.waitFor("every backlog applied", func() bool {
				for _, id := range tenants {
					if s.events(id) != tc.each {
						return false
					}
				}
				return true
			})
			items := s.snapshot()
			checkExactlyOnce(t, items, seqs, false)
			rd := work.NewReader(e.nc, "")
			full, rangeRead := 0, 0
			for _, it := range items {
				if it.Count == 1 {
					continue
				}
				if len(it.Seqs) != it.Count {
					t.Fatalf("item %s/%d-%d of %d events lists %d sequences", it.Tenant, it.FromSeq, it.ToSeq, it.Count, len(it.Seqs))
				}
				if it.Count == tc.batch {
					full++
				}
				if work.RangeRead(it.Count, it.ToSeq-it.FromSeq+1) {
					rangeRead++
				}
				got, err := rd.ReadItem(e.ctx, it)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != it.Count {
					t.Fatalf("item %s/%d-%d: %d events read, count %d", it.Tenant, it.FromSeq, it.ToSeq, len(got), it.Count)
				}
				for i, m := range got {
					ev, err := events.Decode(m.Data)
					if err != nil || !m.Bare || m.Seq != it.Seqs[i] || ev.Tenant != it.Tenant {
						t.Fatalf("item %s/%d-%d event %d: seq %d (listed %d), tenant %s, bare %v, %v", it.Tenant, it.FromSeq, it.ToSeq, i, m.Seq, it.Seqs[i], ev.Tenant, m.Bare, err)
					}
				}
			}
			if want := tc.tenants * tc.each / tc.batch / 2; full < want {
				t.Errorf("%d full items of %d events, want at least %d", full, tc.batch, want)
			}
			if rangeRead < tc.rangeReadMin {
				t.Errorf("%d items read as their range, want at least %d", rangeRead, tc.rangeReadMin)
			}
		})
	}
}

// A batch whose work item could not be published (here: a publish timeout
// too short to succeed, the same path a shutdown whose grace ran out takes)
// is handed back at once, and a new dispatcher re-dispatches it without
// waiting for the lease (1 hour) to expire.
func TestUnpublishedBatchIsHandedBack(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Hour) // recovery must not wait for expiry
	e.tenant("acme", 1, 2, pg)
	seqs := e.publish("acme", 20)

	ctx, cancel := context.WithCancel(e.ctx)
	d, err := dispatch.New(dispatch.Deps{Store: e.st, NATS: e.nc},
		&dispatch.Config{Dests: []string{pg}, BatchSize: 10, PublishTimeout: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	var once atomic.Bool
	d.SetAfterCommit(func([]tenancy.Lease) {
		if once.CompareAndSwap(false, true) {
			cancel() // shut down: this batch is the last one in flight
		}
	})
	if err := d.Run(ctx); err != nil {
		t.Fatal(err)
	}
	orphans, err := e.st.Orphans(e.ctx, pg, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(orphans) == 0 {
		t.Fatal("the unpublished batch was not handed back")
	}
	if n, _ := e.st.InUse(e.ctx, "acme", pg); n != 0 {
		t.Fatalf("%d slots still held after the hand-back", n)
	}
	s := e.startSink(pg, 2, nil, func() time.Duration { return 0 })
	e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: 10, RecoverInterval: time.Hour}, nil)
	e.waitFor("all 20 events", func() bool { return s.events("acme") >= 20 })
	checkExactlyOnce(t, s.snapshot(), map[string][]uint64{"acme": seqs}, false)
}

// The backfill starts at the oldest event waiting to be dispatched, not at
// the oldest cursor: a tenant without a cursor yet (1) whose events are
// recent must not make the backfill deliver the whole stream before them.
func TestBackfillStartsAtFirstPendingEvent(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Minute)
	e.tenant("old", 1, 2, pg)
	e.tenant("new", 1, 2, pg)
	olds := e.publish("old", 50)
	if err := e.st.SetCursor(e.ctx, "old", pg, olds[len(olds)-1]+1); err != nil { // applied already
		t.Fatal(err)
	}
	news := e.publish("new", 3)
	s := e.startSink(pg, 2, nil, func() time.Duration { return 0 })
	d := e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: 20, PollInterval: 100 * time.Millisecond}, nil)
	e.waitFor("new's events applied", func() bool { return s.events("new") >= len(news) })
	if n := d.Wakeups("backfill"); n != float64(len(news)) {
		t.Errorf("the backfill delivered %v events, want %d (new's: old's were dispatched before)", n, len(news))
	}
	checkExactlyOnce(t, s.snapshot(), map[string][]uint64{"new": news}, false)
}

// A tenant at its slot limit whose events are not indexed (no backfill
// here, and another tenant's events among them, so not one dense run) is
// cut from reads of PRODUCTS. After the first grant finds the
// limit, each release frees one slot, and the next grant reads one batch,
// not a whole grant's worth (GrantBatches batches) of which it could
// dispatch one: the events read stay near the events dispatched.
func TestReadAtLimitReadsFreedSlots(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Minute)
	const (
		batch = 20
		n     = 400
	)
	e.tenant("acme", 1, 1, pg)
	e.tenant("other", 1, 1, pg)
	seqs := e.interleave(n/100, []string{"acme", "other"}, 100, 1)["acme"]
	s := e.startSink(pg, 1, nil, func() time.Duration { return 5 * time.Millisecond })
	d := e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: batch, GrantBatches: 4, Backfill: -1, PollInterval: time.Hour}, nil)
	e.waitFor("the backlog applied", func() bool { return s.events("acme") >= n })
	checkExactlyOnce(t, filterTenant(s.snapshot(), "acme"), map[string][]uint64{"acme": seqs}, false)
	read, reads := d.ReadEvents(pg), d.Grants(pg, "read")
	t.Logf("%d events dispatched in %d items; %.0f grants read %.0f events", n, len(s.snapshot()), reads, read)
	if reads < n/batch {
		t.Fatalf("%.0f grants read PRODUCTS, want every one of the %d batches cut from a read", reads, n/batch)
	}
	// The first grant reads 4 batches and dispatches one; then one batch
	// per release (a few more when a release and a read cross). Reading a
	// whole grant's worth each time would read about 4n.
	if limit := 1.5 * n; read > limit {
		t.Fatalf("the dispatcher read %.0f events to dispatch %d at a slot limit of 1, want at most %.0f", read, n, limit)
	}
}

// A tenant's backlog that is one run of its own events (a flood queued
// while the others were quiet) is cut by arithmetic: no grant reads it and
// the backfill does not deliver it. A backlog with another tenant's events
// among it is not taken for one (its items would then claim the other's
// sequences, which checkExactlyOnce catches).
func TestDenseBacklogIsCutByArithmetic(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// quietFirst: another tenant's events come before the flood, so
		// the flood's cursor (1) is below its first event; with the
		// backfill on they would make it deliver the flood too.
		quietFirst bool
		backfill   int64
	}{{"backfill", false, 0}, {"below the cursor", true, -1}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const n, batch = 1000, 100
			e := setup(t, time.Minute)
			e.tenant("flood", 1, 8, pg)
			e.tenant("quiet", 1, 1, pg)
			e.tenant("mixed", 1, 8, pg)
			seqs := map[string][]uint64{}
			add := func(tenant string, k int) { seqs[tenant] = append(seqs[tenant], e.publish(tenant, k)...) }
			if tc.quietFirst {
				add("quiet", 2)
			}
			add("flood", n)
			add("quiet", 2)
			for range 5 {
				add("mixed", batch)
				add("quiet", 1)
			}
			others := len(seqs["quiet"]) + len(seqs["mixed"])
			s := e.startSink(pg, 8, nil, func() time.Duration { return 0 })
			var (
				mu     sync.Mutex
				grants [][]tenancy.Lease // the flood's, as committed
			)
			d := e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: batch, Backfill: tc.backfill, PollInterval: time.Hour}, func(d *dispatch.Dispatcher) {
				d.SetAfterCommit(func(ls []tenancy.Lease) {
					if ls[0].Tenant == "flood" {
						mu.Lock()
						grants = append(grants, ls)
						mu.Unlock()
					}
				})
			})
			e.waitFor("every backlog applied", func() bool {
				return s.events("flood") >= n && s.events("mixed") >= len(seqs["mixed"]) && s.events("quiet") >= len(seqs["quiet"])
			})
			checkExactlyOnce(t, s.snapshot(), seqs, false)
			dense, read, back := d.Grants(pg, "dense"), d.ReadEvents(pg), d.Wakeups("backfill")
			t.Logf("dense grants %.0f, events read %.0f, backfill delivered %.0f", dense, read, back)
			if most := float64(n / (dispatch.GrantBatchesDefault * batch)); dense < most {
				t.Errorf("%.0f grants cut by arithmetic, want at least %.0f (the flood's)", dense, most)
			}
			if tc.backfill == 0 {
				// The backfill starts after the flood: it delivers the
				// others' events only. (Grants of theirs that come before it
				// has a grant's worth read them.)
				if back != float64(others) {
					t.Errorf("the backfill delivered %.0f events, want the others' %d", back, others)
				}
			} else if read >= n {
				t.Errorf("grants read %.0f events, the flood (%d) among them", read, n)
			}

			// The flood's items carry their events' store times, learned
			// with a few requests (work.Reader.RangeTimes), so that sinks
			// read them without headers: every item whose grant spans few
			// enough milliseconds to be worth the requests (on a slow
			// machine not all are), and every time is the stored one.
			rd := work.NewReader(e.nc, "")
			timed := map[uint64]bool{}
			for _, it := range filterTenant(s.snapshot(), "flood") {
				if it.Times == nil {
					continue
				}
				timed[it.FromSeq] = true
				stored, err := rd.ReadItemHeaders(e.ctx, it)
				if err != nil {
					t.Fatal(err)
				}
				for i, m := range stored {
					if at := it.Times.At(i); !at.Equal(time.UnixMilli(m.Time.UnixMilli())) {
						t.Fatalf("item %d..%d event %d: time %v, stored %v", it.FromSeq, it.ToSeq, i, at, m.Time)
					}
				}
			}
			storedAt := func(seq uint64) int64 {
				b, err := rd.Next(e.ctx, "flood", seq, seq, work.ReadOptions{Max: 1, NoData: true})
				if err != nil || len(b.Msgs) != 1 {
					t.Fatalf("read %d: %v", seq, err)
				}
				return b.Msgs[0].Time.UnixMilli()
			}
			mu.Lock()
			defer mu.Unlock()
			worth := 0
			for _, ls := range grants {
				from, to := ls[0].FromSeq, ls[len(ls)-1].ToSeq
				if storedAt(to)-storedAt(from) > int64(work.RangeTimesSpan(int(to-from+1))) {
					continue
				}
				worth++
				for _, l := range ls {
					if !timed[l.FromSeq] {
						t.Errorf("item %d..%d of grant %d..%d carries no store times", l.FromSeq, l.ToSeq, from, to)
					}
				}
			}
			t.Logf("%d of the flood's %d grants spanned few enough milliseconds for times; %d items carry them", worth, len(grants), len(timed))
		})
	}
}

// Each destination cuts work items of its own batch size: ClickHouse
// (DestBatchSize) items up to 1,000 events, PostgreSQL's up to BatchSize,
// from a dense backlog (cut by arithmetic) and from interleaved ones (cut
// from the index), every event exactly once in each.
func TestDestBatchSize(t *testing.T) {
	t.Parallel()
	const ch, batch, chBatch = tenancy.DestClickHouse, 100, 1000
	e := setup(t, time.Minute)
	seqs := map[string][]uint64{}
	for _, id := range []string{"dense", "b", "c"} {
		e.tenant(id, 1, 4, pg, ch)
	}
	seqs["dense"] = e.publish("dense", 3*chBatch)
	maps.Copy(seqs, e.interleave(20, []string{"b", "c"}, 50, 50))
	sinks := map[string]*sink{}
	for _, dest := range []string{pg, ch} {
		sinks[dest] = e.startSink(dest, 4, nil, func() time.Duration { return 0 })
	}
	e.start(&dispatch.Config{Dests: []string{pg, ch}, BatchSize: batch, DestBatchSize: map[string]int{ch: chBatch}, PollInterval: time.Hour}, nil)
	for dest, size := range map[string]int{pg: batch, ch: chBatch} {
		s := sinks[dest]
		e.waitFor(dest+": every backlog applied", func() bool {
			return s.events("dense") >= len(seqs["dense"]) && s.events("b") >= len(seqs["b"]) && s.events("c") >= len(seqs["c"])
		})
		items := s.snapshot()
		checkExactlyOnce(t, items, seqs, false)
		largest := map[string]int{}
		last := map[string]work.Item{} // each tenant's
		caughtUp := map[string]int{}   // its items marked CaughtUp
		for _, it := range items {
			largest[it.Tenant] = max(largest[it.Tenant], it.Count)
			if it.ToSeq > last[it.Tenant].ToSeq {
				last[it.Tenant] = it
			}
			if it.CaughtUp {
				caughtUp[it.Tenant]++
			}
		}
		// CaughtUp says the tenant had nothing more waiting when the item
		// was cut (sink.CaughtUp): every backlog was published before the
		// dispatcher started, so only a tenant's last item may say so —
		// the dense backlog's does; an interleaved one's may not, when it
		// was cut before the backfill knew it was done (caughtUp).
		for tenant := range seqs {
			switch {
			case caughtUp[tenant] > 1 || caughtUp[tenant] == 1 && !last[tenant].CaughtUp:
				t.Errorf("%s: %d of %s's items say CaughtUp (its last: %v); only its last may", dest, caughtUp[tenant], tenant, last[tenant].CaughtUp)
			case tenant == "dense" && !last[tenant].CaughtUp:
				t.Errorf("%s: the dense backlog's last item does not say CaughtUp", dest)
			}
		}
		if largest["dense"] != size {
			t.Errorf("%s: the dense backlog's largest item holds %d events, want %d", dest, largest["dense"], size)
		}
		if most := max(largest["b"], largest["c"]); most > size || dest == ch && most <= batch {
			t.Errorf("%s: the interleaved backlogs' largest item holds %d events, want at most %d (and more than %d in %s)", dest, most, size, batch, ch)
		}
	}
}

// DestBatchSize keeps ClickHouse's default next to what it names, and
// refuses sizes out of range and destinations that do not exist.
func TestDestBatchSizeConfig(t *testing.T) {
	t.Parallel()
	c := (&dispatch.Config{DestBatchSize: map[string]int{pg: 50}}).WithDefaults()
	if want := map[string]int{pg: 50, tenancy.DestClickHouse: dispatch.ClickHouseBatchDefault}; !maps.Equal(c.DestBatchSize, want) {
		t.Errorf("DestBatchSize with defaults %v, want %v", c.DestBatchSize, want)
	}
	e := setup(t, time.Minute)
	for _, bad := range []map[string]int{{pg: 0}, {pg: dispatch.BatchSizeMax + 1}, {"mysql": 10}} {
		if _, err := dispatch.New(dispatch.Deps{Store: e.st, NATS: e.nc}, &dispatch.Config{DestBatchSize: bad}); !errors.Is(err, dispatch.ErrInvalidConfig) {
			t.Errorf("DestBatchSize %v: New = %v, want ErrInvalidConfig", bad, err)
		}
	}
}

// The batch log keeps BatchLogRetention: a dispatcher deletes older rows
// at start (and about once a minute), and keeps the recent ones, its own
// included; with a negative retention it deletes none.
func TestBatchLogPruned(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		retention time.Duration
		deleted   int
	}{{"retention", time.Hour, 6}, {"kept forever", -1, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, time.Minute)
			e.tenant("acme", 1, 16, pg)
			for i := range uint64(10) {
				if _, err := e.st.DispatchMany(e.ctx, "acme", pg, "old", 1+i*10, []tenancy.Range{{From: 1 + i*10, To: 10 + i*10}}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := e.pool.Exec(e.ctx, `UPDATE fairway.batches SET created_at = created_at - interval '2 hours'
				WHERE id IN (SELECT id FROM fairway.batches ORDER BY id LIMIT 6)`); err != nil {
				t.Fatal(err)
			}
			d := e.start(&dispatch.Config{Dests: []string{pg}, BatchLogRetention: tc.retention, RecoverInterval: 50 * time.Millisecond}, nil)
			rows := func() (n int) {
				if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM fairway.batches`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			// The first recovery pass, at start, prunes (the "old"
			// holder's leases are not due yet: the lease TTL is a minute).
			if tc.deleted > 0 {
				e.waitFor("the old rows pruned", func() bool { return d.Pruned() == float64(tc.deleted) })
			} else {
				time.Sleep(300 * time.Millisecond)
			}
			if n := rows(); n != 10-tc.deleted || d.Pruned() != float64(tc.deleted) {
				t.Fatalf("%d rows left, %.0f pruned; want %d left", n, d.Pruned(), 10-tc.deleted)
			}
		})
	}
}

// A dispatcher stopped while it is still starting (listening, scanning,
// opening its doorbell) returns nil like any other stop: the step the
// stop interrupted is not a failure to report.
func TestStopWhileStartingIsClean(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Minute)
	e.tenant("acme", 1, 16, pg)
	e.publish("acme", 20)
	for i, after := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond} {
		d, err := dispatch.New(dispatch.Deps{Store: e.st, NATS: e.nc}, &dispatch.Config{Dests: []string{pg}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(e.ctx)
		if after == 0 {
			cancel()
		} else {
			time.AfterFunc(after, cancel)
		}
		if err := d.Run(ctx); err != nil {
			t.Errorf("stop %d (after %v): Run = %v, want nil", i, after, err)
		}
		cancel()
	}
}

// A release of a tenant's one slot that comes while a grant of the tenant
// finds the slot still taken has had its wake-up by the time that grant
// ends: the tenant keeps its place among the new flows and is granted
// again at once, not after a round of every flood's quantum (its turn
// ended as if its events were gone).
func TestReleaseDuringGrantAtLimit(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Minute)
	const floods = 20
	for i := range floods {
		f := fmt.Sprintf("f%02d", i)
		e.tenant(f, 1, 1000, pg)
		e.publish(f, 1000)
	}
	e.tenant("small", 1, 1, pg)
	e.publish("small", 1)
	smallItems := func(from uint64) []work.Item {
		var out []work.Item
		for _, it := range e.workItems(from, e.workLastSeq()) {
			if it.Tenant == "small" {
				out = append(out, it)
			}
		}
		return out
	}
	var (
		once     sync.Once
		released = make(chan uint64, 1) // WORK's last sequence once the release was handled
		hookErr  = make(chan error, 1)
	)
	e.start(&dispatch.Config{Dests: []string{pg}, Concurrency: 1, GrantBatches: 1, BatchSize: 100, DeepWork: true}, func(d *dispatch.Dispatcher) {
		d.SetAtLimit(func(k scheduler.Key) {
			if k.Tenant != "small" {
				return
			}
			once.Do(func() {
				first := smallItems(1)[0]
				gen := d.Releases(pg, "small")
				if err := e.st.Release(e.ctx, first.LeaseID, first.Token); err != nil {
					hookErr <- err
					return
				}
				for deadline := time.Now().Add(30 * time.Second); d.Releases(pg, "small") == gen; time.Sleep(time.Millisecond) {
					if time.Now().After(deadline) {
						hookErr <- errors.New("the release's wake-up never came")
						return
					}
				}
				released <- e.workLastSeq()
			})
		})
	})
	e.waitFor("small's first item", func() bool { return len(smallItems(1)) == 1 })
	e.publish("small", 1) // its grant finds the slot of the first item taken
	var after uint64
	select {
	case after = <-released:
	case err := <-hookErr:
		t.Fatal(err)
	case <-e.ctx.Done():
		t.Fatal("no grant of small found its slot limit")
	}
	e.waitFor("small's second item", func() bool { return len(smallItems(after+1)) == 1 })
	floodItems := 0
	for _, it := range e.workItems(after+1, e.workLastSeq()) {
		if it.Tenant == "small" {
			break
		}
		floodItems++
	}
	if floodItems > 1 {
		t.Fatalf("%d floods' items went out between the release and small's next item, want at most the one in flight", floodItems)
	}
}
