package sink_test

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/pkg/events"
)

func rec(tenant, id string, v int64) sink.Record {
	return sink.Record{Event: events.Event{Tenant: tenant, ProductID: id, Version: v, Op: events.OpUpsert}}
}

func TestLatest(t *testing.T) {
	t.Parallel()
	batch := []sink.Record{
		rec("b", "x", 1), // 0
		rec("a", "y", 3), // 1
		rec("b", "x", 4), // 2 newest b/x
		rec("a", "y", 2), // 3
		rec("a", "x", 5), // 4
		rec("a", "x", 5), // 5 same version: the earlier (4) wins
		rec("b", "x", 9), // 6 skipped
	}
	skip := []bool{6: true}
	if got, want := sink.Latest(batch, skip), []int{4, 1, 2}; !slices.Equal(got, want) {
		t.Fatalf("Latest = %v, want %v (sorted by tenant, product)", got, want)
	}
	if got, want := sink.Latest(batch, nil), []int{4, 1, 6}; !slices.Equal(got, want) {
		t.Fatalf("Latest(no skip) = %v, want %v", got, want)
	}
	if got := sink.Latest(nil, nil); len(got) != 0 {
		t.Fatalf("Latest(nil) = %v", got)
	}
}

// TestLatestMatchesReference checks Latest against a plain reference on
// random batches: few tenants and products (many duplicates), equal
// versions, skipped records, any order.
func TestLatestMatchesReference(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		batch := make([]sink.Record, rng.IntN(40))
		skip := make([]bool, len(batch))
		for i := range batch {
			batch[i] = rec(fmt.Sprint("t", rng.IntN(3)), fmt.Sprint("p", rng.IntN(8)), int64(rng.IntN(4)))
			skip[i] = rng.IntN(5) == 0
		}
		if rng.IntN(2) == 0 {
			slices.SortStableFunc(batch, func(a, b sink.Record) int {
				return cmp.Or(cmp.Compare(a.Event.Tenant, b.Event.Tenant), cmp.Compare(a.Event.ProductID, b.Event.ProductID))
			})
		}
		// The reference: for each key the highest version, the earliest
		// index among equals; then ordered by key.
		best := map[sink.Key]int{}
		for i, r := range batch {
			if j, ok := best[r.Key()]; !skip[i] && (!ok || batch[j].Event.Version < r.Event.Version) {
				best[r.Key()] = i
			}
		}
		want := slices.Collect(maps.Values(best))
		slices.SortFunc(want, func(a, b int) int {
			return cmp.Or(cmp.Compare(batch[a].Event.Tenant, batch[b].Event.Tenant), cmp.Compare(batch[a].Event.ProductID, batch[b].Event.ProductID))
		})
		if got := sink.Latest(batch, skip); !slices.Equal(got, want) {
			t.Fatalf("Latest(%v, skip %v) = %v, want %v", batch, skip, got, want)
		}
	}
}

var errData = errors.New("bad data")

// fakeDest rejects, as a data error, any attempt that contains a bad index,
// and records what it applied.
type fakeDest struct {
	bad      map[int]bool
	fatalAt  int // attempt number that fails with a non-data error; 0 = never
	attempts int
	applied  []int
}

func (f *fakeDest) apply(idx []int) error {
	f.attempts++
	if f.attempts == f.fatalAt {
		return errors.New("connection reset")
	}
	for _, i := range idx {
		if f.bad[i] {
			return fmt.Errorf("row %d: %w", i, errData)
		}
	}
	f.applied = append(f.applied, idx...)
	return nil
}

func classify(err error) (string, bool) { return "rejected", errors.Is(err, errData) }

func TestIsolate(t *testing.T) {
	t.Parallel()
	for _, bad := range [][]int{nil, {0}, {37}, {99}, {3, 4}, {0, 50, 99}} {
		t.Run(fmt.Sprint(bad), func(t *testing.T) {
			t.Parallel()
			idx := make([]int, 100)
			for i := range idx {
				idx[i] = i
			}
			f := &fakeDest{bad: map[int]bool{}}
			for _, b := range bad {
				f.bad[b] = true
			}
			errs := make([]error, 100)
			if err := sink.Isolate(idx, f.apply, classify, errs); err != nil {
				t.Fatalf("Isolate: %v", err)
			}
			slices.Sort(f.applied)
			for i, e := range errs {
				switch {
				case f.bad[i] && !(sink.IsPermanent(e) && errors.Is(e, errData)):
					t.Errorf("errs[%d] = %v, want permanent wrapping errData", i, e)
				case !f.bad[i] && e != nil:
					t.Errorf("errs[%d] = %v, want nil", i, e)
				case !f.bad[i] && !slices.Contains(f.applied, i):
					t.Errorf("record %d not applied", i)
				}
			}
			if len(f.applied) != 100-len(bad) {
				t.Errorf("applied %d records, want %d", len(f.applied), 100-len(bad))
			}
			if len(bad) == 1 && f.attempts > 2*7+1 {
				t.Errorf("one bad record took %d attempts, want ≤ 15", f.attempts)
			}
		})
	}
}

func TestIsolateStopsOnBatchError(t *testing.T) {
	t.Parallel()
	f := &fakeDest{bad: map[int]bool{1: true}, fatalAt: 2}
	errs := make([]error, 4)
	err := sink.Isolate([]int{0, 1, 2, 3}, f.apply, classify, errs)
	if err == nil || errors.Is(err, errData) || sink.IsPermanent(err) {
		t.Fatalf("Isolate = %v, want the connection error", err)
	}
}

func TestApplyLatestFallsBackToOlderVersion(t *testing.T) {
	t.Parallel()
	batch := []sink.Record{rec("a", "x", 1), rec("a", "x", 2), rec("a", "x", 3), rec("a", "y", 1), rec("a", "z", 1)}
	f := &fakeDest{bad: map[int]bool{2: true, 1: true}}
	errs := make([]error, len(batch))
	errs[4] = sink.Permanent("pre-validated", nil)
	if err := sink.ApplyLatest(batch, errs, f.apply, classify); err != nil {
		t.Fatalf("ApplyLatest: %v", err)
	}
	slices.Sort(f.applied)
	if want := []int{0, 3}; !slices.Equal(f.applied, want) {
		t.Fatalf("applied %v, want %v (x falls back to v1, z stays rejected)", f.applied, want)
	}
	for i, wantPerm := range []bool{false, true, true, false, true} {
		if sink.IsPermanent(errs[i]) != wantPerm {
			t.Errorf("errs[%d] = %v, want permanent=%v", i, errs[i], wantPerm)
		}
	}
}

func TestPermanentError(t *testing.T) {
	t.Parallel()
	cause := errors.New("jsonb refused")
	err := fmt.Errorf("record 3: %w", sink.Permanent("bad payload", cause))
	if !sink.IsPermanent(err) || !errors.Is(err, cause) {
		t.Fatalf("IsPermanent/Unwrap broken for %v", err)
	}
	if got, want := err.Error(), "record 3: permanent: bad payload: jsonb refused"; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
	if got := sink.Permanent("no cause", nil).Error(); got != "permanent: no cause" {
		t.Fatalf("Error() = %q", got)
	}
	if sink.IsPermanent(cause) || sink.IsPermanent(nil) {
		t.Fatal("IsPermanent true for a plain error or nil")
	}
}

// BenchmarkLatest: 1,000 records of one tenant, distinct products, in
// product order (a catalog import) and shuffled (updates in any order).
func BenchmarkLatest(b *testing.B) {
	batch := make([]sink.Record, 1000)
	for i := range batch {
		batch[i] = rec("acme", fmt.Sprintf("p%06d", i), 1)
	}
	b.Run("sorted", func(b *testing.B) {
		for b.Loop() {
			sink.Latest(batch, nil)
		}
	})
	shuffled := slices.Clone(batch)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	b.Run("shuffled", func(b *testing.B) {
		for b.Loop() {
			sink.Latest(shuffled, nil)
		}
	})
}
