package work

import (
	"encoding/json"
	"fmt"
)

// On the wire an item's Seqs and Times go as runs (seq_runs, time_runs)
// instead of one number per event: a batch of 500 events stored over a
// few milliseconds is a handful of runs, and a batch interleaved with
// another tenant's events is one run of sequences two apart. That keeps
// such an item a few hundred bytes, and decoding it, which every sink does
// for every item, cheap (BenchmarkItemCodec; docs/benchmarks.md).
//
// Decode also reads the lists in place of the runs (seqs,
// times.offsets_ms). A sink that does not know the runs ignores them and
// reads the item as one without lists (a range read filtered on the
// tenant's subjects, with headers): slower, the same events.

// MaxRunEvents is the most events whose times an item's runs may expand
// to (its sequences: SeqsMax); more is an invalid item, refused before any
// memory is taken for it.
const MaxRunEvents = 1 << 20

// itemFields is Item without its JSON methods.
type itemFields Item

// wireItem is Item as JSON carries it.
type wireItem struct {
	itemFields
	// SeqRuns are Seqs as pairs (step, n): starting at FromSeq, n more
	// sequences, each step after the one before ([] for one event).
	SeqRuns *[]uint64 `json:"seq_runs,omitempty"`
	// TimeRuns are Times with OffsetsMs as pairs (offset, n): n events
	// stored at BaseMs + offset.
	TimeRuns *timeRuns `json:"time_runs,omitempty"`
}

type timeRuns struct {
	BaseMs int64    `json:"base_ms"`
	Runs   []uint32 `json:"runs"`
}

// MarshalJSON writes Seqs and Times as runs.
func (it Item) MarshalJSON() ([]byte, error) { return json.Marshal(it.wire()) }

// UnmarshalJSON reads either form: runs or lists.
func (it *Item) UnmarshalJSON(b []byte) error {
	var w wireItem
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	x, err := w.item()
	if err != nil {
		return err
	}
	*it = x
	return nil
}

// wire is it as JSON carries it. Item.Msg and Decode use wire and item
// directly: through MarshalJSON and UnmarshalJSON encoding/json would scan
// every item twice.
func (it Item) wire() wireItem {
	w := wireItem{itemFields: itemFields(it)}
	if len(it.Seqs) > 0 {
		runs := seqRuns(it.Seqs)
		w.SeqRuns = &runs
	}
	if it.Times != nil {
		w.TimeRuns = &timeRuns{BaseMs: it.Times.BaseMs, Runs: offsetRuns(it.Times.OffsetsMs)}
	}
	w.Seqs, w.Times = nil, nil
	return w
}

// item expands w's runs.
func (w *wireItem) item() (Item, error) {
	it := Item(w.itemFields)
	if w.SeqRuns != nil {
		if it.Seqs != nil {
			return it, fmt.Errorf("both seqs and seq_runs")
		}
		seqs, err := expandSeqs(it.FromSeq, it.Count, *w.SeqRuns)
		if err != nil {
			return it, err
		}
		it.Seqs = seqs
	}
	if w.TimeRuns != nil {
		if it.Times != nil {
			return it, fmt.Errorf("both times and time_runs")
		}
		offs, err := expandOffsets(it.Count, w.TimeRuns.Runs)
		if err != nil {
			return it, err
		}
		it.Times = &Times{BaseMs: w.TimeRuns.BaseMs, OffsetsMs: offs}
	}
	return it, nil
}

// seqRuns encodes seqs (rising) as (step, n) pairs after the first.
func seqRuns(seqs []uint64) []uint64 {
	runs := []uint64{}
	for i := 1; i < len(seqs); {
		step, n := seqs[i]-seqs[i-1], uint64(1)
		for i+int(n) < len(seqs) && seqs[i+int(n)]-seqs[i+int(n)-1] == step {
			n++
		}
		runs = append(runs, step, n)
		i += int(n)
	}
	return runs
}

// expandSeqs is seqRuns backwards: count sequences from first.
func expandSeqs(first uint64, count int, runs []uint64) ([]uint64, error) {
	if len(runs)%2 != 0 {
		return nil, fmt.Errorf("seq_runs has %d numbers, want pairs", len(runs))
	}
	if count < 1 || count > SeqsMax {
		return nil, fmt.Errorf("seq_runs for a count of %d (1..%d)", count, SeqsMax)
	}
	var total uint64 = 1
	for i := 1; i < len(runs); i += 2 {
		if runs[i-1] == 0 || runs[i] == 0 {
			return nil, fmt.Errorf("seq_runs pair %d is (%d, %d): step and length must be positive", i/2, runs[i-1], runs[i])
		}
		if runs[i] > uint64(count)-total { // checked before adding: no wrap-around
			return nil, fmt.Errorf("seq_runs list more than the item's %d events", count)
		}
		total += runs[i]
	}
	if total != uint64(count) {
		return nil, fmt.Errorf("seq_runs do not list the item's %d events", count)
	}
	seqs := make([]uint64, 1, count)
	seqs[0] = first
	for i := 1; i < len(runs); i += 2 {
		for range runs[i] {
			next := seqs[len(seqs)-1] + runs[i-1]
			if next < seqs[len(seqs)-1] {
				return nil, fmt.Errorf("seq_runs overflow")
			}
			seqs = append(seqs, next)
		}
	}
	return seqs, nil
}

// offsetRuns encodes offsets as (offset, n) pairs.
func offsetRuns(offs []uint32) []uint32 {
	runs := []uint32{}
	for i := 0; i < len(offs); {
		n := 1
		for i+n < len(offs) && offs[i+n] == offs[i] {
			n++
		}
		runs = append(runs, offs[i], uint32(n))
		i += n
	}
	return runs
}

// expandOffsets is offsetRuns backwards: count offsets.
func expandOffsets(count int, runs []uint32) ([]uint32, error) {
	if len(runs)%2 != 0 {
		return nil, fmt.Errorf("time_runs has %d numbers, want pairs", len(runs))
	}
	if count < 1 || count > MaxRunEvents {
		return nil, fmt.Errorf("time_runs for a count of %d (1..%d)", count, MaxRunEvents)
	}
	var total uint64
	for i := 1; i < len(runs); i += 2 {
		if runs[i] == 0 {
			return nil, fmt.Errorf("time_runs pair %d has length 0", i/2)
		}
		if uint64(runs[i]) > uint64(count)-total {
			return nil, fmt.Errorf("time_runs time more than the item's %d events", count)
		}
		total += uint64(runs[i])
	}
	if total != uint64(count) {
		return nil, fmt.Errorf("time_runs do not time the item's %d events", count)
	}
	offs := make([]uint32, 0, count)
	for i := 1; i < len(runs); i += 2 {
		for range runs[i] {
			offs = append(offs, runs[i-1])
		}
	}
	return offs, nil
}
