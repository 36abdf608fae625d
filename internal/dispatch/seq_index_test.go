package dispatch

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// take must cut exactly what cut cuts from a read of the same sequences.
func TestSeqIndexTakeMatchesCut(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 500 {
		var ix seqIndex
		var seqs []uint64
		seq := uint64(rng.IntN(5) + 1)
		for range rng.IntN(60) {
			seq += uint64(1 + rng.IntN(3)*rng.IntN(2)) // runs with gaps
			seqs = append(seqs, seq)
			ix.add(seq, time.Time{}, 1000)
		}
		cursor := uint64(1 + rng.IntN(10))
		n, size := 1+rng.IntN(40), 1+rng.IntN(12)
		ranges, counts, lists, _, rest := ix.take(cursor, n, size)

		var read []work.Stored
		for _, s := range seqs {
			if s >= cursor && len(read) < n {
				read = append(read, work.Stored{Seq: s})
			}
		}
		var wantR []tenancy.Range
		var wantC []int
		var wantL [][]uint64
		if len(read) > 0 {
			wantR, wantC, wantL = cut(read, size)
		}
		known := 0
		for _, s := range seqs {
			if s >= cursor {
				known++
			}
		}
		if !slices.Equal(ranges, wantR) || !slices.Equal(counts, wantC) || !slices.EqualFunc(lists, wantL, slices.Equal) || rest != uint64(known-len(read)) {
			t.Fatalf("trial %d: seqs %v cursor %d n %d size %d:\n take %v %v %v rest %d\n cut  %v %v %v rest %d",
				trial, seqs, cursor, n, size, ranges, counts, lists, rest, wantR, wantC, wantL, known-len(read))
		}
	}
}

func TestSeqIndexAdd(t *testing.T) {
	t.Parallel()
	var ix seqIndex
	t0 := time.Unix(100, 0)
	for _, s := range []uint64{5, 6, 7, 6, 9, 10, 12} { // 6 again: a redelivery
		ix.add(s, t0, 100)
	}
	want := []seqRun{{5, 7, t0}, {9, 10, t0}, {12, 12, t0}}
	if !slices.Equal(ix.runs, want) {
		t.Fatalf("runs %v, want %v", ix.runs, want)
	}
	// Over maxRuns the oldest runs go and floor moves past them.
	ix.add(20, t0, 3)
	if ix.floor != 9 || len(ix.runs) != 3 || ix.runs[0].first != 9 {
		t.Fatalf("after overflow: floor %d runs %v", ix.floor, ix.runs)
	}
	ix.trim(10)
	if ix.runs[0] != (seqRun{10, 10, t0}) || ix.floor != 10 {
		t.Fatalf("trim(10): %v floor %d", ix.runs, ix.floor)
	}
	ix.add(8, t0, 3) // below what the index knows: ignored
	if ix.runs[0].first != 10 {
		t.Fatalf("a sequence below the floor was added: %v", ix.runs)
	}
	ix.trim(100)
	if len(ix.runs) != 0 {
		t.Fatalf("trim(100): %v", ix.runs)
	}
}
