package scheduler

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// checkInvariants verifies the invariants listed in doc.go against the
// scheduler's internal state.
func (s *Scheduler) checkInvariants(maxWeight int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, nxt := &s.lists[s.cur], &s.lists[1-s.cur]
	inList := map[*flow]*flowList{}
	all := []*flowList{cur, nxt}
	for i := range s.newFlows {
		all = append(all, &s.newFlows[i])
	}
	for _, l := range all {
		n := 0
		var prev *flow
		for f := l.head; f != nil; f = f.next {
			if f.list != l || f.prev != prev {
				return fmt.Errorf("flow %v: broken links", f.key)
			}
			if inList[f] != nil {
				return fmt.Errorf("flow %v: in a list twice", f.key)
			}
			inList[f] = l
			prev = f
			n++
		}
		if l.tail != prev || l.len != n {
			return fmt.Errorf("list len %d tail %v, walked %d", l.len, l.tail, n)
		}
	}
	var blocked, inFlight int
	for k, f := range s.flows {
		if f.key != k {
			return fmt.Errorf("flow %v under key %v", f.key, k)
		}
		if f.blocked {
			blocked++
		}
		if f.granted {
			inFlight++
		}
		if (inList[f] != nil) != f.eligible() {
			return fmt.Errorf("flow %v: in a list %v, eligible %v", k, inList[f] != nil, f.eligible())
		}
		if f.deficit > s.cfg.Quantum*int64(maxWeight) {
			return fmt.Errorf("flow %v: credit %d above one quantum", k, f.deficit)
		}
		if f.lastRound > s.round {
			return fmt.Errorf("flow %v: last quantum in round %d > %d", k, f.lastRound, s.round)
		}
		if inList[f] != nil && f.activated {
			return fmt.Errorf("flow %v: listed but still marked activated", k)
		}
		switch l := inList[f]; {
		case l == nil:
		case s.isNew(l):
			if f.lastRound == s.round && f.deficit <= 0 || f.deficit < 0 {
				return fmt.Errorf("flow %v: new flow without credit for round %d (last quantum in %d, credit %d)", k, s.round, f.lastRound, f.deficit)
			}
		case l == cur:
			if f.lastRound == s.round && f.deficit <= 0 {
				return fmt.Errorf("flow %v: visited this round without credit but still in it", k)
			}
		case l == nxt:
			if f.lastRound != s.round {
				return fmt.Errorf("flow %v: waits for the next round without this round's quantum", k)
			}
		}
	}
	if blocked != s.blocked || inFlight != s.inFlight {
		return fmt.Errorf("counters blocked %d inFlight %d, counted %d %d", s.blocked, s.inFlight, blocked, inFlight)
	}
	return nil
}

// runOps drives a scheduler with operations decoded from next (values in
// [0, 256)) and checks the invariants after each one.
func runOps(t *testing.T, dampen bool, steps int, next func() byte) {
	t.Helper()
	now := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	cfg := Config{Quantum: 300, MaxBatch: 200, Clock: func() time.Time { return now }}
	if dampen {
		cfg.Dampening = &Dampening{Threshold: 2000, Window: time.Second, Factor: 3}
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const maxWeight = 5
	keys := make([]Key, 12)
	for i := range keys {
		keys[i] = Key{Tenant: fmt.Sprintf("t%d", i), Dest: "d"}
	}
	var grants []Grant
	for step := range steps {
		op, k := next(), keys[int(next())%len(keys)]
		var desc string
		switch op % 7 {
		case 0, 1:
			events := int64(next()) * int64(next()%8)
			w := int(next()%maxWeight) + 1
			s.SetBacklog(k, events, w)
			desc = fmt.Sprintf("SetBacklog(%v, %d, %d)", k, events, w)
		case 2:
			b := next()%2 == 0
			s.SetBlocked(k, b)
			desc = fmt.Sprintf("SetBlocked(%v, %v)", k, b)
		case 3, 4:
			g, ok := s.Next()
			if ok {
				if g.MaxEvents < 1 || g.MaxCost < 1 {
					t.Fatalf("step %d: bad grant %+v", step, g)
				}
				for _, o := range grants {
					if o.Key == g.Key {
						t.Fatalf("step %d: second grant for %v while one is out", step, g.Key)
					}
				}
				grants = append(grants, g)
			}
			desc = fmt.Sprintf("Next() = %+v, %v", g, ok)
		case 5:
			if len(grants) == 0 {
				continue
			}
			i := int(next()) % len(grants)
			g := grants[i]
			grants = append(grants[:i], grants[i+1:]...)
			var n int
			var spent int64
			for c := int64(next()%50) + 1; g.Allows(n, spent, c); c = int64(next()%50) + 1 {
				n++
				spent += c
			}
			if next()%4 == 0 {
				n, spent = 0, 0
			}
			if err := s.Done(g.Key, int64(n), spent); err != nil {
				t.Fatalf("step %d: Done(%v): %v", step, g.Key, err)
			}
			desc = fmt.Sprintf("Done(%v, %d, %d)", g.Key, n, spent)
		case 6:
			switch next() % 8 {
			case 0:
				s.Remove(k) // drops k's grant, if any
				for i, g := range grants {
					if g.Key == k {
						grants = append(grants[:i], grants[i+1:]...)
						break
					}
				}
				desc = fmt.Sprintf("Remove(%v)", k)
			default:
				now = now.Add(time.Duration(next()) * time.Millisecond)
				desc = "clock"
			}
		}
		if err := s.checkInvariants(maxWeight); err != nil {
			t.Fatalf("step %d after %s: %v", step, desc, err)
		}
	}
}

func TestInvariantsRandomOps(t *testing.T) {
	t.Parallel()
	for seed := range uint64(20) {
		for _, dampen := range []bool{false, true} {
			t.Run(fmt.Sprintf("seed %d dampen %v", seed, dampen), func(t *testing.T) {
				t.Parallel()
				r := rand.New(rand.NewPCG(seed, 42))
				runOps(t, dampen, 10_000, func() byte { return byte(r.UintN(256)) })
			})
		}
	}
}

func FuzzInvariants(f *testing.F) {
	f.Add([]byte{0, 1, 200, 3, 3, 0, 5, 0, 1, 1, 3, 0, 2, 0, 0, 3, 1})
	var seed [64]byte
	binary.LittleEndian.PutUint64(seed[:], 0x0123456789abcdef)
	f.Add(seed[:])
	f.Fuzz(func(t *testing.T, data []byte) {
		i := 0
		runOps(t, len(data)%2 == 0, len(data)/2, func() byte {
			if len(data) == 0 {
				return 0
			}
			b := data[i%len(data)]
			i++
			return b
		})
	})
}
