package tenancy_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// TestDispatchGrouped holds the first DispatchMany's statement on its
// cursor's row lock while calls of other pairs queue behind it, one of
// each outcome: they go out together in one statement, and each gets what
// it would have got alone. A second call of a pair already queued waits
// for a later statement (in the same one it would see the cursor its
// predecessor found, not the one it moved).
func TestDispatchGrouped(t *testing.T) {
	t.Parallel()
	st, pool, _ := setup(t, &tenancy.Config{DefaultMaxSlots: 4})
	ctx := testCtx(t)
	const pg = tenancy.DestPostgres
	for _, tn := range []string{"gblock", "ga", "gb", "gc", "gd", "gf"} {
		if _, err := st.Cursor(ctx, tn, pg); err != nil { // creates the pair
			t.Fatal(err)
		}
	}
	if err := st.SetLimit(ctx, "gb", pg, 1); err != nil {
		t.Fatal(err)
	}
	held := must[tenancy.Lease](t)(st.Acquire(ctx, "gb", pg, "other"))
	if err := st.SetCursor(ctx, "gc", pg, 50); err != nil {
		t.Fatal(err)
	}
	if err := st.SetPaused(ctx, "gd", true); err != nil {
		t.Fatal(err)
	}
	if err := st.SetLimit(ctx, "gf", pg, 2); err != nil {
		t.Fatal(err)
	}
	stmts0, calls0 := st.DispatchStats()

	lock := holdRows(t, ctx, pool, `SELECT 1 FROM fairway.cursors WHERE tenant = 'gblock' FOR UPDATE`)
	ds := newDispatches(ctx, st)
	dispatch, got := ds.start, ds.got
	queue := func(name, tenant string, from uint64, ranges ...tenancy.Range) {
		n := st.QueuedDispatches()
		dispatch(name, tenant, from, ranges...)
		testenv.Eventually(t, waitMax, name+" to queue", queueHolds(st.QueuedDispatches, n+1))
	}
	dispatch("gblock", "gblock", 1, tenancy.Range{From: 1, To: 10})
	lock.waitBlocked("the first dispatch")
	queue("ga", "ga", 1, tenancy.Range{From: 1, To: 10}, tenancy.Range{From: 12, To: 20})
	queue("ga2", "ga", 21, tenancy.Range{From: 21, To: 30})
	queue("gb", "gb", 1, tenancy.Range{From: 1, To: 10})
	queue("gc", "gc", 1, tenancy.Range{From: 1, To: 10})
	queue("gd", "gd", 1, tenancy.Range{From: 1, To: 10})
	queue("ge", "ge", 1, tenancy.Range{From: 5, To: 9}) // a pair never seen
	queue("gf", "gf", 1, tenancy.Range{From: 1, To: 2}, tenancy.Range{From: 3, To: 4}, tenancy.Range{From: 5, To: 6})
	lock.unlock()
	ds.wait()

	// 1 (gblock) + 6 (ga, gb, gc, gd, ge, gf) + ga2 + ge's retry after
	// creating its pair: 9 calls in 3 or 4 statements (ga2 and the retry
	// may share one).
	stmts, calls := st.DispatchStats()
	if calls-calls0 != 9 || stmts-stmts0 < 3 || stmts-stmts0 > 4 {
		t.Fatalf("%d calls in %d statements, want 9 in 3 or 4", calls-calls0, stmts-stmts0)
	}
	ranges := func(ls []tenancy.Lease) (out []tenancy.Range) {
		for _, l := range ls {
			out = append(out, tenancy.Range{From: l.FromSeq, To: l.ToSeq})
		}
		return out
	}
	for name, want := range map[string][]tenancy.Range{
		"gblock": {{1, 10}}, "ga": {{1, 10}, {12, 20}}, "ga2": {{21, 30}}, "ge": {{5, 9}}, "gf": {{1, 2}, {3, 4}},
	} {
		r := got[name]
		if r.err != nil || len(r.leases) != len(want) {
			t.Errorf("%s: %v, %v; want leases %v", name, ranges(r.leases), r.err, want)
			continue
		}
		for i, l := range r.leases {
			if (tenancy.Range{From: l.FromSeq, To: l.ToSeq}) != want[i] || l.Tenant != strings.TrimSuffix(name, "2") || l.Holder != "h" {
				t.Errorf("%s: lease %d is %+v, want range %v", name, i, l, want[i])
			}
		}
	}
	for name, want := range map[string]error{"gb": tenancy.ErrAtLimit, "gc": tenancy.ErrCursorMoved, "gd": tenancy.ErrPaused} {
		if r := got[name]; !errors.Is(r.err, want) || r.leases != nil {
			t.Errorf("%s: %v, %v; want %v", name, r.leases, r.err, want)
		}
	}
	for tenant, want := range map[string]uint64{"ga": 31, "gb": 1, "gc": 50, "gd": 1, "ge": 10, "gf": 5} {
		if c := must[uint64](t)(st.Cursor(ctx, tenant, pg)); c != want {
			t.Errorf("%s: cursor %d, want %d", tenant, c, want)
		}
	}
	for tenant, want := range map[string]int{"ga": 3, "gb": 1, "gc": 0, "gd": 0, "ge": 1, "gf": 2} {
		if in := must[int](t)(st.InUse(ctx, tenant, pg)); in != want {
			t.Errorf("%s: %d slots in use, want %d", tenant, in, want)
		}
	}
	var logged int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM fairway.batches WHERE tenant IN ('ga', 'gb', 'gc', 'gd', 'ge', 'gf')`).Scan(&logged); err != nil {
		t.Fatal(err)
	}
	if logged != 6 {
		t.Errorf("%d batches logged, want 6 (ga 3, ge 1, gf 2)", logged)
	}
	if err := st.Release(ctx, held.ID, held.Token); err != nil {
		t.Fatal(err)
	}
}

// TestDispatchGroupedDeadlockFallsBack: when PostgreSQL aborts a grouped
// dispatch statement (here a deadlock with another transaction), each of
// its calls runs alone and gets its leases; none sees the statement's
// error. The grouped statement for dx and dy locks both pairs' free slots,
// then waits on dx's cursor, which another transaction holds; that
// transaction then asks for dy's slot. The statement waited first, so its
// backend's deadlock check (after deadlock_timeout, 1 s by default) finds
// the cycle and aborts it; the other transaction gets the slot and
// commits, and the calls, alone, find everything free.
func TestDispatchGroupedDeadlockFallsBack(t *testing.T) {
	t.Parallel()
	st, pool, _ := setup(t, &tenancy.Config{DefaultMaxSlots: 1})
	ctx := testCtx(t)
	const pg = tenancy.DestPostgres
	for _, tn := range []string{"dblock", "dx", "dy"} {
		if _, err := st.Cursor(ctx, tn, pg); err != nil { // creates the pair
			t.Fatal(err)
		}
	}
	first := holdRows(t, ctx, pool, `SELECT 1 FROM fairway.cursors WHERE tenant = 'dblock' FOR UPDATE`)
	calls := newDispatches(ctx, st)
	dispatch := func(tenant string) { calls.start(tenant, tenant, 1, tenancy.Range{From: 1, To: 10}) }
	dispatch("dblock")
	first.waitBlocked("the first dispatch")
	for i, tn := range []string{"dx", "dy"} {
		dispatch(tn)
		testenv.Eventually(t, waitMax, tn+" to queue", queueHolds(st.QueuedDispatches, i+1))
	}

	// The other transaction holds dx's cursor; the first statement ends
	// and the grouped one (dx, dy) waits on that cursor. The other checks
	// for deadlocks late (holdRows), so the grouped statement, which waits
	// first, is the one that finds the cycle even if the machine is slow to
	// send the second request.
	other := holdRows(t, ctx, pool, `SELECT 1 FROM fairway.cursors WHERE tenant = 'dx' FOR UPDATE`)
	first.unlock()
	other.waitBlocked("the grouped statement")
	// Now it asks for dy's slot, which the grouped statement has locked.
	if err := other.exec(`SELECT 1 FROM fairway.slots WHERE tenant = 'dy' AND slot_no = 0 FOR UPDATE`); err != nil {
		t.Fatalf("the other transaction lost the deadlock (%v): the grouped statement was not the one aborted", err)
	}
	other.unlock()
	calls.wait()

	for _, tn := range []string{"dblock", "dx", "dy"} {
		r := calls.got[tn]
		if r.err != nil || len(r.leases) != 1 || r.leases[0].Tenant != tn || r.leases[0].FromSeq != 1 || r.leases[0].ToSeq != 10 {
			t.Errorf("%s: %+v, %v; want one lease for 1..10", tn, r.leases, r.err)
		}
		if c := must[uint64](t)(st.Cursor(ctx, tn, pg)); c != 11 {
			t.Errorf("%s: cursor %d, want 11", tn, c)
		}
	}
	var logged int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM fairway.batches WHERE tenant IN ('dx', 'dy')`).Scan(&logged); err != nil {
		t.Fatal(err)
	}
	if logged != 2 {
		t.Errorf("%d batches logged for dx and dy, want 2 (the aborted statement logged nothing)", logged)
	}
}

// dispatches runs DispatchMany calls of destination postgres and holder
// "h" in goroutines and keeps each outcome under the name it was started
// with; read got after wait.
type dispatches struct {
	ctx context.Context
	st  *tenancy.Store
	wg  sync.WaitGroup
	mu  sync.Mutex
	got map[string]dispatchOutcome
}

type dispatchOutcome struct {
	leases []tenancy.Lease
	err    error
}

func newDispatches(ctx context.Context, st *tenancy.Store) *dispatches {
	return &dispatches{ctx: ctx, st: st, got: map[string]dispatchOutcome{}}
}

func (d *dispatches) start(name, tenant string, from uint64, ranges ...tenancy.Range) {
	d.wg.Go(func() {
		ls, err := d.st.DispatchMany(d.ctx, tenant, tenancy.DestPostgres, "h", from, ranges)
		d.mu.Lock()
		d.got[name] = dispatchOutcome{ls, err}
		d.mu.Unlock()
	})
}

func (d *dispatches) wait() { d.wg.Wait() }
