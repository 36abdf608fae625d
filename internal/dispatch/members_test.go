package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Rendezvous hashing: every pair has exactly one owner, shares are even,
// and a member that leaves moves only its own pairs.
func TestOwnerSplitsPairs(t *testing.T) {
	t.Parallel()
	members := []string{"host-a-1", "host-b-2", "host-c-3"}
	count := map[string]int{}
	const pairs = 3000
	for i := range pairs {
		count[dispatch.Owner(members, fmt.Sprintf("t%05d", i), "postgres")]++
	}
	for _, m := range members {
		if n := count[m]; n < pairs/3*8/10 || n > pairs/3*12/10 {
			t.Errorf("%s owns %d of %d pairs, want about a third: %v", m, n, pairs, count)
		}
	}
	for i := range pairs {
		tenant := fmt.Sprintf("t%05d", i)
		before := dispatch.Owner(members, tenant, "postgres")
		after := dispatch.Owner([]string{"host-a-1", "host-c-3"}, tenant, "postgres")
		if before != "host-b-2" && after != before {
			t.Fatalf("%s moved from %s to %s though %s stayed", tenant, before, after, before)
		}
	}
	if got := dispatch.Owner([]string{"solo"}, "t", "postgres"); got != "solo" {
		t.Fatalf("a lone member does not own every pair: %q", got)
	}
}

// Dispatchers split the tenants: once each has seen the others (joins are
// notified, so within a round trip), every tenant's batches come from one
// of them and they hardly race; when one stops (its leave is notified),
// the others dispatch all tenants. Every sequence is dispatched exactly
// once throughout. In a partitioned stream they split the partitions:
// each one's doorbell rings only its own partitions' events, every event
// once across them; in a stream without partitions, the pairs.
func TestDispatchersSplitTenants(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		partitioned bool
		dispatchers []string
	}{
		{"partitions", true, []string{"disp-a", "disp-b", "disp-c"}},
		{"pairs", false, []string{"disp-a", "disp-b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			splitTenants(t, tc.partitioned, tc.dispatchers)
		})
	}
}

func splitTenants(t *testing.T, partitioned bool, holders []string) {
	e := setup(t, time.Minute)
	layout := events.LayoutDefault
	if !partitioned {
		layout = events.Layout{}
		e.unpartitioned()
	}
	var tenants []string
	for i := range 24 {
		id := fmt.Sprintf("t%02d", i)
		tenants = append(tenants, id)
		e.tenant(id, 1, 4, pg)
	}
	s := e.startSink(pg, 4, nil, func() time.Duration { return 0 })
	var settled atomic.Bool
	rung := map[string]*sync.Map{} // holder -> tenant -> *atomic.Int64, once settled
	start := func(holder string) (*dispatch.Dispatcher, func()) {
		rung[holder] = &sync.Map{}
		d, stop := e.startStoppable(&dispatch.Config{Dests: []string{pg}, Holder: holder, Heartbeat: time.Second, PollInterval: time.Second},
			func(d *dispatch.Dispatcher) {
				d.SetOnBell(func(tenant string, _ uint64) {
					if settled.Load() {
						n, _ := rung[holder].LoadOrStore(tenant, new(atomic.Int64))
						n.(*atomic.Int64).Add(1)
					}
				})
			})
		return d, func() {
			if err := stop(); err != nil {
				t.Errorf("%s: %v", holder, err)
			}
		}
	}
	ds := map[string]*dispatch.Dispatcher{}
	var stopLast func()
	for _, h := range holders {
		ds[h], stopLast = start(h)
	}
	// split says the dispatchers alive see each other and, in a
	// partitioned stream, own disjoint partitions that cover the stream
	// and read just those.
	split := func(alive []string) func() bool {
		return func() bool {
			seen := map[int]string{}
			for _, h := range alive {
				if !slices.Equal(ds[h].Members(), alive) {
					return false
				}
				if !partitioned {
					continue // each reads the stream's one partition
				}
				if !slices.Equal(ds[h].Reading(), ds[h].Partitions()) {
					return false // its readers are still moving
				}
				for _, p := range ds[h].Partitions() {
					if seen[p] != "" {
						return false
					}
					seen[p] = h
				}
			}
			return !partitioned || len(seen) == layout.Count()
		}
	}
	e.waitFor("the dispatchers see each other and split the partitions", split(holders))
	settled.Store(true)

	seqs := map[string][]uint64{}
	total := 0
	publish := func() {
		for range 3 {
			for _, id := range tenants {
				seqs[id] = append(seqs[id], e.publish(id, 3)...)
				total += 3
			}
		}
	}
	applied := func() (n int) {
		for _, id := range tenants {
			n += s.events(id)
		}
		return n
	}
	publish()
	e.waitFor("the events applied", func() bool { return applied() >= total })
	owned := map[string]int{}
	for tenant, hs := range batchHolders(t, e, 0) {
		if len(hs) != 1 {
			t.Errorf("tenant %s dispatched by %v, want one dispatcher", tenant, hs)
			continue
		}
		owned[hs[0]]++
		if partitioned && !slices.Contains(ds[hs[0]].Partitions(), layout.PartitionOf(tenant)) {
			t.Errorf("tenant %s of partition %d dispatched by %s, which owns %v", tenant, layout.PartitionOf(tenant), hs[0], ds[hs[0]].Partitions())
		}
	}
	var moved float64
	for _, h := range holders {
		if owned[h] == 0 {
			t.Errorf("tenants per dispatcher %v: want each to own some", owned)
		}
		moved += ds[h].Moved(pg)
	}
	if partitioned {
		// Each event rung once, by its partition's owner only.
		var rings int64
		for _, h := range holders {
			rung[h].Range(func(k, v any) bool {
				tenant, n := k.(string), v.(*atomic.Int64).Load()
				rings += n
				if p := layout.PartitionOf(tenant); !slices.Contains(ds[h].Partitions(), p) {
					t.Errorf("%s rang %d events of %s, of partition %d it does not own (%v)", h, n, tenant, p, ds[h].Partitions())
				}
				return true
			})
		}
		if rings != int64(total) {
			t.Errorf("the doorbells rang %d events, want each of the %d once", rings, total)
		}
	}
	// Without the split, this run loses about 35 races. A few may be lost
	// while a heartbeat runs late on a loaded machine (the other takes it
	// for gone) or while one dispatcher re-parks: under the whole suite's
	// load that has reached 5.
	t.Logf("cursor races lost while the dispatchers agreed: %.0f", moved)
	if moved > 8 {
		t.Errorf("%v grants lost to another dispatcher, want at most a few once they see each other", moved)
	}

	// The last one stops: the others take every tenant over.
	mark := lastBatchID(t, e)
	stopLast()
	rest := holders[:len(holders)-1]
	e.waitFor("the others alone", split(rest))
	publish()
	e.waitFor("the events after the last one stopped applied", func() bool { return applied() >= total })
	for tenant, hs := range batchHolders(t, e, mark) {
		if len(hs) != 1 || !slices.Contains(rest, hs[0]) {
			t.Errorf("after %s stopped, tenant %s dispatched by %v", holders[len(holders)-1], tenant, hs)
		}
	}
	checkExactlyOnce(t, s.snapshot(), seqs, false)
}

// Partitions that move again while a dispatcher is still taking them over
// end up read by their owner only: the takeover does not leave readers of
// partitions the dispatcher lost meanwhile. A dispatcher gains a stopped
// one's partitions and, while its takeover is held, a third one starts and
// takes some of them; once the takeover goes on, each dispatcher reads
// exactly the partitions it owns, and every event is dispatched once.
func TestPartitionsMovedDuringATakeOver(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Minute)
	tenants := e.numbered(16, 4)
	s := e.startSink(pg, 2, nil, func() time.Duration { return 0 })
	var armed atomic.Bool
	entered, hold := make(chan []int, 1), make(chan struct{})
	var released sync.Once
	release := func() { released.Do(func() { close(hold) }) }
	t.Cleanup(release)
	cfg := func(holder string) *dispatch.Config {
		return &dispatch.Config{Dests: []string{pg}, Holder: holder, Heartbeat: time.Second, PollInterval: time.Hour}
	}
	a := e.start(cfg("disp-a"), func(d *dispatch.Dispatcher) {
		d.SetTakeOver(func(parts []int) {
			if armed.CompareAndSwap(true, false) {
				entered <- parts
				<-hold
			}
		})
	})
	b, stopB := e.startStoppable(cfg("disp-b"), nil)
	testenv.Eventually(t, 20*time.Second, "two dispatchers reading their own partitions", aligned(a, b))

	armed.Store(true)
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	var gained []int
	select {
	case gained = <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the stopped dispatcher's partitions were not taken over")
	}
	c := e.start(cfg("disp-c"), nil)
	testenv.Eventually(t, 20*time.Second, "the third dispatcher seen", func() error {
		if len(a.Members()) != 2 || len(c.Members()) != 2 {
			return fmt.Errorf("members %v and %v", a.Members(), c.Members())
		}
		return nil
	})
	if !slices.ContainsFunc(gained, func(p int) bool { return !slices.Contains(a.Partitions(), p) }) {
		t.Fatalf("the third dispatcher took none of the partitions %v being taken over (owned now %v): the test shows nothing", gained, a.Partitions())
	}
	release()
	testenv.Eventually(t, 20*time.Second, "each dispatcher reading the partitions it owns", aligned(a, c))

	seqs := map[string][]uint64{}
	for _, id := range tenants {
		seqs[id] = e.publish(id, 3)
	}
	e.waitFor("the events applied", func() bool {
		n := 0
		for _, id := range tenants {
			n += s.events(id)
		}
		return n >= 3*len(tenants)
	})
	checkExactlyOnce(t, s.snapshot(), seqs, false)
}

// batchHolders returns, per tenant, the holders that logged its batches
// with id above after.
func batchHolders(t *testing.T, e *env, after int64) map[string][]string {
	t.Helper()
	rows, err := e.pool.Query(e.ctx, `SELECT tenant, array_agg(DISTINCT holder ORDER BY holder) FROM fairway.batches WHERE id > $1 GROUP BY tenant`, after)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var tenant string
		var hs []string
		if err := rows.Scan(&tenant, &hs); err != nil {
			t.Fatal(err)
		}
		out[tenant] = hs
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func lastBatchID(t *testing.T, e *env) int64 {
	t.Helper()
	var id int64
	if err := e.pool.QueryRow(e.ctx, `SELECT coalesce(max(id), 0) FROM fairway.batches`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// Partitions go to the dispatchers in shares that differ by one at most,
// the same whoever computes them, and a dispatcher that leaves moves few
// partitions of the others.
func TestPartitionsSplitEvenly(t *testing.T) {
	t.Parallel()
	for _, n := range []int{8, 16, 64} {
		for k := 1; k <= 5; k++ {
			var members []string
			for i := range k {
				members = append(members, fmt.Sprintf("host-%c-%d", 'a'+i, 100+i))
			}
			owned := map[string][]int{}
			for _, m := range members {
				owned[m] = dispatch.OwnedParts(members, m, n)
			}
			seen := map[int]bool{}
			for _, m := range members {
				if got := len(owned[m]); got < n/k || got > (n+k-1)/k {
					t.Errorf("%d partitions, %d dispatchers: %s owns %d (%v)", n, k, m, got, owned[m])
				}
				for _, p := range owned[m] {
					if seen[p] {
						t.Errorf("%d partitions, %d dispatchers: partition %d owned twice", n, k, p)
					}
					seen[p] = true
				}
			}
			if len(seen) != n {
				t.Errorf("%d partitions, %d dispatchers: %d owned", n, k, len(seen))
			}
			if k < 2 {
				continue
			}
			// The last one leaves: of the others' partitions, most stay.
			stayed, kept := 0, 0
			for _, m := range members[:k-1] {
				after := dispatch.OwnedParts(members[:k-1], m, n)
				for _, p := range owned[m] {
					kept++
					if slices.Contains(after, p) {
						stayed++
					}
				}
			}
			if stayed*3 < kept*2 {
				t.Errorf("%d partitions: when one of %d dispatchers left, the others kept %d of their %d partitions", n, k, stayed, kept)
			}
		}
	}
}

// alive records holders as dispatchers alive before any of them starts,
// so that each one's first view holds them all and each reads only its
// own partitions from the start, whichever beats first: a dispatcher
// that saw itself alone would read every partition and could drain the
// others' backlog before they joined.
func (e *env) alive(holders ...string) {
	e.t.Helper()
	for _, h := range holders {
		if _, err := e.st.Heartbeat(e.ctx, h, time.Minute); err != nil {
			e.t.Fatal(err)
		}
	}
}

// A dispatcher that reads its partitions apart backfills them one at a
// time: each backfill is filtered on its partition and makes the server
// walk the whole backlog, and several at once delayed the doorbells' live
// events by seconds. Every partition's backlog is still dispatched, each
// event once.
func TestPartitionBackfillsRunInTurn(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Minute)
	applied := e.backfillBacklog()

	counts := map[string]*backfillsAtOnce{}
	holders := []string{"disp-a", "disp-b"}
	e.alive(holders...)
	for _, h := range holders {
		c := &backfillsAtOnce{}
		counts[h] = c
		e.start(&dispatch.Config{Dests: []string{pg}, Holder: h, Heartbeat: 10 * time.Second, PollInterval: time.Hour}, func(d *dispatch.Dispatcher) {
			d.SetBackfill(func(parts []int, over <-chan struct{}) {
				if len(parts) == 1 { // a dispatcher owning every partition reads them as one
					c.begin(parts, over, nil)
				}
			})
		})
	}
	applied()
	apart := 0
	for h, c := range counts {
		if n := c.most(); n > 1 {
			t.Errorf("%s ran %d partition backfills at once (partitions %v)", h, n, c.all())
		}
		apart += len(c.all())
	}
	if apart < 2 {
		t.Fatalf("%d partitions backfilled apart: the test shows nothing", apart)
	}
}

// A dispatcher's backfills run one at a time across reads: a partition it
// takes over while a backfill of its own runs waits for that one to end.
// The hook holds disp-a's second partition backfill until a third
// dispatcher has stopped and disp-a reads the partitions it gained. The
// third dispatches no postgres pairs (its destination is ClickHouse, which
// no tenant has), so its partitions' backlog waits for their next owner's
// backfill.
func TestBackfillsQueueAcrossTakeOvers(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Minute)
	applied := e.backfillBacklog()
	cfg := func(holder, dest string) *dispatch.Config {
		return &dispatch.Config{Dests: []string{dest}, Holder: holder, Heartbeat: time.Second, PollInterval: time.Hour}
	}
	// disp-c first: the partitions it owns among the three it owns among
	// any of them (rendezvous hashing), so no other dispatcher touches
	// their backlog before it stops.
	c, stopC := e.startStoppable(cfg("disp-c", tenancy.DestClickHouse), nil)
	testenv.Eventually(t, 20*time.Second, "disp-c reading", func() error {
		if len(c.Reading()) == 0 {
			return errors.New("it reads nothing yet")
		}
		return nil
	})

	var (
		count  backfillsAtOnce
		hooked atomic.Int32
	)
	held, hold := make(chan []int, 1), make(chan struct{})
	a := e.start(cfg("disp-a", pg), func(d *dispatch.Dispatcher) {
		d.SetBackfill(func(parts []int, over <-chan struct{}) {
			if len(parts) != 1 {
				return // a dispatcher owning every partition reads them as one
			}
			var holding <-chan struct{}
			if hooked.Add(1) == 2 {
				holding = hold
			}
			count.begin(parts, over, holding)
			if holding != nil {
				held <- parts
				<-hold
			}
		})
	})
	var released sync.Once
	release := func() { released.Do(func() { close(hold) }) }
	t.Cleanup(release) // before disp-a's own clean-up, which waits for its backfills
	b := e.start(cfg("disp-b", pg), nil)

	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("disp-a ran no second partition backfill")
	}
	testenv.Eventually(t, 20*time.Second, "three dispatchers reading their own partitions", aligned(a, b, c))
	before := a.Partitions()
	if err := stopC(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, "disp-a reading the partitions it gained", aligned(a, b))
	var gained []int
	for _, p := range a.Partitions() {
		if !slices.Contains(before, p) {
			gained = append(gained, p)
		}
	}
	if len(gained) == 0 {
		t.Fatalf("disp-a gained none of the stopped dispatcher's partitions (owned %v, then %v): the test shows nothing", before, a.Partitions())
	}
	time.Sleep(100 * time.Millisecond) // a backfill started at the takeover would have begun
	overlap := count.most()
	if q := a.BackfillsQueued(); q < 1 {
		t.Errorf("backfills_queued shows %v while the gained partitions wait their turn", q)
	}
	release()
	if overlap > 1 {
		t.Errorf("disp-a ran %d partition backfills at once: the takeover's did not wait for the one running", overlap)
	}
	testenv.Eventually(t, 20*time.Second, "disp-a backfilling a partition it gained", func() error {
		if !count.backfilled(gained...) {
			return fmt.Errorf("it backfilled %v, none of %v", count.all(), gained)
		}
		return nil
	})
	applied()
	if n := count.most(); n > 1 {
		t.Errorf("disp-a ran %d partition backfills at once", n)
	}
}

// backfillsAtOnce counts, through a dispatcher's backfill hook, the
// partition backfills it runs at once: one runs from its hook call until
// both its over and the end of a hold the hook keeps it in (held) are
// closed. A dispatcher that runs one at a time calls the hook for the
// next once the last's hook has returned and its over is closed, so
// the count is exact, not a race with goroutines that see them close.
type backfillsAtOnce struct {
	mu      sync.Mutex
	running [][2]<-chan struct{}
	peak    int
	parts   [][]int
}

// begin records a backfill of parts; a hook that holds it until held is
// closed passes held (nil: it does not hold it).
func (c *backfillsAtOnce) begin(parts []int, over, held <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	closed := func(ch <-chan struct{}) bool {
		if ch == nil {
			return true
		}
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	c.running = slices.DeleteFunc(c.running, func(r [2]<-chan struct{}) bool { return closed(r[0]) && closed(r[1]) })
	c.running = append(c.running, [2]<-chan struct{}{over, held})
	c.peak = max(c.peak, len(c.running))
	c.parts = append(c.parts, parts)
}

func (c *backfillsAtOnce) most() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peak
}

func (c *backfillsAtOnce) all() [][]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.parts)
}

// backfilled says whether a backfill of one of parts (read apart) began.
func (c *backfillsAtOnce) backfilled(parts ...int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.ContainsFunc(c.parts, func(g []int) bool { return len(g) == 1 && slices.Contains(parts, g[0]) })
}

// aligned says that ds see each other alone and each reads exactly the
// partitions it owns.
func aligned(ds ...*dispatch.Dispatcher) func() error {
	return func() error {
		for _, d := range ds {
			if len(d.Members()) != len(ds) {
				return fmt.Errorf("members %v", d.Members())
			}
			if !slices.Equal(d.Reading(), d.Partitions()) {
				return fmt.Errorf("it reads partitions %v and owns %v", d.Reading(), d.Partitions())
			}
		}
		return nil
	}
}

// backfillBacklog queues 1,000 events for each of 16 tenants, one of each
// in turn, so that every partition's backfill walks the whole backlog,
// and starts a sink; applied waits until the sink has applied each event
// once.
func (e *env) backfillBacklog() (applied func()) {
	tenants := e.numbered(16, 64)
	runs := make([]int, len(tenants))
	for i := range runs {
		runs[i] = 1
	}
	seqs := e.interleave(1000, tenants, runs...)
	s := e.startSink(pg, 4, nil, func() time.Duration { return 0 })
	return func() {
		e.waitFor("every event applied", func() bool {
			n := 0
			for _, id := range tenants {
				n += s.events(id)
			}
			return n >= len(tenants)*1000
		})
		checkExactlyOnce(e.t, s.snapshot(), seqs, false)
	}
}

// A partition read apart whose backfill region holds none of its events
// (the region capped by Config.Backfill, the partition's waiting events
// older) has nothing to backfill: the partitions queued behind it are
// backfilled all the same, and their tenants dispatched.
func TestBackfillOfAQuietPartitionEnds(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Minute)
	layout := events.LayoutDefault
	holders := []string{"disp-a", "disp-b"}
	own := dispatch.OwnedParts(holders, "disp-a", layout.Count())
	other := dispatch.OwnedParts(holders, "disp-b", layout.Count())
	if len(own) < 2 || len(other) == 0 {
		t.Fatalf("disp-a owns %v and disp-b %v: the test needs two and one", own, other)
	}
	candidates := e.numbered(64, 1000)
	pick := func(part int) string {
		for _, id := range candidates {
			if layout.PartitionOf(id) == part {
				return id
			}
		}
		t.Fatalf("no tenant of partition %d among %v", part, candidates)
		return ""
	}
	// quiet: disp-a's first partition, whose events all lie before the
	// backfill's capped region (the last 50 sequences); late: disp-a's
	// second partition, more than a batch within the region; filler:
	// disp-b's, between them. Interleaved, so that no backlog is dense
	// (cut by arithmetic, not backfilled).
	quiet, filler, late := pick(own[0]), pick(other[0]), pick(own[1])
	var order []string
	for range 10 {
		order = append(order, quiet, filler)
	}
	for range 40 {
		order = append(order, filler)
	}
	for range 20 {
		order = append(order, late, filler)
	}
	seqs := e.publishAll(order)
	s := e.startSink(pg, 2, nil, func() time.Duration { return 0 })

	// Heartbeats 10 s apart keep the first view for the test.
	e.alive(holders...)
	var mu sync.Mutex
	var backfilled [][]int
	for _, h := range holders {
		e.start(&dispatch.Config{Dests: []string{pg}, Holder: h, BatchSize: 10, Backfill: 50, Heartbeat: 10 * time.Second, PollInterval: time.Hour},
			func(d *dispatch.Dispatcher) {
				if h != "disp-a" {
					return
				}
				d.SetBackfill(func(parts []int, _ <-chan struct{}) {
					mu.Lock()
					backfilled = append(backfilled, parts)
					mu.Unlock()
				})
			})
	}
	e.waitFor("every event applied", func() bool {
		return s.events(quiet) >= 10 && s.events(filler) >= 70 && s.events(late) >= 20
	})
	checkExactlyOnce(t, s.snapshot(), seqs, false)
	mu.Lock()
	defer mu.Unlock()
	if !slices.ContainsFunc(backfilled, func(g []int) bool { return slices.Equal(g, []int{own[1]}) }) {
		t.Fatalf("disp-a backfilled %v, not partition %d apart: the test shows nothing", backfilled, own[1])
	}
}

// A dispatcher stopped while it starts, once its first heartbeat has
// recorded it, leaves: the others need not wait for its row to go old
// before they take its pairs over.
func TestLeaveWhenStoppedWhileStarting(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Minute)
	e.tenant("acme", 1, 4, pg)
	e.publish("acme", 3)
	probing, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	d, err := dispatch.New(dispatch.Deps{Store: e.st, NATS: e.nc}, &dispatch.Config{Dests: []string{pg}, Holder: "starting"})
	if err != nil {
		t.Fatal(err)
	}
	d.SetProbe(func(string) { once.Do(func() { close(probing); <-release }) })
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- d.Run(ctx) }()
	select {
	case <-probing:
	case <-e.ctx.Done():
		t.Fatal("the start-up scan never probed")
	}
	alive := func() bool {
		ds, err := e.st.Dispatchers(e.ctx, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(ds, func(d tenancy.Dispatcher) bool { return d.Holder == "starting" })
	}
	if !alive() {
		t.Fatal("the dispatcher's first heartbeat did not record it")
	}
	cancel() // while the probe runs: Run has not started its heartbeat loop
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if alive() {
		t.Error("a dispatcher stopped while it started is still recorded as alive")
	}
}
