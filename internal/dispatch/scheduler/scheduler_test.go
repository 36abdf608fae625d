package scheduler_test

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dispatch/scheduler"
)

func TestNewConfig(t *testing.T) {
	t.Parallel()

	t.Run("defaults", func(t *testing.T) {
		t.Parallel()
		d := &scheduler.Dampening{Threshold: 10}
		cfg := scheduler.Config{Dampening: d}.WithDefaults()
		if cfg.Quantum != scheduler.QuantumDefault || cfg.MaxBatch != scheduler.MaxBatchDefault || cfg.Clock == nil {
			t.Errorf("WithDefaults = %+v", cfg)
		}
		if cfg.Dampening.Window != scheduler.DampeningWindowDefault ||
			cfg.Dampening.Factor != scheduler.DampeningFactorDefault ||
			cfg.Dampening.MinWeight != scheduler.DampeningMinWeightDefault {
			t.Errorf("WithDefaults dampening = %+v", *cfg.Dampening)
		}
		if *d != (scheduler.Dampening{Threshold: 10}) {
			t.Errorf("WithDefaults modified the caller's Dampening: %+v", *d)
		}
	})

	tests := []struct {
		name    string
		cfg     scheduler.Config
		wantErr bool
	}{
		{name: "zero value", cfg: scheduler.Config{}},
		{name: "bytes quantum", cfg: scheduler.Config{Quantum: 256 << 10, MaxBatch: 1000}},
		{name: "dampening", cfg: scheduler.Config{Dampening: &scheduler.Dampening{Threshold: 1, Window: time.Second, Factor: 4, MinWeight: 1}}},
		{name: "negative quantum", cfg: scheduler.Config{Quantum: -1}, wantErr: true},
		{name: "quantum too large", cfg: scheduler.Config{Quantum: scheduler.QuantumMax + 1}, wantErr: true},
		{name: "negative batch", cfg: scheduler.Config{MaxBatch: -1}, wantErr: true},
		{name: "negative lone rounds", cfg: scheduler.Config{LoneRounds: -1}, wantErr: true},
		{name: "dampening without threshold", cfg: scheduler.Config{Dampening: &scheduler.Dampening{}}, wantErr: true},
		{name: "dampening window too small", cfg: scheduler.Config{Dampening: &scheduler.Dampening{Threshold: 1, Window: time.Millisecond}}, wantErr: true},
		{name: "dampening factor below 1", cfg: scheduler.Config{Dampening: &scheduler.Dampening{Threshold: 1, Factor: 0.5}}, wantErr: true},
		{name: "dampening factor NaN", cfg: scheduler.Config{Dampening: &scheduler.Dampening{Threshold: 1, Factor: math.NaN()}}, wantErr: true},
		{name: "dampening min weight above 1", cfg: scheduler.Config{Dampening: &scheduler.Dampening{Threshold: 1, MinWeight: 2}}, wantErr: true},
		{name: "dampening min weight negative", cfg: scheduler.Config{Dampening: &scheduler.Dampening{Threshold: 1, MinWeight: -1}}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := scheduler.New(tc.cfg)
			if tc.wantErr != (err != nil) {
				t.Fatalf("New: err = %v, want error: %v", err, tc.wantErr)
			}
			if err != nil && !errors.Is(err, scheduler.ErrInvalidConfig) {
				t.Errorf("New: %v does not wrap ErrInvalidConfig", err)
			}
		})
	}
}

// TestWeightedShares: three tenants with weights 5/3/2, unbounded backlog and
// every grant used (the pool is saturated), are charged 50/30/20 ±5% of the
// cost over a fixed number of grants, whatever the cost unit and sizes.
func TestWeightedShares(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		cfg    scheduler.Config
		cost   map[string]func(int64) int64
		grants int
	}{
		{name: "events, defaults", grants: 1000},
		{name: "events, quantum below batch", cfg: scheduler.Config{Quantum: 100, MaxBatch: 500}, grants: 1000},
		{name: "events, quantum not a multiple of batch", cfg: scheduler.Config{Quantum: 300, MaxBatch: 128}, grants: 3000},
		{
			name:   "bytes, sizes vary per event and per tenant",
			cfg:    scheduler.Config{Quantum: 64 << 10, MaxBatch: 500},
			cost:   map[string]func(int64) int64{"a": costRange(100, 1100), "b": costRange(1000, 5000), "c": costRange(50, 150)},
			grants: 3000,
		},
		{
			name:   "bytes, events larger than the quantum (overdraft)",
			cfg:    scheduler.Config{Quantum: 1000, MaxBatch: 100},
			cost:   map[string]func(int64) int64{"a": costRange(200, 5000), "b": costRange(200, 5000), "c": costRange(10, 20)},
			grants: 6000,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := setup(t, tc.cfg)
			s.SetBacklog(key("a"), unbounded, 5)
			s.SetBacklog(key("b"), unbounded, 3)
			s.SetBacklog(key("c"), unbounded, 2)
			d := newSyncDispatcher(t, s)
			if tc.cost != nil {
				d.cost = tc.cost
			}
			d.run(tc.grants)
			got := shares(d.costs)
			t.Logf("cost shares over %d grants: %v", tc.grants, fmtShares(got))
			checkShares(t, got, map[string]float64{"a": 0.5, "b": 0.3, "c": 0.2}, 0.05)
		})
	}
}

// TestLateArrival: a tenant arriving with one event behind another tenant's
// huge backlog is granted before that tenant's next ⌈w·Quantum/MaxBatch⌉
// grants (⌈weight⌉ batches with the defaults), wherever in the noisy
// tenant's visit or round it arrives, and whether or not it was served
// earlier in the round.
func TestLateArrival(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		cfg      scheduler.Config
		weightA  int
		backlogA int64
	}{
		{name: "weight 1 behind 1M", weightA: 1, backlogA: 1_000_000},
		{name: "weight 3 behind 200k", weightA: 3, backlogA: 200_000},
		{name: "weight 5 behind 1M", weightA: 5, backlogA: 1_000_000},
		{name: "weight 4, quantum 2 batches", cfg: scheduler.Config{Quantum: 1000, MaxBatch: 500}, weightA: 4, backlogA: 1_000_000},
		{name: "weight 1 alone, 4 lone rounds", cfg: scheduler.Config{Quantum: 500, MaxBatch: 2000, LoneRounds: 4}, weightA: 1, backlogA: 1_000_000},
		{name: "weight 3, 4 lone rounds", cfg: scheduler.Config{Quantum: 500, MaxBatch: 2000, LoneRounds: 4}, weightA: 3, backlogA: 200_000},
	}
	for _, tc := range tests {
		cfg := tc.cfg.WithDefaults()
		bound := int(math.Ceil(float64(int64(tc.weightA)*cfg.Quantum) / float64(cfg.MaxBatch)))
		for _, servedBefore := range []bool{false, true} {
			for before := range 2*bound + 2 {
				name := fmt.Sprintf("%s/after %d grants/served before %v", tc.name, before, servedBefore)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					s := setup(t, tc.cfg)
					d := newSyncDispatcher(t, s)
					s.SetBacklog(key("a"), tc.backlogA, tc.weightA)
					if servedBefore {
						s.SetBacklog(key("b"), 1, 1)
						for d.events["b"] == 0 {
							d.run(1)
						}
					}
					d.run(before)
					s.SetBacklog(key("b"), 1, 1)
					var aGrants int
					for {
						g, _ := d.step()
						if g.Key.Tenant == "b" {
							break
						}
						aGrants++
						if aGrants > bound {
							t.Fatalf("b waited for more than %d of a's grants", bound)
						}
					}
					if got := d.events["a"]; got > tc.backlogA {
						t.Fatalf("a dispatched %d > backlog %d", got, tc.backlogA)
					}
				})
			}
		}
	}
}

// TestManyTenantsOneRound: with 10,000 active tenants every one is granted
// once per round, a tenant arriving mid-round is granted before anyone's
// next grant, and Next never examines a key it does not grant.
func TestManyTenantsOneRound(t *testing.T) {
	t.Parallel()
	const n = 10_000
	s := setup(t, scheduler.Config{})
	for i := range n {
		s.SetBacklog(key(fmt.Sprintf("t%05d", i)), unbounded, 1)
	}
	d := newSyncDispatcher(t, s)
	d.run(n)
	if len(d.events) != n {
		t.Fatalf("first round granted %d distinct tenants, want %d", len(d.events), n)
	}
	for tenant, ev := range d.events {
		if ev != scheduler.QuantumDefault {
			t.Fatalf("tenant %s got %d events in round 1, want %d", tenant, ev, scheduler.QuantumDefault)
		}
	}

	d.run(n / 2) // half way through round 2
	s.SetBacklog(key("late"), 1, 1)
	seen := map[string]bool{}
	for {
		g, _ := d.step()
		if g.Key.Tenant == "late" {
			break
		}
		if seen[g.Key.Tenant] {
			t.Fatalf("tenant %s granted twice before the late tenant", g.Key.Tenant)
		}
		seen[g.Key.Tenant] = true
	}
	st := s.Stats()
	if st.Scans != st.Grants {
		t.Errorf("Stats: %d scans for %d grants, want one scan per grant", st.Scans, st.Grants)
	}
	if st.Active != n {
		t.Errorf("Stats.Active = %d, want %d", st.Active, n)
	}
}

func TestBlocked(t *testing.T) {
	t.Parallel()

	t.Run("skipped and charged nothing, rejoins within one round", func(t *testing.T) {
		t.Parallel()
		s := setup(t, scheduler.Config{})
		for _, tn := range []string{"a", "b", "c"} {
			s.SetBacklog(key(tn), unbounded, 1)
		}
		s.SetBlocked(key("b"), true)
		d := newSyncDispatcher(t, s)
		d.run(30)
		if d.events["b"] != 0 {
			t.Fatalf("blocked tenant b was granted %d events", d.events["b"])
		}
		if st := s.Stats(); st.Blocked != 1 || st.Active != 2 {
			t.Errorf("Stats = %+v, want Blocked 1, Active 2", st)
		}
		s.SetBlocked(key("b"), false)
		g1, _ := d.step()
		g2, _ := d.step()
		if g1.Key.Tenant != "b" && g2.Key.Tenant != "b" {
			t.Fatalf("unblocked b not granted within one round: got %s, %s", g1.Key.Tenant, g2.Key.Tenant)
		}
		if d.events["b"] != scheduler.QuantumDefault {
			t.Errorf("b got %d events on rejoin, want one quantum (%d)", d.events["b"], scheduler.QuantumDefault)
		}
	})

	t.Run("all blocked: nothing dispatchable", func(t *testing.T) {
		t.Parallel()
		s := setup(t, scheduler.Config{})
		s.SetBacklog(key("a"), 10, 1)
		s.SetBlocked(key("a"), true)
		if g, ok := s.Next(); ok {
			t.Fatalf("Next = %+v, want nothing", g)
		}
		s.SetBlocked(key("a"), false)
		if _, ok := s.Next(); !ok {
			t.Fatal("Next after unblock: nothing")
		}
	})

	t.Run("keeps its place and remaining credit within the round", func(t *testing.T) {
		t.Parallel()
		// Quantum of two batches: a visit is two grants.
		s := setup(t, scheduler.Config{Quantum: 1000, MaxBatch: 500})
		for _, tn := range []string{"a", "b", "c"} {
			s.SetBacklog(key(tn), unbounded, 1)
		}
		d := newSyncDispatcher(t, s)
		d.run(3) // a, a, b
		if got := d.order[2].Key.Tenant; got != "b" {
			t.Fatalf("grant 3 went to %s, want b", got)
		}
		s.SetBlocked(key("b"), true) // b blocked with 500 of its 1000 left
		g, _ := d.step()
		if g.Key.Tenant != "c" {
			t.Fatalf("grant 4 went to %s, want c", g.Key.Tenant)
		}
		s.SetBlocked(key("b"), false)
		d.run(1) // c's second batch
		g, _ = d.step()
		if g.Key.Tenant != "b" || g.MaxCost != 500 {
			t.Fatalf("after unblock got %+v, want b with its remaining 500", g)
		}
		g, _ = d.step()
		if g.Key.Tenant != "a" {
			t.Fatalf("round 2 starts with %s, want a", g.Key.Tenant)
		}
		if d.events["b"] != 1000 {
			t.Errorf("b got %d events in round 1, want exactly one quantum (1000)", d.events["b"])
		}
	})

	t.Run("accumulates no credit while blocked", func(t *testing.T) {
		t.Parallel()
		s := setup(t, scheduler.Config{Quantum: 1000, MaxBatch: 500})
		s.SetBacklog(key("a"), unbounded, 1)
		s.SetBacklog(key("b"), unbounded, 1)
		d := newSyncDispatcher(t, s)
		d.run(3) // a, a, b: b has 500 left
		s.SetBlocked(key("b"), true)
		d.run(100) // fifty rounds of a alone
		s.SetBlocked(key("b"), false)
		for {
			g, _ := d.step()
			if g.Key.Tenant == "b" {
				if g.MaxCost != 1000 {
					t.Fatalf("b rejoined with credit %d, want one quantum (1000)", g.MaxCost)
				}
				break
			}
		}
	})

	t.Run("skipping 9,999 blocked tenants costs nothing", func(t *testing.T) {
		t.Parallel()
		s := setup(t, scheduler.Config{})
		for i := range 9_999 {
			k := key(fmt.Sprintf("t%04d", i))
			s.SetBacklog(k, unbounded, 1)
			s.SetBlocked(k, true)
		}
		s.SetBacklog(key("free"), unbounded, 1)
		d := newSyncDispatcher(t, s)
		d.run(1000)
		if d.events["free"] != 1000*scheduler.QuantumDefault {
			t.Fatalf("free tenant got %d events, want every grant", d.events["free"])
		}
		if st := s.Stats(); st.Scans != st.Grants || st.Blocked != 9_999 {
			t.Errorf("Stats = %+v, want one scan per grant and 9999 blocked", st)
		}
	})
}

// TestBlockingGainsNoShare: a tenant that hits its slot limit after every
// grant and is released soon after gets no more than its weight's share,
// and no less.
func TestBlockingGainsNoShare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// releaseAfter is how many grants of other tenants pass before c's
		// slot is released; 0 releases it as soon as c's batch is handed off.
		releaseAfter int
	}{
		{name: "released at once", releaseAfter: 0},
		{name: "released after one other grant", releaseAfter: 1},
		{name: "released after two other grants", releaseAfter: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := setup(t, scheduler.Config{})
			for _, tn := range []string{"a", "b", "c"} {
				s.SetBacklog(key(tn), unbounded, 1)
			}
			d := newSyncDispatcher(t, s)
			pending := -1 // grants of others until c's release; -1 when c holds no slot
			d.afterGrant = func(g scheduler.Grant, _, _ int64) {
				if g.Key.Tenant == "c" {
					s.SetBlocked(key("c"), true) // limit 1: its one slot is taken
					pending = tc.releaseAfter
				} else if pending > 0 {
					pending--
				}
				if pending == 0 {
					s.SetBlocked(key("c"), false)
					pending = -1
				}
			}
			d.run(3000)
			got := shares(d.events)
			t.Logf("shares: %v", fmtShares(got))
			checkShares(t, got, map[string]float64{"a": 1.0 / 3, "b": 1.0 / 3, "c": 1.0 / 3}, 0.05)
		})
	}
}

// TestDampening: a tenant that dispatched more than Threshold events within
// Window earns its quantum at weight/Factor (never below MinWeight) while
// the window lasts, and its full weight once the window has passed.
func TestDampening(t *testing.T) {
	t.Parallel()
	const window = 10 * time.Second
	tests := []struct {
		name      string
		dampening *scheduler.Dampening
		wantA     float64 // a's share while dampened
	}{
		{name: "off", dampening: nil, wantA: 0.5},
		{name: "factor 2", dampening: &scheduler.Dampening{Threshold: 100_000, Window: window, Factor: 2}, wantA: 1.0 / 3},
		{name: "factor 4", dampening: &scheduler.Dampening{Threshold: 100_000, Window: window, Factor: 4}, wantA: 0.2},
		{name: "factor 100 floors at MinWeight 0.1", dampening: &scheduler.Dampening{Threshold: 100_000, Window: window, Factor: 100}, wantA: 0.1 / 1.1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := newFakeClock()
			s := setup(t, scheduler.Config{Dampening: tc.dampening, Clock: clock.Now})
			d := newSyncDispatcher(t, s)

			// a alone: a 200k-event burst, above the 100k threshold.
			s.SetBacklog(key("a"), unbounded, 1)
			d.run(400)

			// b arrives; a is dampened for the rest of the window.
			s.SetBacklog(key("b"), unbounded, 1)
			phase := func(name string, grants int, wantA float64) {
				t.Helper()
				d.events = map[string]int64{}
				d.run(grants)
				got := shares(d.events)
				t.Logf("%s: %v", name, fmtShares(got))
				checkShares(t, got, map[string]float64{"a": wantA, "b": 1 - wantA}, 0.05)
			}
			phase("inside the window", 200, tc.wantA)
			clock.Advance(window / 2)
			phase("half a window later", 200, tc.wantA)
			clock.Advance(window)
			phase("after the window", 200, 0.5)

			st := s.Stats()
			if (tc.dampening != nil) != (st.DampenedVisits > 0) {
				t.Errorf("Stats.DampenedVisits = %d with dampening %v", st.DampenedVisits, tc.dampening)
			}
		})
	}
}

func TestDone(t *testing.T) {
	t.Parallel()

	t.Run("without a grant", func(t *testing.T) {
		t.Parallel()
		s := setup(t, scheduler.Config{})
		if err := s.Done(key("nobody"), 1, 1); !errors.Is(err, scheduler.ErrNoGrant) {
			t.Errorf("Done unknown key: %v, want ErrNoGrant", err)
		}
		s.SetBacklog(key("a"), 10, 1)
		if err := s.Done(key("a"), 1, 1); !errors.Is(err, scheduler.ErrNoGrant) {
			t.Errorf("Done before Next: %v, want ErrNoGrant", err)
		}
		g, _ := s.Next()
		if err := s.Done(g.Key, 1, 1); err != nil {
			t.Fatalf("Done: %v", err)
		}
		if err := s.Done(g.Key, 1, 1); !errors.Is(err, scheduler.ErrNoGrant) {
			t.Errorf("second Done: %v, want ErrNoGrant", err)
		}
		g, _ = s.Next()
		s.Remove(g.Key)
		if err := s.Done(g.Key, 1, 1); !errors.Is(err, scheduler.ErrNoGrant) {
			t.Errorf("Done after Remove: %v, want ErrNoGrant", err)
		}
		if st := s.Stats(); st.Known != 0 || st.InFlight != 0 || st.Active != 0 {
			t.Errorf("Stats after Remove = %+v", st)
		}
	})

	t.Run("one grant per key at a time", func(t *testing.T) {
		t.Parallel()
		s := setup(t, scheduler.Config{})
		s.SetBacklog(key("a"), unbounded, 5)
		g, _ := s.Next()
		if g2, ok := s.Next(); ok {
			t.Fatalf("second Next while a's grant is out = %+v, want nothing", g2)
		}
		if st := s.Stats(); st.InFlight != 1 {
			t.Errorf("Stats.InFlight = %d, want 1", st.InFlight)
		}
		if err := s.Done(g.Key, 500, 500); err != nil {
			t.Fatal(err)
		}
		if g, ok := s.Next(); !ok || g.Key.Tenant != "a" || g.MaxCost != 2000 {
			t.Fatalf("Next after Done = %+v %v, want a continuing its visit with 2000 left", g, ok)
		}
	})

	t.Run("empty reads do not hold the round", func(t *testing.T) {
		t.Parallel()
		s := setup(t, scheduler.Config{})
		s.SetBacklog(key("a"), unbounded, 1)
		s.SetBacklog(key("b"), unbounded, 1)
		bGrants := 0
		for range 20 {
			g, _ := s.Next()
			var n int64
			if g.Key.Tenant == "b" {
				n = int64(g.MaxEvents)
				bGrants++
			}
			if err := s.Done(g.Key, n, n); err != nil {
				t.Fatal(err)
			}
		}
		if bGrants != 10 {
			t.Errorf("b got %d of 20 grants while a read nothing, want 10", bGrants)
		}
	})

	t.Run("slot taken by someone else keeps place and credit", func(t *testing.T) {
		t.Parallel()
		s := setup(t, scheduler.Config{})
		s.SetBacklog(key("a"), unbounded, 1)
		g, _ := s.Next()
		s.SetBlocked(g.Key, true)
		if err := s.Done(g.Key, 0, 0); err != nil {
			t.Fatal(err)
		}
		s.SetBlocked(g.Key, false)
		if g2, ok := s.Next(); !ok || g2 != g {
			t.Fatalf("Next after failed slot = %+v, want the same grant %+v", g2, g)
		}
	})
}

func TestBacklog(t *testing.T) {
	t.Parallel()

	t.Run("grants are bounded by backlog and MaxBatch", func(t *testing.T) {
		t.Parallel()
		s := setup(t, scheduler.Config{})
		s.SetBacklog(key("a"), 1200, 1)
		wantMax := []int{500, 500, 200}
		for i, want := range wantMax {
			g, ok := s.Next()
			if !ok || g.MaxEvents != want {
				t.Fatalf("grant %d = %+v, want MaxEvents %d", i, g, want)
			}
			if err := s.Done(g.Key, int64(g.MaxEvents), int64(g.MaxEvents)); err != nil {
				t.Fatal(err)
			}
		}
		if g, ok := s.Next(); ok {
			t.Fatalf("drained tenant granted %+v", g)
		}
		if st := s.Stats(); st.Active != 0 || st.Known != 1 {
			t.Errorf("Stats = %+v, want idle and known", st)
		}
	})

	t.Run("partial batch leaves credit", func(t *testing.T) {
		t.Parallel()
		s := setup(t, scheduler.Config{})
		s.SetBacklog(key("a"), 1000, 1)
		g, _ := s.Next()
		if err := s.Done(g.Key, 300, 300); err != nil {
			t.Fatal(err)
		}
		g, _ = s.Next()
		if g.MaxEvents != 500 || g.MaxCost != 200 {
			t.Fatalf("grant after partial batch = %+v, want MaxEvents 500, MaxCost 200", g)
		}
	})

	t.Run("zero backlog leaves the round", func(t *testing.T) {
		t.Parallel()
		s := setup(t, scheduler.Config{})
		s.SetBacklog(key("a"), 10, 1)
		s.SetBacklog(key("a"), 0, 1)
		s.SetBacklog(key("never"), 0, 1)
		if g, ok := s.Next(); ok {
			t.Fatalf("Next = %+v, want nothing", g)
		}
		if st := s.Stats(); st.Known != 1 {
			t.Errorf("Stats.Known = %d, want 1 (zero backlog for an unknown key creates nothing)", st.Known)
		}
	})

	t.Run("weights are clamped", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			weight   int
			wantCost int64
		}{
			{weight: -3, wantCost: scheduler.QuantumDefault},
			{weight: 0, wantCost: scheduler.QuantumDefault},
			{weight: 7, wantCost: 7 * scheduler.QuantumDefault},
			{weight: 1 << 30, wantCost: scheduler.WeightMax * scheduler.QuantumDefault},
		}
		for _, tc := range tests {
			s := setup(t, scheduler.Config{})
			s.SetBacklog(key("a"), unbounded, tc.weight)
			if g, _ := s.Next(); g.MaxCost != tc.wantCost {
				t.Errorf("weight %d: MaxCost %d, want %d", tc.weight, g.MaxCost, tc.wantCost)
			}
		}
	})
}

func TestGrantAllows(t *testing.T) {
	t.Parallel()
	g := scheduler.Grant{MaxEvents: 3, MaxCost: 100}
	tests := []struct {
		taken       int
		spent, next int64
		want        bool
	}{
		{taken: 0, spent: 0, next: 1000, want: true}, // always one event
		{taken: 1, spent: 50, next: 50, want: true},
		{taken: 1, spent: 50, next: 51, want: false},
		{taken: 2, spent: 2, next: 1, want: true},
		{taken: 3, spent: 3, next: 1, want: false}, // MaxEvents
	}
	for _, tc := range tests {
		if got := g.Allows(tc.taken, tc.spent, tc.next); got != tc.want {
			t.Errorf("Allows(%d, %d, %d) = %v, want %v", tc.taken, tc.spent, tc.next, got, tc.want)
		}
	}
}

// TestConcurrentUse: several dispatcher goroutines share one Scheduler (run
// with -race). A key never has two grants out at once, and every event of a
// finite backlog is dispatched exactly once.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	const tenants, perTenant, workers = 50, 10_000, 4
	s := setup(t, scheduler.Config{MaxBatch: 100})
	for i := range tenants {
		s.SetBacklog(key(fmt.Sprintf("t%02d", i)), perTenant, 1+i%3)
	}
	var (
		mu       sync.Mutex
		out      = map[scheduler.Key]bool{}
		total    int64
		wg       sync.WaitGroup
		failures = make(chan string, workers)
	)
	for range workers {
		wg.Go(func() {
			for {
				g, ok := s.Next()
				if !ok {
					if st := s.Stats(); st.Active == 0 && st.InFlight == 0 {
						return
					}
					runtime.Gosched() // another worker holds the last grants
					continue
				}
				mu.Lock()
				if out[g.Key] {
					mu.Unlock()
					failures <- fmt.Sprintf("two grants out for %v", g.Key)
					return
				}
				out[g.Key] = true
				total += int64(g.MaxEvents)
				mu.Unlock()
				s.SetBlocked(g.Key, true)
				s.SetBlocked(g.Key, false)
				mu.Lock()
				out[g.Key] = false
				mu.Unlock()
				if err := s.Done(g.Key, int64(g.MaxEvents), int64(g.MaxEvents)); err != nil {
					failures <- err.Error()
					return
				}
			}
		})
	}
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Error(f)
	}
	if total != tenants*perTenant {
		t.Errorf("dispatched %d events, want %d", total, tenants*perTenant)
	}
}

// TestLoneRounds: a key alone when its visit begins gets up to LoneRounds
// quanta (within MaxBatch) in one grant; with another key listed or
// granted it gets one quantum, and a key arriving during a lone grant is
// served before the lone key's next grant.
func TestLoneRounds(t *testing.T) {
	t.Parallel()
	cfg := scheduler.Config{Quantum: 500, MaxBatch: 2000, LoneRounds: 4}
	grant := func(t *testing.T, s *scheduler.Scheduler) scheduler.Grant {
		t.Helper()
		g, ok := s.Next()
		if !ok {
			t.Fatal("no grant")
		}
		return g
	}

	t.Run("alone", func(t *testing.T) {
		t.Parallel()
		s := setup(t, cfg)
		s.SetBacklog(key("a"), unbounded, 1)
		if g := grant(t, s); g.MaxEvents != 2000 || g.MaxCost != 2000 {
			t.Fatalf("lone grant %+v, want 2000 events and credit", g)
		}
		if st := s.Stats(); st.Round != 4 || st.LoneRounds != 3 {
			t.Fatalf("stats %+v, want round 4 and 3 lone rounds", st)
		}
		// b arrives during a's grant: it is served first.
		s.SetBacklog(key("b"), 1, 1)
		if err := s.Done(key("a"), 2000, 2000); err != nil {
			t.Fatal(err)
		}
		if g := grant(t, s); g.Key.Tenant != "b" {
			t.Fatalf("granted %s, want b (arrived during a's lone grant)", g.Key.Tenant)
		}
		// b is in flight: a is not alone and gets one quantum.
		if g := grant(t, s); g.Key.Tenant != "a" || g.MaxCost != 500 {
			t.Fatalf("grant %+v, want a with one quantum", g)
		}
	})

	t.Run("weight fills the batch", func(t *testing.T) {
		t.Parallel()
		s := setup(t, cfg)
		s.SetBacklog(key("a"), unbounded, 3)
		if g := grant(t, s); g.MaxCost != 1500 {
			t.Fatalf("grant %+v, want credit 1500 (a second round would exceed MaxBatch)", g)
		}
	})

	t.Run("not alone", func(t *testing.T) {
		t.Parallel()
		s := setup(t, cfg)
		s.SetBacklog(key("a"), unbounded, 1)
		s.SetBacklog(key("b"), unbounded, 1)
		for range 10 {
			g := grant(t, s)
			if g.MaxCost != 500 {
				t.Fatalf("grant %+v with another key listed, want one quantum", g)
			}
			if err := s.Done(g.Key, 500, 500); err != nil {
				t.Fatal(err)
			}
		}
		if st := s.Stats(); st.LoneRounds != 0 {
			t.Fatalf("%d lone rounds with two busy keys", st.LoneRounds)
		}
	})

	t.Run("off by default", func(t *testing.T) {
		t.Parallel()
		s := setup(t, scheduler.Config{Quantum: 500, MaxBatch: 2000})
		s.SetBacklog(key("a"), unbounded, 1)
		if g := grant(t, s); g.MaxCost != 500 {
			t.Fatalf("grant %+v, want one quantum without LoneRounds", g)
		}
	})
}

// A parked key (another dispatcher grants it) is never granted; parking and
// blocking are independent, and a key comes back only when it is neither.
func TestParked(t *testing.T) {
	t.Parallel()
	s := setup(t, scheduler.Config{})
	for _, tn := range []string{"a", "b", "c"} {
		s.SetBacklog(key(tn), unbounded, 1)
	}
	s.SetParked(key("b"), true)
	s.SetParked(key("z"), true) // before any backlog: stays parked
	s.SetBacklog(key("z"), unbounded, 1)
	d := newSyncDispatcher(t, s)
	d.run(30)
	if d.events["b"] != 0 || d.events["z"] != 0 {
		t.Fatalf("parked keys granted: b %d, z %d events", d.events["b"], d.events["z"])
	}
	if st := s.Stats(); st.Parked != 2 || st.Active != 2 {
		t.Errorf("Stats = %+v, want Parked 2, Active 2", st)
	}
	s.SetBlocked(key("b"), true)
	s.SetParked(key("b"), false) // still blocked
	d.run(10)
	if d.events["b"] != 0 {
		t.Fatalf("a blocked key was granted once unparked: %d events", d.events["b"])
	}
	s.SetBlocked(key("b"), false)
	g1, _ := d.step()
	g2, _ := d.step()
	g3, _ := d.step()
	if g1.Key.Tenant != "b" && g2.Key.Tenant != "b" && g3.Key.Tenant != "b" {
		t.Fatalf("b neither parked nor blocked, not granted within one round: %s %s %s", g1.Key.Tenant, g2.Key.Tenant, g3.Key.Tenant)
	}
	s.Remove(key("z"))
	if st := s.Stats(); st.Parked != 0 || st.Blocked != 0 {
		t.Errorf("Stats after unpark/unblock/remove = %+v, want none parked or blocked", st)
	}
}

// TestNewFlowFirst: a key that becomes active with credit for the round is
// the very next grant, ahead of every backlogged key's next grant, wherever
// the round is and whatever the backlogged keys' number and weights; its
// credit is a fresh quantum, or what it has left of this round's. A key in
// debt joins the tail of the round in progress instead, and one that spent
// this round's quantum the tail of the next: going idle and active again
// earns nothing.
func TestNewFlowFirst(t *testing.T) {
	t.Parallel()
	const weightX = 2
	configs := []struct {
		name string
		cfg  scheduler.Config
	}{
		{name: "defaults"},
		{name: "quantum of two batches", cfg: scheduler.Config{Quantum: 1000, MaxBatch: 500}},
		{name: "4 lone rounds", cfg: scheduler.Config{Quantum: 500, MaxBatch: 2000, LoneRounds: 4}},
	}
	type env struct {
		s       *scheduler.Scheduler
		d       *syncDispatcher
		round   int   // grants in a round of the backlogged keys
		quantum int64 // x's quantum: weightX·Quantum
	}
	tests := []struct {
		name string
		// prepare brings x, idle, to the state the case is about, and
		// returns what makes it active.
		prepare func(t *testing.T, e env) (activate func())
		// credit is x's grant's MaxCost when it is the next grant; nil
		// when it waits: waits is then the number of grants before x's,
		// given p, the position in the floods' round (grants in a round,
		// left in the current one, and had by a flood in mid-visit).
		credit func(quantum int64) int64
		waits  func(p roundPos) int
	}{
		{
			name:    "unknown",
			prepare: func(*testing.T, env) func() { return func() {} },
			credit:  func(q int64) int64 { return q },
		},
		{
			name: "served one event this round",
			prepare: func(t *testing.T, e env) func() {
				serveX(t, e.s, e.d, 1)
				return func() {}
			},
			credit: func(q int64) int64 { return q - 1 },
		},
		{
			name: "served one event a round ago",
			prepare: func(t *testing.T, e env) func() {
				serveX(t, e.s, e.d, 1)
				e.d.run(e.round + 1) // not at a round's end, where any key is next
				return func() {}
			},
			credit: func(q int64) int64 { return q },
		},
		{
			name: "became active while blocked",
			prepare: func(_ *testing.T, e env) func() {
				e.s.SetBlocked(key("x"), true)
				e.s.SetBacklog(key("x"), 1, weightX)
				e.d.run(3)
				return func() { e.s.SetBlocked(key("x"), false) }
			},
			credit: func(q int64) int64 { return q },
		},
		{
			name: "blocked while waiting as a new flow",
			prepare: func(_ *testing.T, e env) func() {
				e.s.SetBacklog(key("x"), 1, weightX)
				e.s.SetBlocked(key("x"), true)
				e.d.run(3)
				return func() { e.s.SetBlocked(key("x"), false) }
			},
			credit: func(q int64) int64 { return q },
		},
		{
			// The dispatcher's failed slot: SetBlocked, then Done(k, 0, 0).
			name: "slot taken when granted as a new flow",
			prepare: func(t *testing.T, e env) func() {
				e.s.SetBacklog(key("x"), 1, weightX)
				g, ok := e.s.Next()
				if !ok || g.Key.Tenant != "x" {
					t.Fatalf("x not granted at once as a new flow: %+v", g)
				}
				e.s.SetBlocked(key("x"), true)
				if err := e.s.Done(key("x"), 0, 0); err != nil {
					t.Fatal(err)
				}
				return func() { e.s.SetBlocked(key("x"), false) }
			},
			credit: func(q int64) int64 { return q },
		},
		{
			// A small tenant at its one slot: the slot is freed after the
			// round has moved on. Its next event is still a sparse
			// flow's, served first with the new round's quantum.
			name: "slot taken when granted as a new flow, freed a round later",
			prepare: func(t *testing.T, e env) func() {
				e.s.SetBacklog(key("x"), 1, weightX)
				if g, ok := e.s.Next(); !ok || g.Key.Tenant != "x" {
					t.Fatalf("x not granted at once as a new flow: %+v", g)
				}
				e.s.SetBlocked(key("x"), true)
				if err := e.s.Done(key("x"), 0, 0); err != nil {
					t.Fatal(err)
				}
				e.d.run(e.round + 1)
				return func() { e.s.SetBlocked(key("x"), false) }
			},
			credit: func(q int64) int64 { return q },
		},
		{
			name: "spent this round's quantum",
			prepare: func(t *testing.T, e env) func() {
				serveX(t, e.s, e.d, e.quantum)
				return func() {}
			},
			// The next round's tail: behind the floods that ended their
			// visit this round, ahead of those still to end it.
			waits: func(p roundPos) int { return p.grants - p.inVisit },
		},
		{
			name: "in debt of half its quantum, a round later",
			prepare: func(t *testing.T, e env) func() {
				e.d.cost["x"] = func(int64) int64 { return e.quantum * 3 / 2 }
				serveX(t, e.s, e.d, 1)
				e.d.run(e.round)
				return func() {}
			},
			waits: func(p roundPos) int { return p.left },
		},
	}
	for _, c := range configs {
		cfg := c.cfg.WithDefaults()
		for _, n := range []int{1, 20, 200} {
			var visits []int // grants per flood visit, in round order
			round := 0
			for i := range n {
				v := int((int64(floodWeight(i))*cfg.Quantum + int64(cfg.MaxBatch) - 1) / int64(cfg.MaxBatch))
				visits = append(visits, v)
				round += v
			}
			for _, tc := range tests {
				positions := []int{0, 1, 2, round / 2}
				slices.Sort(positions)
				for _, after := range slices.Compact(positions) {
					name := fmt.Sprintf("%s/%d backlogged/%s/after %d grants", c.name, n, tc.name, after)
					t.Run(name, func(t *testing.T) {
						t.Parallel()
						s := setup(t, c.cfg)
						for i := range n {
							s.SetBacklog(key(fmt.Sprintf("flood%03d", i)), unbounded, floodWeight(i))
						}
						d := newSyncDispatcher(t, s)
						d.run(round) // every flood has had its first visit
						d.run(after)
						activate := tc.prepare(t, env{s: s, d: d, round: round, quantum: weightX * cfg.Quantum})
						pos := floodsAt(t, d.order, visits)
						activate()
						s.SetBacklog(key("x"), 1, weightX)
						grantsBefore := len(d.order)
						g, ok := d.step()
						if !ok {
							t.Fatal("Next: nothing dispatchable")
						}
						if tc.credit == nil {
							want := tc.waits(pos)
							for waited := 0; g.Key.Tenant != "x"; waited++ {
								if waited == want {
									t.Fatalf("x not granted after %d grants, want its turn in the rounds after %d", waited+1, want)
								}
								g, _ = d.step()
							}
							if got := len(d.order) - 1 - grantsBefore; got != want {
								t.Fatalf("x granted after %d grants, want its turn in the rounds after %d", got, want)
							}
							return
						}
						if g.Key.Tenant != "x" {
							t.Fatalf("next grant went to %s, want the newly active x", g.Key.Tenant)
						}
						if want := tc.credit(weightX * cfg.Quantum); g.MaxCost != want {
							t.Errorf("x granted credit %d, want %d", g.MaxCost, want)
						}
					})
				}
			}
		}
	}
}

// roundPos is a position in a round of backlogged keys whose grants repeat
// every round.
type roundPos struct {
	grants  int // grants in a round
	left    int // grants left in the current round
	inVisit int // grants had by the key in mid-visit (0: at a visit's start)
}

// floodsAt returns the floods' position in their round after the grants in
// order: visits[i] is the grants of flood i's visit ("flood%03d"), and
// grants to other keys are skipped. The round's order is the order of the
// floods' first visits (the new-flows list's, lightest first), which every
// later round repeats.
func floodsAt(t *testing.T, order []scheduler.Grant, visits []int) roundPos {
	t.Helper()
	p := roundPos{}
	for _, v := range visits {
		p.grants += v
	}
	last, run := -1, 0 // the latest flood granted, and its grants in a row
	for i := len(order) - 1; i >= 0; i-- {
		var f int
		if _, err := fmt.Sscanf(order[i].Key.Tenant, "flood%03d", &f); err != nil {
			continue
		}
		if last >= 0 && f != last {
			break
		}
		last = f
		run++
	}
	if last < 0 {
		t.Fatal("no flood granted yet")
	}
	p.inVisit = run % visits[last]
	into := p.inVisit
	for _, f := range floodRing(t, order, len(visits)) {
		into += visits[f]
		if f == last {
			break
		}
	}
	if p.inVisit > 0 {
		into -= visits[last]
	}
	p.left = (p.grants - into) % p.grants
	return p
}

// floodRing returns the floods' indexes in the order of their first grants
// in order, every one of the n floods once.
func floodRing(t *testing.T, order []scheduler.Grant, n int) []int {
	t.Helper()
	seen := map[int]bool{}
	var ring []int
	for _, g := range order {
		var f int
		if _, err := fmt.Sscanf(g.Key.Tenant, "flood%03d", &f); err != nil || seen[f] {
			continue
		}
		seen[f] = true
		ring = append(ring, f)
	}
	if len(ring) != n {
		t.Fatalf("%d of %d floods granted", len(ring), n)
	}
	return ring
}

// floodWeight is the weight of the i-th backlogged key in tests with many:
// groups of weight 1, 2 and 4.
func floodWeight(i int) int { return 1 << (i % 3) }

// serveX gives key x (weight 2) a backlog of events and runs grants until
// x has read them all, so that x ends idle.
func serveX(t *testing.T, s *scheduler.Scheduler, d *syncDispatcher, events int64) {
	t.Helper()
	want := d.events["x"] + events
	s.SetBacklog(key("x"), events, 2)
	for d.events["x"] < want {
		if _, ok := d.step(); !ok {
			t.Fatal("Next: nothing dispatchable")
		}
	}
}

// TestNewFlowsGainNoShare: a key that empties and becomes active again,
// over and over, gets no more than its weight's share against keys that
// are backlogged throughout, however soon it comes back and whatever it
// brings, and the others keep their shares. A new flow is served first only
// from its credit for the round, so it cannot take a quantum per return.
func TestNewFlowsGainNoShare(t *testing.T) {
	t.Parallel()
	costCases := []struct {
		name  string
		cfg   scheduler.Config
		cost  map[string]func(int64) int64
		sizes []int64 // events g brings back each time
	}{
		{name: "events", sizes: []int64{1, 250, 500, 1000, 1500}},
		{name: "events, quantum of two batches", cfg: scheduler.Config{Quantum: 1000, MaxBatch: 500}, sizes: []int64{1, 500, 1000, 2000, 3000}},
		{
			// g's events each cost more than its quantum (2000): every
			// return ends in an overdraft.
			name: "bytes, overdraft",
			cfg:  scheduler.Config{Quantum: 1000, MaxBatch: 100},
			cost: map[string]func(int64) int64{
				"a": costRange(10, 30), "b": costRange(10, 30), "c": costRange(10, 30), "g": costRange(2500, 4000),
			},
			sizes: []int64{1, 2, 4},
		},
	}
	for _, cc := range costCases {
		for _, size := range cc.sizes {
			for _, gap := range []int{0, 1, 3} {
				name := fmt.Sprintf("%s/returns with %d events/after %d other grants", cc.name, size, gap)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					s := setup(t, cc.cfg)
					s.SetBacklog(key("a"), unbounded, 1)
					s.SetBacklog(key("b"), unbounded, 2)
					s.SetBacklog(key("c"), unbounded, 4)
					s.SetBacklog(key("g"), size, 2)
					d := newSyncDispatcher(t, s)
					if cc.cost != nil {
						d.cost = cc.cost
					}
					left, wait := size, -1 // wait: other grants until g returns; -1 while g has backlog
					returns := 0
					d.afterGrant = func(g scheduler.Grant, events, _ int64) {
						if g.Key.Tenant == "g" {
							if left -= events; left == 0 {
								wait = gap
							}
						} else if wait > 0 {
							wait--
						}
						if wait == 0 {
							s.SetBacklog(key("g"), size, 2)
							left, wait = size, -1
							returns++
						}
					}
					d.run(6000)
					got := shares(d.costs)
					t.Logf("cost shares over 6000 grants, g back %d times: %v", returns, fmtShares(got))
					if want := 2.0 / 9; got["g"] > want*1.05 {
						t.Errorf("g's share %.4f exceeds its weight's %.4f +5%%", got["g"], want)
					}
					floods := shares(map[string]int64{"a": d.costs["a"], "b": d.costs["b"], "c": d.costs["c"]})
					checkShares(t, floods, map[string]float64{"a": 1.0 / 7, "b": 2.0 / 7, "c": 4.0 / 7}, 0.05)
					if returns < 10 {
						t.Errorf("g came back %d times: the case does not exercise returns", returns)
					}
				})
			}
		}
	}
}

// When every tenant trickles in, each is a new flow at every return, and
// a round can outlast the whole flood. The new flows are then served
// lightest first: a tenant that has spent less of its quantum this round
// goes before those that have spent more, whenever it came back, so a
// small tenant does not wait behind a return of every trickling flood.
func TestNewFlowsLightestFirst(t *testing.T) {
	t.Parallel()
	const floods, returns, each = 200, 4, 25
	s := setup(t, scheduler.Config{})
	flood := func(i int) scheduler.Key { return key(fmt.Sprintf("f%03d", i)) }
	comeBack := func() {
		for i := range floods {
			s.SetBacklog(flood(i), each, 1<<(i%4)) // weights 1, 2, 4, 8: shares spent differ
		}
	}
	// Each flood comes back with 25 events, four times, each time
	// drained: 100 events spent, every one of its grants from the
	// new-flows list.
	for range returns {
		comeBack()
		for range floods {
			g, ok := s.Next()
			if !ok || g.MaxEvents != each {
				t.Fatalf("grant %+v, %v: want one of a flood's %d events", g, ok, each)
			}
			if err := s.Done(g.Key, each, each); err != nil {
				t.Fatal(err)
			}
		}
	}
	if st := s.Stats(); st.Round != 1 {
		t.Fatalf("round %d: the case wants the floods' returns within the first round", st.Round)
	}
	comeBack()
	s.SetBacklog(key("small"), 1, 1)
	var order []string
	for range floods + 1 {
		g, ok := s.Next()
		if !ok {
			t.Fatal("no grant with backlog waiting")
		}
		order = append(order, g.Key.Tenant)
		if err := s.Done(g.Key, int64(g.MaxEvents), int64(g.MaxEvents)); err != nil {
			t.Fatal(err)
		}
	}
	if order[0] != "small" {
		t.Fatalf("small granted after %d floods, want first (ahead of floods that spent %d events each)", slices.Index(order, "small"), returns*each)
	}
	// Among the floods, those of weight 8 spent the least of their
	// quanta and go first, those of weight 1 last.
	for i, tenant := range order[1:] {
		var n int
		if _, err := fmt.Sscanf(tenant, "f%03d", &n); err != nil {
			t.Fatal(err)
		}
		if got, want := 1<<(n%4), 8>>(i*4/floods); got != want {
			t.Fatalf("grant %d went to %s of weight %d, want weight %d", i+1, tenant, got, want)
		}
	}
}

// When many floods become active at once (a dispatcher's start, a sync
// storm), each of them would take a whole quantum at its first grant. A
// small tenant that has already had a few events this round comes back
// with a few more: it goes before every flood that has had nothing yet,
// since it will have spent less than they once each is served (the
// share after the grant orders the new flows, not the share before it).
func TestNewFlowsByShareAfterGrant(t *testing.T) {
	t.Parallel()
	const floods = 200
	s := setup(t, scheduler.Config{})
	s.SetBacklog(key("small"), 5, 1)
	g, ok := s.Next()
	if !ok || g.Key != key("small") {
		t.Fatalf("first grant %+v, %v: want small", g, ok)
	}
	if err := s.Done(g.Key, 5, 5); err != nil {
		t.Fatal(err)
	}
	for i := range floods {
		s.SetBacklog(key(fmt.Sprintf("f%03d", i)), 100_000, 1)
	}
	s.SetBacklog(key("small"), 3, 1)
	g, ok = s.Next()
	if !ok || g.Key != key("small") || g.MaxEvents != 3 {
		t.Fatalf("grant %+v, %v: want small's 3 events ahead of %d fresh floods", g, ok, floods)
	}
	// A flood that has just become active with a few events is as light.
	if err := s.Done(g.Key, 3, 3); err != nil {
		t.Fatal(err)
	}
	s.SetBacklog(key("trickle"), 2, 1)
	if g, ok = s.Next(); !ok || g.Key != key("trickle") {
		t.Fatalf("grant %+v, %v: want trickle's 2 events ahead of the fresh floods", g, ok)
	}
}

// A grant that dispatches fewer events than it allowed ends the visit: the
// tenant had less than its backlog hint said (its events trickle in), and
// at the head of its list it would take grant after grant of a few events
// while the others wait.
func TestShortGrantEndsVisit(t *testing.T) {
	t.Parallel()
	for _, full := range []bool{true, false} {
		t.Run(fmt.Sprintf("full %v", full), func(t *testing.T) {
			t.Parallel()
			s := setup(t, scheduler.Config{Quantum: 2000, MaxBatch: 500})
			s.SetBacklog(key("x"), 2000, 1)
			s.SetBacklog(key("y"), 2000, 1) // as heavy as x: after x in its tier
			g, ok := s.Next()
			if !ok || g.Key != key("x") || g.MaxEvents != 500 {
				t.Fatalf("first grant %+v, %v: want x, 500 events", g, ok)
			}
			n := int64(3)
			if full {
				n = 500
			}
			if err := s.Done(key("x"), n, n); err != nil {
				t.Fatal(err)
			}
			g, _ = s.Next()
			if want := map[bool]string{true: "x", false: "y"}[full]; g.Key.Tenant != want {
				t.Fatalf("after a grant of %d of 500 events, %s granted, want %s", n, g.Key.Tenant, want)
			}
		})
	}
}

// A flood and a small tenant that became active with one event each are
// equally light; once the flood's backlog has grown, it goes behind the
// small tenant still waiting with its one event, though it came first:
// by hundreds of events, or by one (a publisher spreading a sync storm
// over thousands of tenants gives each its second event a moment later).
func TestNewFlowGrowingMovesBack(t *testing.T) {
	t.Parallel()
	for _, grown := range []int64{2, 300} {
		t.Run(fmt.Sprintf("to %d", grown), func(t *testing.T) {
			t.Parallel()
			s := setup(t, scheduler.Config{})
			for i := range 3 {
				s.SetBacklog(key(fmt.Sprintf("f%d", i)), 1, 1)
			}
			s.SetBacklog(key("small"), 1, 1)
			for i := range 3 {
				s.SetBacklog(key(fmt.Sprintf("f%d", i)), grown, 1)
			}
			var order []string
			for range 4 {
				g, ok := s.Next()
				if !ok {
					t.Fatal("no grant with backlog waiting")
				}
				order = append(order, g.Key.Tenant)
			}
			if want := []string{"small", "f0", "f1", "f2"}; !slices.Equal(order, want) {
				t.Fatalf("granted %v, want %v", order, want)
			}
		})
	}
}
