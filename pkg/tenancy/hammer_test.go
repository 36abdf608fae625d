package tenancy_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

const (
	hammerProcs   = 3
	hammerWorkerN = 32
	hammerMaxL    = 4
)

// limitChange is one SetLimit made by the hammer's changer, bracketed by
// database-clock readings taken before it started and after it committed.
type limitChange struct {
	limit         int
	before, after time.Time // after is zero while in flight
}

// limitLog is the history of one pair's limit. Changes are made by one
// goroutine, one at a time, so they are totally ordered and do not
// overlap.
type limitLog struct {
	initial int
	changes []limitChange
}

// allowed is the largest in-use count a correct implementation can show at
// sample time s when the oldest live lease was acquired at a (the
// acquiring statement's now(), which precedes its snapshot).
//
// Why this is the right bound: each live lease was acquired by a statement
// whose snapshot lies in [a_i, s], a_i ≥ a. That statement saw the limit of
// the latest change committed before its snapshot, which is either the
// latest change surely committed before a (after < a) or some change that
// began before s. Every live lease therefore sits under one of those
// limits, and since a slot holds one lease at a time, in-use ≤ the largest
// of them. In particular, when every live lease was acquired after the
// latest change committed, the bound is exactly that change's limit —
// a lowered limit is enforced for everything acquired after it. Only
// leases older than the change can exceed it, and they drain.
func (l *limitLog) allowed(a, s time.Time) int {
	start := -1 // index of the latest change surely committed before a
	for i, c := range l.changes {
		if !c.after.IsZero() && c.after.Before(a) {
			start = i
		}
	}
	best := l.initial
	if start >= 0 {
		best = l.changes[start].limit
	}
	for i := start + 1; i < len(l.changes); i++ {
		c := l.changes[i]
		if c.before.After(s) {
			break
		}
		best = max(best, c.limit)
	}
	return best
}

func (l *limitLog) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "initial %d", l.initial)
	for _, c := range l.changes {
		after := "in flight"
		if !c.after.IsZero() {
			after = c.after.Format("15:04:05.000000")
		}
		fmt.Fprintf(&b, "; %d set %s..%s", c.limit, c.before.Format("15:04:05.000000"), after)
	}
	return b.String()
}

func hammerDuration(t *testing.T) time.Duration {
	d := 20 * time.Second
	if v := os.Getenv("FAIRWAY_HAMMER_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("FAIRWAY_HAMMER_DURATION=%q: %v", v, err)
		}
	}
	return d
}

// TestHammer races 3 processes × 32 goroutines over 12 (tenant, dest)
// pairs while one goroutine changes limits at random and an observer
// samples live leases in one snapshot the whole time. It fails on any
// sample over the bound of limitLog.allowed, on any violation a holder
// sees (a slot held twice, a live lease fenced out), and if in-use is not
// zero at the end. It also fails if it never saw a pair at its limit —
// a hammer that never reaches the limit tests nothing.
func TestHammer(t *testing.T) {
	t.Parallel()
	st, pool, dsn := setup(t, nil)
	ctx := testCtx(t)
	dur := hammerDuration(t)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	logs := map[[2]string]*limitLog{}
	var logMu sync.Mutex
	for _, tn := range hammerTenants {
		if _, err := st.EnsureTenant(ctx, tn); err != nil {
			t.Fatal(err)
		}
		for _, d := range hammerDests {
			l := 1 + rng.IntN(hammerMaxL)
			if err := st.SetLimit(ctx, tn, d, l); err != nil {
				t.Fatal(err)
			}
			logs[[2]string{tn, d}] = &limitLog{initial: l}
		}
	}

	type childResult struct {
		out helperOut
		err error
	}
	results := make(chan childResult, hammerProcs)
	for i := range hammerProcs {
		cmd, out := startHelper(t, "hammer", dsn,
			envDuration+"="+dur.String(), envWorkers+"="+fmt.Sprint(hammerWorkerN), envTTL+"=30s")
		go func() {
			var last helperOut
			for o := range out {
				last = o
			}
			results <- childResult{last, cmd.Wait()}
		}()
		_ = i
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	// Changer: one limit change at a time, bracketed by DB clock readings.
	var changes int
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(20+rng.IntN(60)) * time.Millisecond): // pacing, not a wait
			}
			tn, d := hammerTenants[rng.IntN(len(hammerTenants))], hammerDests[rng.IntN(len(hammerDests))]
			lim := 1 + rng.IntN(hammerMaxL)
			if rng.IntN(10) == 0 {
				lim = 0
			}
			lg := logs[[2]string{tn, d}]
			before := dbClock(ctx, t, pool)
			logMu.Lock()
			lg.changes = append(lg.changes, limitChange{limit: lim, before: before})
			i := len(lg.changes) - 1
			logMu.Unlock()
			if err := st.SetLimit(ctx, tn, d, lim); err != nil {
				t.Errorf("set limit: %v", err)
				return
			}
			after := dbClock(ctx, t, pool)
			logMu.Lock()
			lg.changes[i].after = after
			logMu.Unlock()
			changes++
		}
	}()

	// Observer: samples every live lease in one snapshot, back to back.
	var (
		samples, busySamples, saturated int
		violations                      []string
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			type live struct {
				tenant, dest string
				slot         int
				acquired     time.Time
			}
			b := &pgx.Batch{}
			var leases []live
			b.Queue(`SELECT tenant, dest, slot_no, acquired_at FROM fairway.slots WHERE expires_at >= now()`).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					var l live
					if err := rows.Scan(&l.tenant, &l.dest, &l.slot, &l.acquired); err != nil {
						return err
					}
					leases = append(leases, l)
				}
				return rows.Err()
			})
			var s time.Time // after the snapshot above was taken
			b.Queue(`SELECT clock_timestamp()`).QueryRow(func(r pgx.Row) error { return r.Scan(&s) })
			if err := pool.SendBatch(ctx, b).Close(); err != nil {
				t.Errorf("observer: %v", err)
				return
			}
			samples++
			byPair := map[[2]string][]live{}
			for _, l := range leases {
				k := [2]string{l.tenant, l.dest}
				byPair[k] = append(byPair[k], l)
			}
			if len(leases) > 0 {
				busySamples++
			}
			logMu.Lock()
			for k, ls := range byPair {
				a := ls[0].acquired
				for _, l := range ls {
					if l.acquired.Before(a) {
						a = l.acquired
					}
				}
				allowed := logs[k].allowed(a, s)
				if len(ls) > allowed && len(violations) < 20 {
					violations = append(violations, fmt.Sprintf("%s/%s: %d live leases at %s, at most %d allowed (oldest acquired %s; limit history: %s)",
						k[0], k[1], len(ls), s.Format(time.RFC3339Nano), allowed, a.Format(time.RFC3339Nano), logs[k]))
				}
				if len(ls) == allowed {
					saturated++
				}
			}
			logMu.Unlock()
		}
	}()

	var acquired int64
	for range hammerProcs {
		r := <-results
		if r.err != nil {
			t.Errorf("hammer process: %v", r.err)
		}
		acquired += r.out.Acquired
		for _, v := range r.out.Violations {
			t.Errorf("holder saw: %s", v)
		}
	}
	close(stop)
	wg.Wait()
	for _, v := range violations {
		t.Errorf("observer saw: %s", v)
	}
	t.Logf("hammer %s: %d processes × %d workers, %d slots acquired, %d limit changes, %d samples (%d with leases, %d pair-samples at the bound)",
		dur, hammerProcs, hammerWorkerN, acquired, changes, samples, busySamples, saturated)
	if acquired < 100 || busySamples == 0 || saturated == 0 || changes == 0 {
		t.Errorf("the hammer did not exercise the limit: acquired %d, samples with leases %d, at the bound %d, changes %d",
			acquired, busySamples, saturated, changes)
	}
	var inUse int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM fairway.slots WHERE expires_at >= now()`).Scan(&inUse); err != nil {
		t.Fatal(err)
	}
	if inUse != 0 {
		t.Errorf("final in-use %d, want 0", inUse)
	}
}

func dbClock(ctx context.Context, t *testing.T, pool *pgxpool.Pool) time.Time {
	var ts time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&ts); err != nil {
		t.Errorf("db clock: %v", err)
	}
	return ts
}

func TestLimitLogAllowed(t *testing.T) {
	t.Parallel()
	at := func(ms int) time.Time { return time.Unix(1000, int64(ms)*int64(time.Millisecond)) }
	lg := &limitLog{initial: 3, changes: []limitChange{
		{limit: 1, before: at(100), after: at(110)},
		{limit: 4, before: at(200), after: at(210)},
		{limit: 2, before: at(300)}, // in flight
	}}
	for _, tc := range []struct {
		a, s int
		want int
	}{
		{a: 50, s: 90, want: 3},   // before any change
		{a: 50, s: 105, want: 3},  // change 1 in flight: old 3 or new 1
		{a: 120, s: 150, want: 1}, // acquired after change 1 committed
		{a: 120, s: 205, want: 4}, // change 2 may have been seen
		{a: 105, s: 150, want: 3}, // acquired while change 1 committed
		{a: 220, s: 250, want: 4},
		{a: 220, s: 310, want: 4}, // in-flight lowering to 2 not yet binding
		{a: 50, s: 400, want: 4},
	} {
		if got := lg.allowed(at(tc.a), at(tc.s)); got != tc.want {
			t.Errorf("allowed(a=%d, s=%d) = %d, want %d", tc.a, tc.s, got, tc.want)
		}
	}
}
