package scheduler_test

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fairwayhq/fairway/internal/dispatch/scheduler"
)

// The simulation runs the dispatcher loop in simulated time (integer
// milliseconds): a destination with a pool of workers, per-tenant slot
// limits, and a fixed apply time per batch. Whenever a worker is free the
// dispatcher asks the scheduler for a grant; a tenant reaching its limit is
// marked blocked and unblocked when one of its batches completes. Nothing
// sleeps and nothing depends on the machine's speed.

type simArrival struct {
	at     int64 // ms
	tenant string
	events int64

	grants int64 // grants handed out before it arrived (simulateFair sets it)
}

type simTenant struct {
	name   string
	weight int
	limit  int // slot limit; 0 = blocked throughout

	inUse  int
	queued int64
	runs   []simArrival // pending events, oldest first

	dispatched int64
	batches    int
	worstWait  int64 // ms from an event's arrival to the start of its batch
	// worstWaitGrants is the most grants handed out between an event's
	// arrival and its batch's grant.
	worstWaitGrants int64
	lastDone        int64 // ms at which its last batch completed
}

type completion struct {
	at     int64
	tenant string
}

type completions []completion

func (h completions) Len() int { return len(h) }
func (h completions) Less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].tenant < h[j].tenant
}
func (h completions) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *completions) Push(x any)   { *h = append(*h, x.(completion)) }
func (h *completions) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type simConfig struct {
	sched    scheduler.Config
	workers  int
	applyMS  int64
	tenants  []simTenant // name, weight, limit
	arrivals []simArrival
	horizon  int64 // stop at this simulated time (ms); 0 = run until idle
}

type simResult struct {
	tenants map[string]*simTenant
	endMS   int64
	// busyAfterDispatch records the busy-worker count after each dispatch
	// phase.
	busyAfterDispatch []int
}

// simulateFair runs the workload through a Scheduler. After every dispatch
// phase it checks work conservation: either every worker is busy, or every
// tenant with queued events is at its slot limit.
func simulateFair(t testing.TB, cfg simConfig) simResult {
	t.Helper()
	s := setup(t, cfg.sched)
	tenants := map[string]*simTenant{}
	for _, tn := range cfg.tenants {
		tenants[tn.name] = &tn
	}
	arrivals := slices.Clone(cfg.arrivals)
	slices.SortStableFunc(arrivals, func(a, b simArrival) int { return int(a.at - b.at) })

	for _, tn := range tenants {
		if tn.limit == 0 { // slots all held elsewhere: blocked throughout
			s.SetBlocked(key(tn.name), true)
		}
	}

	var (
		done   completions
		busy   int
		now    int64
		grants int64 // handed out so far
		res    = simResult{tenants: tenants}
	)
	dispatch := func() {
		for busy < cfg.workers {
			g, ok := s.Next()
			if !ok {
				break
			}
			tn := tenants[g.Key.Tenant]
			if tn.inUse >= tn.limit {
				t.Fatalf("t=%dms: granted %s at its limit %d", now, tn.name, tn.limit)
			}
			// cost = events: read min(MaxEvents, MaxCost, queued).
			n := min(int64(g.MaxEvents), g.MaxCost, tn.queued)
			for left := n; left > 0; {
				r := &tn.runs[0]
				tn.worstWait = max(tn.worstWait, now-r.at)
				tn.worstWaitGrants = max(tn.worstWaitGrants, grants-r.grants)
				take := min(left, r.events)
				r.events -= take
				left -= take
				if r.events == 0 {
					tn.runs = tn.runs[1:]
				}
			}
			grants++
			tn.queued -= n
			tn.dispatched += n
			tn.batches++
			tn.inUse++
			busy++
			heap.Push(&done, completion{at: now + cfg.applyMS, tenant: tn.name})
			if tn.inUse == tn.limit {
				s.SetBlocked(g.Key, true)
			}
			if err := s.Done(g.Key, n, n); err != nil {
				t.Fatalf("Done: %v", err)
			}
		}
		if busy < cfg.workers {
			for _, tn := range tenants {
				if tn.queued > 0 && tn.inUse < tn.limit {
					t.Fatalf("t=%dms: %d of %d workers busy while %s has %d events and %d of %d slots",
						now, busy, cfg.workers, tn.name, tn.queued, tn.inUse, tn.limit)
				}
			}
		}
		res.busyAfterDispatch = append(res.busyAfterDispatch, busy)
	}

	for len(arrivals) > 0 || len(done) > 0 {
		next := int64(-1)
		if len(arrivals) > 0 {
			next = arrivals[0].at
		}
		if len(done) > 0 && (next < 0 || done[0].at < next) {
			next = done[0].at
		}
		if cfg.horizon > 0 && next > cfg.horizon {
			break
		}
		now = next
		for len(done) > 0 && done[0].at == now {
			c := heap.Pop(&done).(completion)
			tn := tenants[c.tenant]
			busy--
			tn.lastDone = now
			if tn.inUse == tn.limit {
				s.SetBlocked(key(tn.name), false)
			}
			tn.inUse--
		}
		for len(arrivals) > 0 && arrivals[0].at == now {
			a := arrivals[0]
			a.grants = grants
			arrivals = arrivals[1:]
			tn := tenants[a.tenant]
			tn.runs = append(tn.runs, a)
			tn.queued += a.events
			s.SetBacklog(key(tn.name), tn.queued, tn.weight)
		}
		dispatch()
	}
	res.endMS = now
	return res
}

// simulateFIFO runs the same workload through one shared FIFO queue of
// batches (no tenant limits, no scheduler): the status quo the dispatcher
// replaces. Each arrival is split into batches of at most maxBatch events.
func simulateFIFO(cfg simConfig, maxBatch int64) map[string]*simTenant {
	tenants := map[string]*simTenant{}
	for _, tn := range cfg.tenants {
		tenants[tn.name] = &tn
	}
	arrivals := slices.Clone(cfg.arrivals)
	slices.SortStableFunc(arrivals, func(a, b simArrival) int { return int(a.at - b.at) })
	var queue []simArrival
	for _, a := range arrivals {
		for left := a.events; left > 0; left -= maxBatch {
			queue = append(queue, simArrival{at: a.at, tenant: a.tenant, events: min(left, maxBatch)})
		}
	}
	// Workers as a min-heap of the times they become free.
	free := make(completions, cfg.workers)
	for _, b := range queue {
		w := heap.Pop(&free).(completion)
		start := max(w.at, b.at)
		tn := tenants[b.tenant]
		tn.worstWait = max(tn.worstWait, start-b.at)
		tn.dispatched += b.events
		tn.batches++
		tn.lastDone = max(tn.lastDone, start+cfg.applyMS)
		heap.Push(&free, completion{at: start + cfg.applyMS})
	}
	return tenants
}

// TestSimWorkConserving: a lone tenant with slot limit 4 keeps 4 slots busy
// until its backlog is gone, with a pool of exactly 4 workers or more, and
// with other tenants known but idle or blocked.
func TestSimWorkConserving(t *testing.T) {
	t.Parallel()
	const events, batch, apply = 100_000, 500, 20
	tests := []struct {
		name    string
		workers int
		blocked int // tenants with backlog, blocked throughout
	}{
		{name: "pool of 4", workers: 4},
		{name: "pool of 16", workers: 16},
		{name: "pool of 4, 1000 blocked tenants with backlog", workers: 4, blocked: 1000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := simConfig{
				workers:  tc.workers,
				applyMS:  apply,
				tenants:  []simTenant{{name: "lone", weight: 1, limit: 4}},
				arrivals: []simArrival{{at: 0, tenant: "lone", events: events}},
			}
			for i := range tc.blocked {
				name := fmt.Sprintf("blocked%04d", i)
				cfg.tenants = append(cfg.tenants, simTenant{name: name, weight: 1, limit: 0})
				cfg.arrivals = append(cfg.arrivals, simArrival{at: 0, tenant: name, events: 1000})
			}
			res := simulateFair(t, cfg)
			lone := res.tenants["lone"]
			if lone.dispatched != events {
				t.Fatalf("dispatched %d events, want %d", lone.dispatched, events)
			}
			// 200 batches, 4 at a time, 20 ms each: 50 waves.
			wantEnd := int64(events/batch/4) * apply
			if lone.lastDone != wantEnd {
				t.Errorf("backlog done at %dms, want %dms (4 slots always busy)", lone.lastDone, wantEnd)
			}
			for i, busy := range res.busyAfterDispatch {
				if i < len(res.busyAfterDispatch)-1 && busy != 4 {
					t.Fatalf("dispatch phase %d: %d busy, want 4", i, busy)
				}
			}
		})
	}
}

// TestSimPoolShares: with a saturated pool the tenants' shares of dispatched
// events follow their weights, and a tenant held back by its own slot limit
// leaves its capacity to the others in proportion to their weights.
func TestSimPoolShares(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		limitA int
		want   map[string]float64
	}{
		{name: "limits do not bind", limitA: 100, want: map[string]float64{"a": 0.5, "b": 0.3, "c": 0.2}},
		// a holds 2 of 10 workers; b and c split the other 8 as 3:2.
		{name: "a capped at 2 slots", limitA: 2, want: map[string]float64{"a": 0.2, "b": 0.48, "c": 0.32}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := simConfig{
				workers: 10,
				applyMS: 20,
				horizon: 10_000,
				tenants: []simTenant{
					{name: "a", weight: 5, limit: tc.limitA},
					{name: "b", weight: 3, limit: 100},
					{name: "c", weight: 2, limit: 100},
				},
				arrivals: []simArrival{
					{at: 0, tenant: "a", events: 100_000_000},
					{at: 0, tenant: "b", events: 100_000_000},
					{at: 0, tenant: "c", events: 100_000_000},
				},
			}
			res := simulateFair(t, cfg)
			got := shares(map[string]int64{"a": res.tenants["a"].dispatched, "b": res.tenants["b"].dispatched, "c": res.tenants["c"].dispatched})
			t.Logf("shares of dispatched events: %v", fmtShares(got))
			checkShares(t, got, tc.want, 0.05)
		})
	}
}

// TestSimNoisyTenant: a noisy tenant with a 1M-event backlog and 100 small
// tenants with a trickle share a pool of 8 workers (20 ms per batch). The
// small tenants' worst wait under the scheduler must be far below their
// worst wait in a plain FIFO of the same workload.
func TestSimNoisyTenant(t *testing.T) {
	t.Parallel()
	const (
		workers  = 8
		applyMS  = 20
		small    = 100
		periodMS = 500 // each small tenant gets a few events every 500 ms
		untilMS  = 4000
	)
	tests := []struct {
		name       string
		noisyLimit int
	}{
		{name: "noisy may use the whole pool", noisyLimit: workers},
		{name: "noisy limited to half the pool", noisyLimit: workers / 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := simConfig{
				workers:  workers,
				applyMS:  applyMS,
				tenants:  []simTenant{{name: "noisy", weight: 1, limit: tc.noisyLimit}},
				arrivals: []simArrival{{at: 0, tenant: "noisy", events: 1_000_000}},
			}
			for i := range small {
				name := fmt.Sprintf("small%03d", i)
				cfg.tenants = append(cfg.tenants, simTenant{name: name, weight: 1, limit: 2})
				for at := int64(i * 5); at < untilMS; at += periodMS {
					cfg.arrivals = append(cfg.arrivals, simArrival{at: at, tenant: name, events: 5})
				}
			}
			fair := simulateFair(t, cfg).tenants
			fifo := simulateFIFO(cfg, scheduler.MaxBatchDefault)

			worst := func(ts map[string]*simTenant) (wait int64) {
				for name, tn := range ts {
					if name != "noisy" {
						wait = max(wait, tn.worstWait)
					}
				}
				return wait
			}
			end := func(ts map[string]*simTenant) (at int64) {
				for _, tn := range ts {
					at = max(at, tn.lastDone)
				}
				return at
			}
			fairWait, fifoWait := worst(fair), worst(fifo)
			t.Logf("small tenants' worst wait: fair %d ms, FIFO %d ms; noisy backlog done at: fair %d ms, FIFO %d ms; all work done at: fair %d ms, FIFO %d ms",
				fairWait, fifoWait, fair["noisy"].lastDone, fifo["noisy"].lastDone, end(fair), end(fifo))
			for name, tn := range fair {
				if want := fifo[name].dispatched; tn.dispatched != want {
					t.Fatalf("%s: fair dispatched %d events, FIFO %d", name, tn.dispatched, want)
				}
			}
			if fairWait*10 > fifoWait {
				t.Errorf("fair worst wait %d ms is not ≪ FIFO %d ms", fairWait, fifoWait)
			}
			// One round: at most one noisy batch and one batch of every
			// other small tenant, spread over the pool, plus one apply
			// time for a worker to come free.
			if bound := int64((1+small)/workers+2) * applyMS; fairWait > bound {
				t.Errorf("fair worst wait %d ms exceeds one round (%d ms)", fairWait, bound)
			}
		})
	}
}

// TestSimSparseFlows: N flooding tenants of weights 1, 2 and 4, backlogged
// throughout, saturate a pool of workers, and 100 small tenants send a few
// events now and then, in episodes of three sends 100-300 ms apart (within
// one round at N = 200, across several at N = 20). Every small event is
// dispatched within a few grants of its arrival, not after the floods'
// round, and the floods share the pool by their weights.
func TestSimSparseFlows(t *testing.T) {
	t.Parallel()
	const (
		workers   = 8
		applyMS   = 20
		horizonMS = 60_000
		sparse    = 100
		episodes  = 2 // per small tenant
		sends     = 3 // per episode
		// maxWaitGrants bounds a small event's wait: the small tenants
		// ahead of it in the new-flows list, a few at most at these rates
		// (about 10 sends a second against 400 grants).
		maxWaitGrants = 3
	)
	for _, n := range []int{20, 200} {
		t.Run(fmt.Sprintf("%d floods", n), func(t *testing.T) {
			t.Parallel()
			cfg := simConfig{workers: workers, applyMS: applyMS, horizon: horizonMS}
			var weights int64
			for i := range n {
				name := fmt.Sprintf("flood%03d", i)
				cfg.tenants = append(cfg.tenants, simTenant{name: name, weight: floodWeight(i), limit: workers})
				cfg.arrivals = append(cfg.arrivals, simArrival{at: 0, tenant: name, events: unbounded})
				weights += int64(floodWeight(i))
			}
			// With cost = events = Quantum = MaxBatch, a round is one grant
			// per weight unit.
			roundMS := weights * applyMS / workers
			r := rand.New(rand.NewPCG(uint64(n), 7))
			for i := range sparse {
				name := fmt.Sprintf("small%03d", i)
				cfg.tenants = append(cfg.tenants, simTenant{name: name, weight: 1, limit: 2})
				for range episodes {
					// After the floods' first round (they start as new
					// flows too), ending before the horizon.
					at := 2*roundMS + r.Int64N(horizonMS-2*roundMS-sends*300)
					for range sends {
						cfg.arrivals = append(cfg.arrivals, simArrival{at: at, tenant: name, events: 1 + r.Int64N(5)})
						at += 100 + r.Int64N(201)
					}
				}
			}
			res := simulateFair(t, cfg)

			var worstGrants, worstMS int64
			floods := map[string]int64{}
			want := map[string]float64{}
			for name, tn := range res.tenants {
				if tn.limit == 2 {
					if tn.queued > 0 {
						t.Errorf("%s: %d events never dispatched", name, tn.queued)
					}
					worstGrants = max(worstGrants, tn.worstWaitGrants)
					worstMS = max(worstMS, tn.worstWait)
					continue
				}
				floods[name] = tn.dispatched
				want[name] = float64(tn.weight) / float64(weights)
			}
			t.Logf("round %d ms (%d grants); small tenants' worst wait: %d grants, %d ms", roundMS, weights, worstGrants, worstMS)
			if worstGrants > maxWaitGrants {
				t.Errorf("a small event waited %d grants, want at most %d (a round is %d)", worstGrants, maxWaitGrants, weights)
			}
			// A worker comes free within one apply time.
			if worstMS > applyMS {
				t.Errorf("a small event waited %d ms, want at most %d", worstMS, applyMS)
			}
			checkShares(t, shares(floods), want, 0.05)
		})
	}
}
