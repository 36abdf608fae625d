package tenancy

import (
	"context"
	"sync"
	"testing"
	"time"
)

// countingGroup is a grouper whose statement takes no time and records
// how many calls each carried.
func countingGroup(max int, linger time.Duration) (*grouper[int, int], func() []int) {
	var mu sync.Mutex
	var sizes []int
	g := &grouper[int, int]{max: max, linger: linger, run: func(_ context.Context, args []int) []int {
		mu.Lock()
		sizes = append(sizes, len(args))
		mu.Unlock()
		return args
	}}
	return g, func() []int { mu.Lock(); defer mu.Unlock(); return append([]int(nil), sizes...) }
}

// TestGrouperLingersWhileBusy sends calls 2 ms apart to a grouper whose
// statements take no time: without the linger each goes out alone, with
// it a leader waits for the next ones.
func TestGrouperLingersWhileBusy(t *testing.T) {
	const calls = 40
	g, sizes := countingGroup(64, 10*time.Millisecond)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			if res, ok := g.do(t.Context(), i); !ok || res != i {
				t.Errorf("call %d: got %d, %v", i, res, ok)
			}
		})
		time.Sleep(2 * time.Millisecond)
	}
	wg.Wait()
	got := sizes()
	if len(got) > calls/2 {
		t.Fatalf("%d calls 2 ms apart went out in %d statements %v; a 10 ms linger should carry several in each", calls, len(got), got)
	}
}

// TestGrouperLoneCallRunsAtOnce: a call after a quiet spell does not wait
// for company, however long the linger.
func TestGrouperLoneCallRunsAtOnce(t *testing.T) {
	g, sizes := countingGroup(64, time.Minute)
	for i := range 3 {
		start := time.Now()
		if _, ok := g.do(t.Context(), i); !ok {
			t.Fatal("call refused")
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("call %d took %v", i, d)
		}
		g.mu.Lock()
		g.last = time.Now().Add(-time.Hour) // a quiet spell
		g.mu.Unlock()
	}
	if got := sizes(); len(got) != 3 {
		t.Fatalf("statements %v, want 3 of one call", got)
	}
}

// TestGrouperFullGroupGoesAtOnce: a lingering leader goes as soon as max
// calls wait, not at the end of the linger.
func TestGrouperFullGroupGoesAtOnce(t *testing.T) {
	g, sizes := countingGroup(4, time.Minute)
	g.last = time.Now() // busy: the leader lingers
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() { g.do(t.Context(), i) })
	}
	wg.Wait()
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("a full group waited %v", d)
	}
	if got := sizes(); len(got) != 1 || got[0] != 4 {
		t.Fatalf("statements %v, want one of 4 calls", got)
	}
}
