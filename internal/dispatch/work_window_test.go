package dispatch_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
)

// With slow sinks and slot limits far above what they take, the work window
// keeps what waits in WORK to about the window, not to the slots; no item
// waits long enough in WORK for its lease to expire, so nothing is
// re-dispatched; and every event is covered exactly once. Without the
// window (DeepWork) the same backlog queues as deep as the slots allow.
func TestWorkWindowKeepsWorkShallow(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		deep bool
	}{{"window", false}, {"deep", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const (
				n     = 3000
				batch = 10
				limit = 100
			)
			e := setup(t, 3*time.Second)
			tenants := []string{"a", "b", "c"}
			for _, tn := range tenants {
				e.tenant(tn, 1, limit, pg)
			}
			seqs := e.interleave(n/len(tenants), tenants, 1, 1, 1)
			// Sinks slow enough (40 items/s) that, without the window, the
			// dispatcher queues a third of the 300 items or more even on a
			// loaded machine.
			s := e.startSink(pg, 2, nil, func() time.Duration { return 50 * time.Millisecond })
			d := e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: batch, PollInterval: time.Hour, DeepWork: tc.deep}, nil)
			var peak atomic.Uint64
			var shown float64 // the most work_waiting showed
			e.waitFor("every event applied", func() bool {
				cons, err := e.js.Consumer(e.ctx, work.StreamName, work.ConsumerName(pg))
				if err == nil {
					if p := cons.CachedInfo().NumPending; p > peak.Load() {
						peak.Store(p)
					}
				}
				shown = max(shown, d.WorkWaiting(pg))
				return s.distinct("a")+s.distinct("b")+s.distinct("c") >= n
			})
			checkExactlyOnce(t, s.snapshot(), seqs, tc.deep)
			t.Logf("peak items waiting in WORK: %d; re-dispatched orphans: %.0f", peak.Load(), d.Recovered(pg))
			if tc.deep {
				if peak.Load() < 100 {
					t.Errorf("without the window at most %d items waited in WORK; the test cannot tell the window's effect", peak.Load())
				}
				return
			}
			if bound := uint64(32 + 4); peak.Load() > bound {
				t.Errorf("%d items waited in WORK, window %d", peak.Load(), bound)
			}
			// The gauges show the window and what waits in it.
			if w := d.WorkWindow(pg); w < 8 || w > 32 {
				t.Errorf("work_window shows %v items, want the window (8 to 32 here)", w)
			}
			if shown < 1 || shown > float64(32+4) {
				t.Errorf("work_waiting showed at most %v items waiting; WORK held up to %d", shown, peak.Load())
			}
			if r := d.Recovered(pg); r != 0 {
				t.Errorf("%.0f orphans re-dispatched: leases expired while items waited", r)
			}
		})
	}
}

// The work window is per dispatcher: where two dispatchers share the
// sinks, the one granting a flood fills WORK to its own window and stops
// there, and the other still publishes its small tenant's items, though
// what waits in WORK is past the window. The sink holds the first
// item it takes until the end, so nothing waiting is delivered meanwhile.
func TestWorkWindowIsPerDispatcher(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Minute)
	candidates := e.numbered(16, 1000)
	gate := make(chan struct{})
	var open sync.Once
	release := func() { open.Do(func() { close(gate) }) }
	s := e.startSink(pg, 1, nil, func() time.Duration { <-gate; return 0 })
	t.Cleanup(release)
	ds := map[string]*dispatch.Dispatcher{}
	for _, h := range []string{"disp-a", "disp-b"} {
		ds[h] = e.start(&dispatch.Config{Dests: []string{pg}, Holder: h, BatchSize: 10, Heartbeat: time.Second, PollInterval: time.Second}, nil)
	}
	layout := events.LayoutDefault
	e.waitFor("the dispatchers split the partitions", func() bool {
		if len(ds["disp-a"].Members()) != 2 || len(ds["disp-b"].Members()) != 2 {
			return false
		}
		a, b := ds["disp-a"].Partitions(), ds["disp-b"].Partitions()
		return len(a)+len(b) == layout.Count() && len(a) > 0 && len(b) > 0 &&
			!slices.ContainsFunc(a, func(p int) bool { return slices.Contains(b, p) })
	})
	var flood, small string
	for _, id := range candidates {
		p := layout.PartitionOf(id)
		if flood == "" && slices.Contains(ds["disp-a"].Partitions(), p) {
			flood = id
		} else if small == "" && slices.Contains(ds["disp-b"].Partitions(), p) {
			small = id
		}
	}
	if flood == "" || small == "" {
		t.Fatalf("no tenant of each dispatcher's partitions among %v", candidates)
	}

	seqs := map[string][]uint64{flood: e.publish(flood, 1000)}
	pending := func() uint64 {
		cons, err := e.js.Consumer(e.ctx, work.StreamName, work.ConsumerName(pg))
		if err != nil {
			t.Fatal(err)
		}
		return cons.CachedInfo().NumPending
	}
	const window = 8 // the window's floor: 2 grants of GrantBatchesDefault items
	e.waitFor("the flood's dispatcher fills its window", func() bool { return pending() >= window })
	time.Sleep(200 * time.Millisecond) // it would go past its window by now
	// Grants that begin together may each pass the window by a grant.
	if n := pending(); n > 2*window {
		t.Fatalf("%d of the flood's items wait in WORK, past its dispatcher's window of %d", n, window)
	}

	// The small tenant's dispatcher publishes its first item, then looks
	// at WORK with its item waiting behind the flood's; its second item
	// goes out all the same.
	var last uint64
	for i := range 2 {
		seqs[small] = append(seqs[small], e.publish(small, 1)...)
		testenv.Eventually(t, 5*time.Second, fmt.Sprintf("the small tenant's item %d in WORK while the flood's fill the window", i+1), func() error {
			stream, err := e.js.Stream(e.ctx, work.StreamName)
			if err != nil {
				return err
			}
			m, err := stream.GetLastMsgForSubject(e.ctx, work.Subject(pg, small))
			if err != nil {
				return err
			}
			if m.Sequence == last {
				return fmt.Errorf("its last item is still the one at %d", last)
			}
			last = m.Sequence
			return nil
		})
		time.Sleep(100 * time.Millisecond) // it has looked at WORK since
	}

	release()
	e.waitFor("every event applied", func() bool { return s.events(flood)+s.events(small) >= 1002 })
	checkExactlyOnce(t, s.snapshot(), seqs, false)
}

// A destination that no sink has consumed yet (its consumer does not
// exist) has at most WorkWithoutSink bytes of items waiting in WORK, plus
// the one grant in flight, and the rest of its backlog in PRODUCTS, also
// while the waiting items' leases expire (2 s here) and their batches
// become orphans: recovery leaves them for the first sink. Once a sink
// comes, every event is applied (the orphans' twice).
func TestWorkWithoutSinkIsBounded(t *testing.T) {
	t.Parallel()
	const bound = 4096
	e := setup(t, 2*time.Second)
	tenants := []string{"a", "b", "c", "d"}
	for _, tn := range tenants {
		e.tenant(tn, 1, 1000, pg)
	}
	seqs := e.interleave(100, tenants, 1, 1, 1, 1)
	d := e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: 10, GrantBatches: 1, Concurrency: 1,
		WorkWithoutSink: bound, PollInterval: time.Hour, RecoverInterval: 200 * time.Millisecond}, nil)
	workState := func() (msgs, bytes uint64) {
		s, err := e.js.Stream(e.ctx, work.StreamName)
		if err != nil {
			t.Fatal(err)
		}
		st := s.CachedInfo().State
		return st.Msgs, st.Bytes
	}
	e.waitFor("WORK to hold the bound's worth of items", func() bool {
		_, b := workState()
		return b >= bound
	})
	// Without the bound the 40 items go out within a second or so; the
	// leases expire after 2 s, and recovery looks every 200 ms.
	time.Sleep(6 * time.Second)
	msgs, _ := workState()
	var data, largest int // as the window counts them: the items' data
	for _, it := range e.workItems(1, e.workLastSeq()) {
		m, err := it.Msg()
		if err != nil {
			t.Fatal(err)
		}
		data, largest = data+len(m.Data), max(largest, len(m.Data))
	}
	t.Logf("without a sink WORK holds %d items, %d bytes of data (bound %d, largest item %d bytes); orphans re-dispatched %.0f", msgs, data, bound, largest, d.Recovered(pg))
	// Beyond the bound: the grant that found room, and the next one, which
	// may begin before the first one's publish is counted.
	if data >= bound+2*largest || msgs >= 40 {
		t.Fatalf("without a sink WORK holds %d items, %d bytes of data: want less than the bound (%d) and two items more", msgs, data, bound)
	}
	if n := d.Recovered(pg); n != 0 {
		t.Fatalf("%.0f orphans re-dispatched with no sink: their copies only add to WORK", n)
	}
	s := e.startSink(pg, 2, nil, func() time.Duration { return 0 })
	e.waitFor("every event applied", func() bool {
		return s.distinct("a")+s.distinct("b")+s.distinct("c")+s.distinct("d") >= 400
	})
	checkExactlyOnce(t, s.snapshot(), seqs, true)
	t.Logf("orphans re-dispatched once the sink came: %.0f", d.Recovered(pg))
}
