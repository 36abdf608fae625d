package work_test

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/fairwayhq/fairway/internal/work"
)

// Items go on the wire with their sequences and times as runs and come
// back the same, whatever the lists hold.
func TestItemRunsRoundTrip(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 300 {
		count := 1 + rng.IntN(700)
		it := work.Item{Tenant: "acme", Dest: "clickhouse", FromSeq: 1 + rng.Uint64N(1<<40), Count: count,
			LeaseID: "acme/clickhouse/2/9", Token: 9, CaughtUp: n%2 == 0, Replay: n%3 == 0}
		if n%4 != 0 { // listed sequences: steps in runs, some irregular
			it.Seqs = []uint64{it.FromSeq}
			step := 1 + rng.Uint64N(3)
			for len(it.Seqs) < count {
				if rng.IntN(10) == 0 {
					step = 1 + rng.Uint64N(1000)
				}
				it.Seqs = append(it.Seqs, it.Seqs[len(it.Seqs)-1]+step)
			}
			it.ToSeq = it.Seqs[count-1]
		} else {
			it.ToSeq = it.FromSeq + uint64(count) - 1 + rng.Uint64N(5)
		}
		if n%5 != 0 { // store times: mostly rising, sometimes not
			it.Times = &work.Times{BaseMs: 1_764_000_000_000 + rng.Int64N(1e9)}
			var off uint32
			for range count {
				switch rng.IntN(20) {
				case 0:
					off += uint32(rng.IntN(100_000))
				case 1:
					off /= 2 // a clock stepped back
				case 2, 3, 4:
					off++
				}
				it.Times.OffsetsMs = append(it.Times.OffsetsMs, off)
			}
		}
		m, err := it.Msg()
		if err != nil {
			t.Fatalf("item %d: %v", n, err)
		}
		back, err := work.Decode(m.Data)
		if err != nil {
			t.Fatalf("item %d: decode: %v\n%s", n, err, m.Data)
		}
		if !reflect.DeepEqual(back, it) {
			t.Fatalf("item %d: decoded differs:\n got %+v\nwant %+v\nwire %s", n, back, it, m.Data)
		}
		// json.Marshal and json.Unmarshal of an Item use the same form.
		j, err := json.Marshal(it)
		if err != nil || string(j) != string(m.Data) {
			t.Fatalf("item %d: json.Marshal %s (%v), Msg %s", n, j, err, m.Data)
		}
		var viaJSON work.Item
		if err := json.Unmarshal(j, &viaJSON); err != nil || !reflect.DeepEqual(viaJSON, it) {
			t.Fatalf("item %d: json.Unmarshal %+v (%v)", n, viaJSON, err)
		}
	}
}

// A dense batch of 500 events is a few runs, not 500 numbers; one spread
// over every other sequence is one run of sequences.
func TestItemRunsAreShort(t *testing.T) {
	t.Parallel()
	it := work.Item{Tenant: "noisy", Dest: "postgres", FromSeq: 1001, ToSeq: 1999, Count: 500, LeaseID: "noisy/postgres/0/1", Token: 1,
		Times: &work.Times{BaseMs: 1_764_000_000_000}}
	for i := range 500 {
		it.Seqs = append(it.Seqs, 1001+2*uint64(i))
		it.Times.OffsetsMs = append(it.Times.OffsetsMs, uint32(i/100))
	}
	m, err := it.Msg()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"seq_runs":[2,499]`, `"time_runs":{"base_ms":1764000000000,"runs":[0,100,1,100,2,100,3,100,4,100]}`} {
		if !strings.Contains(string(m.Data), want) {
			t.Errorf("wire form %s lacks %s", m.Data, want)
		}
	}
	if strings.Contains(string(m.Data), `"seqs"`) || strings.Contains(string(m.Data), `"offsets_ms"`) || len(m.Data) > 400 {
		t.Errorf("wire form is %d bytes: %s", len(m.Data), m.Data)
	}
}

// Items of dispatchers from before the runs list every sequence and time;
// they decode as before.
func TestItemListsStillDecode(t *testing.T) {
	t.Parallel()
	old := `{"tenant":"acme","dest":"postgres","from_seq":10,"to_seq":14,"count":3,"lease_id":"acme/postgres/0/5","token":5,` +
		`"dispatched_at":"2026-11-25T10:00:00Z","seqs":[10,12,14],"times":{"base_ms":1764000000000,"offsets_ms":[0,0,3]}}`
	it, err := work.Decode([]byte(old))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(it.Seqs, []uint64{10, 12, 14}) || it.Times == nil || !reflect.DeepEqual(it.Times.OffsetsMs, []uint32{0, 0, 3}) {
		t.Fatalf("decoded %+v", it)
	}
	m, err := it.Msg()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(m.Data), `"seq_runs":[2,2]`) || !strings.Contains(string(m.Data), `"runs":[0,2,3,1]`) {
		t.Fatalf("re-encoded %s", m.Data)
	}
}

// Runs that do not describe the item's events are an invalid item, with
// the reason, and a huge count is refused before anything is allocated.
func TestItemBadRuns(t *testing.T) {
	t.Parallel()
	head := `{"tenant":"acme","dest":"postgres","from_seq":10,"to_seq":14,"count":3,"lease_id":"acme/postgres/0/5","token":5,`
	cases := map[string]struct{ json, reason string }{
		"odd seq runs":       {head + `"seq_runs":[2,2,1]}`, "want pairs"},
		"zero step":          {head + `"seq_runs":[0,2]}`, "must be positive"},
		"zero length":        {head + `"seq_runs":[2,0,2,2]}`, "must be positive"},
		"too few seqs":       {head + `"seq_runs":[2,1]}`, "do not list the item's 3 events"},
		"too many seqs":      {head + `"seq_runs":[2,1000000000000]}`, "more than the item's 3 events"},
		"seq run wraps":      {head + `"seq_runs":[1,18446744073709551615,1,3]}`, "more than the item's 3 events"},
		"seqs past SeqsMax":  {strings.Replace(head, `"count":3`, `"count":1001`, 1) + `"seq_runs":[1,1000]}`, "seq_runs for a count of 1001"},
		"seqs past to_seq":   {head + `"seq_runs":[3,2]}`, "do not list the 3 events of range 10..14"},
		"seq overflow":       {head + `"seq_runs":[18446744073709551615,2]}`, "overflow"},
		"both seq forms":     {head + `"seqs":[10,12,14],"seq_runs":[2,2]}`, "both seqs and seq_runs"},
		"odd time runs":      {head + `"time_runs":{"base_ms":1,"runs":[0]}}`, "want pairs"},
		"time run length 0":  {head + `"time_runs":{"base_ms":1,"runs":[0,0,0,3]}}`, "length 0"},
		"times short":        {head + `"time_runs":{"base_ms":1,"runs":[0,2]}}`, "do not time the item's 3 events"},
		"times long":         {head + `"time_runs":{"base_ms":1,"runs":[0,4294967295,1,4294967295]}}`, "more than the item's 3 events"},
		"both time forms":    {head + `"times":{"base_ms":1,"offsets_ms":[0,0,0]},"time_runs":{"base_ms":1,"runs":[0,3]}}`, "both times and time_runs"},
		"huge count, runs":   {strings.Replace(head, `"count":3`, `"count":4000000000`, 1) + `"time_runs":{"base_ms":1,"runs":[0,4000000000]}}`, "time_runs for a count of 4000000000"},
		"runs not numbers":   {head + `"seq_runs":["a"]}`, "cannot unmarshal"},
		"negative time runs": {head + `"time_runs":{"base_ms":1,"runs":[-1,3]}}`, "cannot unmarshal"},
	}
	for name, c := range cases {
		_, err := work.Decode([]byte(c.json))
		if !errors.Is(err, work.ErrInvalidItem) || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: err %v, want ErrInvalidItem with %q", name, err, c.reason)
		}
	}
}
