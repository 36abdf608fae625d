package dispatch

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/pkg/events"
)

// The index hands out the bodies it holds, with their ops and store times,
// only for a batch it holds every body of; and every byte a body counted
// against the budget comes back once every index that held it let go:
// through trims, runs forgotten at maxRuns and redeliveries ignored.
func TestIndexBodiesAndBudget(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	at := time.UnixMilli(1_700_000_000_000)
	for trial := range 200 {
		bb := &bodyBudget{max: int64(rng.IntN(40)+1) * (bodyOverhead + 8)}
		var a, b seqIndex // two destinations holding the same bodies
		held := map[uint64]bool{}
		seq := uint64(1)
		maxRuns := 1 + rng.IntN(8)
		for range rng.IntN(60) {
			seq += uint64(1 + rng.IntN(3)*rng.IntN(2))
			op := events.OpUpsert
			if rng.IntN(4) == 0 {
				op = events.OpDelete
			}
			body := bb.hold(fmt.Appendf(nil, "body%04d", seq), op, 2)
			held[seq] = body != nil
			ms := at.Add(time.Duration(seq) * time.Millisecond)
			a.addBody(seq, ms, body, maxRuns)
			b.addBody(seq, ms, body, maxRuns)
			if rng.IntN(5) == 0 { // a redelivery: ignored, its reference released
				again := bb.hold([]byte("again"), events.OpUpsert, 1)
				a.addBody(seq, ms, again, maxRuns)
			}
		}
		if got := bb.used.Load(); got > bb.max {
			t.Fatalf("trial %d: budget used %d over its max %d", trial, got, bb.max)
		}
		// A batch of what a holds: bodies for all of it, or none.
		cursor := uint64(1 + rng.IntN(int(seq)))
		ranges, counts, _, _, _ := a.takeBytes(cursor, 1+rng.IntN(30), 1+rng.IntN(10), 0)
		for i, r := range ranges {
			bodies := a.bodies(r.From, r.To, counts[i])
			want := true
			for s := r.From; s <= r.To; s++ {
				if _, ok := held[s]; ok && !held[s] {
					want = false
				}
			}
			if (bodies != nil) != want {
				t.Fatalf("trial %d: range %v: bodies %v, want them: %v", trial, r, bodies, want)
			}
			for k, body := range bodies {
				if string(body.Data) != fmt.Sprintf("body%04d", body.Seq) || body.StoredMs != at.UnixMilli()+int64(body.Seq) || !body.Op.Valid() ||
					k > 0 && body.Seq <= bodies[k-1].Seq || body.Seq < r.From || body.Seq > r.To {
					t.Fatalf("trial %d: range %v: body %d = %+v", trial, r, k, body)
				}
			}
		}
		a.trim(seq + 1)
		if bb.used.Load() == 0 && holdsBodies(&b) {
			t.Fatalf("trial %d: budget emptied while the other index still holds bodies", trial)
		}
		b.trim(seq + 1)
		if got := bb.used.Load(); got != 0 {
			t.Fatalf("trial %d: %d bytes still counted after both indexes let go", trial, got)
		}
	}
}

func holdsBodies(ix *seqIndex) bool {
	for _, b := range ix.held {
		if b != nil {
			return true
		}
	}
	return false
}

// Batches of held bodies are cut by bytes as well as by count, so that an
// item carrying them fits in one message; an event larger than the bound
// still makes a batch of its own.
func TestTakeBytesBoundsBatches(t *testing.T) {
	t.Parallel()
	bb := &bodyBudget{max: 1 << 30}
	var ix seqIndex
	sizes := []int{100, 100, 100, 900, 100, 2000, 100}
	for i, n := range sizes {
		ix.addBody(uint64(i+1), time.Now(), bb.hold(make([]byte, n), events.OpUpsert, 1), 100)
	}
	ranges, counts, _, _, _ := ix.takeBytes(1, 100, 500, 1000)
	// Three of 100 fit in 1000 with their frames; 900 alone; 100 then
	// 2000 does not fit; 2000 alone; 100.
	if want := []int{3, 1, 1, 1, 1}; !slices.Equal(counts, want) {
		t.Fatalf("counts %v (ranges %v), want %v", counts, ranges, want)
	}
	if ranges[0].From != 1 || ranges[len(ranges)-1].To != 7 {
		t.Fatalf("ranges %v do not cover 1..7", ranges)
	}
}

// Once a body does not fit, later ones are not held either, however much
// room frees, until the refill has read the gap: the bodies held stay the
// oldest. A body dropped below the gap's start moves the start down and
// tells the refill's pass to restart there.
func TestBodyBudgetGap(t *testing.T) {
	data := make([]byte, 40)
	cost := int64(len(data)) + bodyOverhead
	bb := newBodyBudget(3 * cost)
	var held []*heldBody
	for seq := uint64(10); seq < 13; seq++ {
		b := bb.holdAt(seq, data, events.OpUpsert, 1)
		if b == nil {
			t.Fatalf("seq %d not held with room for it", seq)
		}
		held = append(held, b)
	}
	if bb.holdAt(13, data, events.OpUpsert, 1) != nil {
		t.Fatal("seq 13 held past the budget")
	}
	if !bb.inGap(13) || bb.inGap(12) {
		t.Fatal("the gap does not start at 13")
	}
	held[0].release()
	select {
	case <-bb.roomy:
	default:
		t.Fatal("a release that freed a quarter of the budget did not tell the refill")
	}
	if bb.holdAt(14, data, events.OpUpsert, 1) != nil {
		t.Fatal("seq 14 held behind the gap at 13")
	}
	if !bb.inGap(14) {
		t.Fatal("the gap does not reach 14")
	}
	// The backfill, behind the gap, holds while there is room and moves
	// the gap's start down when there is none.
	if bb.holdAt(5, data, events.OpUpsert, 1) == nil {
		t.Fatal("seq 5, before the gap, not held with room for it")
	}
	if bb.holdAt(6, data, events.OpUpsert, 1) != nil {
		t.Fatal("seq 6 held past the budget")
	}
	bb.mu.Lock()
	g := bb.gap
	bb.mu.Unlock()
	if g.from != 6 || g.to != 14 || !g.restart {
		t.Fatalf("gap %+v, want from 6 to 14, restart", g)
	}
}
