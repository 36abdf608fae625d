package tenancy

import (
	"context"
	"sync"
	"testing"
	"time"
)

// countingGroup is a grouper whose statement takes took and records how
// many calls each carried.
func countingGroup(max int, linger, took time.Duration) (*grouper[int, int], func() []int) {
	var mu sync.Mutex
	var sizes []int
	g := &grouper[int, int]{max: max, linger: linger, run: func(_ context.Context, args []int) []int {
		time.Sleep(took)
		mu.Lock()
		sizes = append(sizes, len(args))
		mu.Unlock()
		return args
	}}
	return g, func() []int { mu.Lock(); defer mu.Unlock(); return append([]int(nil), sizes...) }
}

// callTogether makes n calls to g at once, g busy (its leader lingers),
// and returns how long they took.
func callTogether(t *testing.T, g *grouper[int, int], n int) time.Duration {
	g.last, g.company = time.Now(), true
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { g.do(t.Context(), i) })
	}
	wg.Wait()
	return time.Since(start)
}

// TestGrouperLingersWhileBusy sends calls two at a time, 2 ms apart, to a
// grouper whose statements take 1 ms: without the linger a statement
// carries the one or two calls that came while the one before ran, with
// it a leader waits for several pairs.
func TestGrouperLingersWhileBusy(t *testing.T) {
	const pairs = 40
	g, sizes := countingGroup(64, 20*time.Millisecond, time.Millisecond)
	var wg sync.WaitGroup
	for i := range 2 * pairs {
		wg.Go(func() {
			if res, ok := g.do(t.Context(), i); !ok || res != i {
				t.Errorf("call %d: got %d, %v", i, res, ok)
			}
		})
		if i%2 == 1 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	wg.Wait()
	if got := sizes(); len(got) > pairs/3 {
		t.Fatalf("%d pairs of calls 2 ms apart went out in %d statements %v; a 10 ms linger should carry several pairs in each", pairs, len(got), got)
	}
}

// TestGrouperLoneCallerRunsAtOnce: a caller that calls again as soon as
// its call is done, with nobody else calling, never waits for company,
// however long the linger; nor does a call after a quiet spell.
func TestGrouperLoneCallerRunsAtOnce(t *testing.T) {
	g, sizes := countingGroup(64, time.Minute, 0)
	start := time.Now()
	for i := range 20 {
		if _, ok := g.do(t.Context(), i); !ok {
			t.Fatal("call refused")
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("20 calls one after another took %v", d)
	}
	if got := sizes(); len(got) != 20 {
		t.Fatalf("statements %v, want 20 of one call", got)
	}
}

// TestGrouperFullGroupGoesAtOnce: a lingering leader goes as soon as max
// calls wait, not at the end of the linger.
func TestGrouperFullGroupGoesAtOnce(t *testing.T) {
	g, sizes := countingGroup(4, time.Minute, 0)
	if d := callTogether(t, g, 4); d > 10*time.Second {
		t.Fatalf("a full group waited %v", d)
	}
	if got := sizes(); len(got) != 1 || got[0] != 4 {
		t.Fatalf("statements %v, want one of 4 calls", got)
	}
}

// TestGrouperGoesOnceTheBurstIsIn: callers that come back together (the
// grants a statement ended, starting again) go as soon as no more join
// for lingerGap, not at the end of the linger: fewer than max callers
// exist, and all of them wait already.
func TestGrouperGoesOnceTheBurstIsIn(t *testing.T) {
	const linger = 2 * time.Second
	g, sizes := countingGroup(64, linger, 0)
	if d := callTogether(t, g, 8); d >= linger*3/4 {
		t.Fatalf("8 calls that came at once waited %v, want about lingerGap (%v), well under the linger (%v)", d, g.lingerGap(), linger)
	}
	if got := sizes(); len(got) != 1 || got[0] != 8 {
		t.Fatalf("statements %v, want one of 8 calls", got)
	}
}

// TestGrouperLingersNotPastADeadline: a leader lingers no longer than half
// the time left to the earliest deadline of the calls queued, so their
// statement still runs within it.
func TestGrouperLingersNotPastADeadline(t *testing.T) {
	g, _ := countingGroup(64, time.Minute, 0)
	g.last, g.company = time.Now(), true
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	start := time.Now()
	if _, ok := g.do(ctx, 1); !ok {
		t.Fatal("call refused")
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Fatalf("a call with 2 s left waited %v", d)
	}
}
