package tenancy_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/fairwayhq/fairway/pkg/tenancy"
)

func TestDispatchSteps(t *testing.T) {
	t.Parallel()
	st, pool, _ := setup(t, nil)
	ctx := testCtx(t)
	const tn, d = "acme", tenancy.DestClickHouse

	l := must[tenancy.Lease](t)(st.Dispatch(ctx, tn, d, "d1", 1, 10)) // first sight
	if l.FromSeq != 1 || l.ToSeq != 10 || l.Holder != "d1" {
		t.Fatalf("lease %+v", l)
	}
	if c := must[uint64](t)(st.Cursor(ctx, tn, d)); c != 11 {
		t.Fatalf("cursor %d", c)
	}
	// At limit: nothing changes, not even the cursor.
	if _, err := st.Dispatch(ctx, tn, d, "d1", 11, 20); !errors.Is(err, tenancy.ErrAtLimit) {
		t.Fatalf("at limit: %v", err)
	}
	if c := must[uint64](t)(st.Cursor(ctx, tn, d)); c != 11 {
		t.Fatalf("cursor moved to %d on a refused dispatch", c)
	}
	if err := st.Release(ctx, l.ID, l.Token); err != nil {
		t.Fatal(err)
	}
	// Cursor moved: no slot taken.
	if _, err := st.Dispatch(ctx, tn, d, "d1", 1, 10); !errors.Is(err, tenancy.ErrCursorMoved) {
		t.Fatalf("stale from: %v", err)
	}
	if n := must[int](t)(st.InUse(ctx, tn, d)); n != 0 {
		t.Fatalf("in use %d after a refused dispatch", n)
	}
	if _, err := st.Dispatch(ctx, tn, d, "d1", 11, 10); !errors.Is(err, tenancy.ErrInvalidArgument) {
		t.Fatalf("inverted range: %v", err)
	}
	// Rewind for replay.
	if err := st.SetCursor(ctx, tn, d, 5); err != nil {
		t.Fatal(err)
	}
	l2 := must[tenancy.Lease](t)(st.Dispatch(ctx, tn, d, "d2", 5, 5))
	if l2.Token != l.Token+1 {
		t.Fatalf("token %d after %d", l2.Token, l.Token)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM fairway.batches WHERE tenant = $1`, tn).Scan(&n); err != nil || n != 2 {
		t.Fatalf("batch log has %d rows (%v), want 2", n, err)
	}
	if err := st.SetCursor(ctx, "newbie", d, 7); err != nil {
		t.Fatal(err)
	}
	if c := must[uint64](t)(st.Cursor(ctx, "newbie", d)); c != 7 {
		t.Fatalf("cursor %d", c)
	}
	if err := st.SetPaused(ctx, "newbie", true); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Dispatch(ctx, "newbie", d, "d", 7, 8); !errors.Is(err, tenancy.ErrPaused) {
		t.Fatalf("paused dispatch: %v", err)
	}
	if c := must[uint64](t)(st.Cursor(ctx, "newbie", d)); c != 7 {
		t.Fatalf("cursor %d after a paused dispatch", c)
	}
}

// TestCursorRace: two dispatcher instances (separate pools, 4 goroutines
// each) race over the same tenants with DispatchMany calls of one to three
// ranges. The union of batches they recorded, and the batch log, cover
// every sequence 1..target exactly once, and no tenant ever holds more
// leases than its limit.
func TestCursorRace(t *testing.T) {
	t.Parallel()
	_, _, dsn := setup(t, nil)
	ctx := testCtx(t)
	const (
		target    = 400
		instances = 2
		perInst   = 4
	)
	tenants := []string{"c0", "c1", "c2", "c3", "c4"}
	stores := make([]*tenancy.Store, instances)
	for i := range stores {
		var err error
		if stores[i], err = tenancy.New(newPool(t, dsn, perInst+1), nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, tn := range tenants {
		if _, err := stores[0].EnsureTenant(ctx, tn); err != nil {
			t.Fatal(err)
		}
		if err := stores[0].SetLimit(ctx, tn, tenancy.DestPostgres, 2); err != nil {
			t.Fatal(err)
		}
	}
	type batch struct {
		from, to uint64
		inst     int
	}
	var (
		mu       sync.Mutex
		got      = map[string][]batch{}
		moved    atomic.Int64
		perInstN [instances]atomic.Int64
		held     = map[string]*atomic.Int64{}
		wg       sync.WaitGroup
	)
	for _, tn := range tenants {
		held[tn] = new(atomic.Int64)
	}
	for i, st := range stores {
		for w := range perInst {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(i), uint64(w)))
				holder := fmt.Sprintf("inst%d-w%d", i, w)
				done := map[string]bool{}
				for len(done) < len(tenants) {
					tn := tenants[rng.IntN(len(tenants))]
					c, err := st.Cursor(ctx, tn, tenancy.DestPostgres)
					if err != nil {
						t.Error(err)
						return
					}
					if c > target {
						done[tn] = true
						continue
					}
					// One to three consecutive ranges per call (DispatchMany).
					var ranges []tenancy.Range
					for from := c; from <= target && len(ranges) < 1+rng.IntN(3); {
						to := min(from+uint64(rng.IntN(8)), target)
						ranges = append(ranges, tenancy.Range{From: from, To: to})
						from = to + 1
					}
					ls, err := st.DispatchMany(ctx, tn, tenancy.DestPostgres, holder, c, ranges)
					switch {
					case errors.Is(err, tenancy.ErrCursorMoved):
						moved.Add(1)
						continue
					case errors.Is(err, tenancy.ErrAtLimit):
						continue
					case err != nil:
						t.Error(err)
						return
					}
					if n := held[tn].Add(int64(len(ls))); n > 2 {
						t.Errorf("%s: %d leases held at once, limit 2", tn, n)
					}
					for j, l := range ls {
						if l.FromSeq != ranges[j].From || l.ToSeq != ranges[j].To {
							t.Errorf("lease %d covers %d..%d, asked %d..%d", j, l.FromSeq, l.ToSeq, ranges[j].From, ranges[j].To)
						}
						mu.Lock()
						got[tn] = append(got[tn], batch{l.FromSeq, l.ToSeq, i})
						mu.Unlock()
					}
					perInstN[i].Add(1)
					held[tn].Add(-int64(len(ls)))
					for _, l := range ls {
						if err := st.Release(ctx, l.ID, l.Token); err != nil {
							t.Error(err)
							return
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	check := func(what string, bs map[string][]batch) {
		t.Helper()
		for _, tn := range tenants {
			list := bs[tn]
			sort.Slice(list, func(i, j int) bool { return list[i].from < list[j].from })
			next := uint64(1)
			for _, b := range list {
				if b.from != next {
					t.Fatalf("%s: %s: batch %d..%d, want it to start at %d (gap or overlap)", what, tn, b.from, b.to, next)
				}
				next = b.to + 1
			}
			if next != target+1 {
				t.Fatalf("%s: %s: covered up to %d, want %d", what, tn, next-1, target)
			}
		}
	}
	check("dispatchers", got)
	rows, err := newPool(t, dsn, 1).Query(ctx, `SELECT tenant, from_seq, to_seq FROM fairway.batches`)
	if err != nil {
		t.Fatal(err)
	}
	logged := map[string][]batch{}
	for rows.Next() {
		var (
			tn       string
			from, to int64
		)
		if err := rows.Scan(&tn, &from, &to); err != nil {
			t.Fatal(err)
		}
		logged[tn] = append(logged[tn], batch{from: uint64(from), to: uint64(to)})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	check("batch log", logged)
	t.Logf("batches per instance %d/%d, cursor-moved refusals %d", perInstN[0].Load(), perInstN[1].Load(), moved.Load())
	if perInstN[0].Load() == 0 || perInstN[1].Load() == 0 || moved.Load() == 0 {
		t.Fatalf("no real race: batches %d/%d, refusals %d", perInstN[0].Load(), perInstN[1].Load(), moved.Load())
	}
}

// DispatchMany takes what slots are free, gives them to the first ranges
// in order and moves the cursor past the last range that got one.
func TestDispatchMany(t *testing.T) {
	t.Parallel()
	st, pool, _ := setup(t, nil)
	ctx := testCtx(t)
	const tn, d = "many", tenancy.DestPostgres
	if _, err := st.EnsureTenant(ctx, tn); err != nil {
		t.Fatal(err)
	}
	if err := st.SetLimit(ctx, tn, d, 3); err != nil {
		t.Fatal(err)
	}
	ranges := []tenancy.Range{{1, 10}, {12, 20}, {21, 21}, {30, 40}, {41, 50}}
	ls := must[[]tenancy.Lease](t)(st.DispatchMany(ctx, tn, d, "d1", 1, ranges))
	if len(ls) != 3 {
		t.Fatalf("%d leases, want 3 (the limit)", len(ls))
	}
	slots := map[int]bool{}
	for i, l := range ls {
		if l.FromSeq != ranges[i].From || l.ToSeq != ranges[i].To || l.Holder != "d1" || slots[l.Slot] {
			t.Fatalf("lease %d: %+v for range %v", i, l, ranges[i])
		}
		slots[l.Slot] = true
	}
	if c := must[uint64](t)(st.Cursor(ctx, tn, d)); c != 22 {
		t.Fatalf("cursor %d, want 22 (after the last range that got a slot)", c)
	}
	if _, err := st.DispatchMany(ctx, tn, d, "d1", 22, ranges[3:]); !errors.Is(err, tenancy.ErrAtLimit) {
		t.Fatalf("at limit: %v", err)
	}
	if c := must[uint64](t)(st.Cursor(ctx, tn, d)); c != 22 {
		t.Fatalf("cursor moved to %d on a refused dispatch", c)
	}
	if err := st.Release(ctx, ls[1].ID, ls[1].Token); err != nil {
		t.Fatal(err)
	}
	// The cursor is at 22, not 30: nothing is taken.
	if _, err := st.DispatchMany(ctx, tn, d, "d1", 30, ranges[3:]); !errors.Is(err, tenancy.ErrCursorMoved) {
		t.Fatalf("stale from: %v", err)
	}
	if n := must[int](t)(st.InUse(ctx, tn, d)); n != 2 {
		t.Fatalf("in use %d, want 2", n)
	}
	// A tight range (the tenant's first event after the cursor is 25).
	more := must[[]tenancy.Lease](t)(st.DispatchMany(ctx, tn, d, "d2", 22, []tenancy.Range{{25, 29}, {30, 40}}))
	if len(more) != 1 || more[0].FromSeq != 25 || more[0].ToSeq != 29 {
		t.Fatalf("leases %+v, want one for 25..29", more)
	}
	if c := must[uint64](t)(st.Cursor(ctx, tn, d)); c != 30 {
		t.Fatalf("cursor %d, want 30", c)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM fairway.batches WHERE tenant = $1`, tn).Scan(&n); err != nil || n != 4 {
		t.Fatalf("batch log has %d rows (%v), want 4", n, err)
	}
	for _, bad := range [][]tenancy.Range{
		nil,
		{{30, 29}},
		{{30, 40}, {40, 42}},
		{{29, 35}}, // before the cursor it names
		make([]tenancy.Range, tenancy.DispatchManyMax+1),
	} {
		if _, err := st.DispatchMany(ctx, tn, d, "d1", 30, bad); !errors.Is(err, tenancy.ErrInvalidArgument) {
			t.Errorf("ranges %v: %v, want ErrInvalidArgument", bad, err)
		}
	}
}
