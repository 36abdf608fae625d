package b2b

import (
	"fmt"
	"runtime"
	"sync"

	"github.com/fairwayhq/fairway/internal/sink"
)

// encodeParallelMin is the fewest events per goroutine when a partner's
// transform runs on several cores: below it, starting goroutines costs
// more than it saves.
const encodeParallelMin = 128

// encodedEvents are the events of one tenant's batch that go to the
// partner, each as its JSON in the request body.
type encodedEvents struct {
	recs []sink.Record // the records the partner takes
	at   []int         // their index in the batch
	enc  [][]byte      // their JSON; empty when errs[j] is set
	errs []error       // a *sink.PermanentError for a record that cannot be sent
	// filtered counts the events the partner's filter dropped, failed
	// those its filter or map failed on.
	filtered, failed int
}

// encodeEvents encodes batch[idx] for p: events whose op p does not take
// and events its filter drops are left out (they count as applied), the
// others are checked and written as BodyEvents or through p's map. A
// transform is evaluated on up to GOMAXPROCS goroutines, each over a run
// of the batch, since it costs several times the plain encoding.
func encodeEvents(p *Partner, tr *transformer, env envelope, batch []sink.Record, idx []int) encodedEvents {
	out := encodedEvents{recs: make([]sink.Record, 0, len(idx)), at: make([]int, 0, len(idx)),
		enc: make([][]byte, 0, len(idx)), errs: make([]error, 0, len(idx))}
	workers := 1
	if tr != nil {
		workers = max(1, min(runtime.GOMAXPROCS(0), len(idx)/encodeParallelMin))
	}
	if workers == 1 {
		return encodeRun(out, p, tr, env, batch, idx)
	}
	// Each goroutine fills its own window of out's arrays; the windows are
	// then moved together in place.
	parts := make([]encodedEvents, workers)
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*len(idx)/workers, (w+1)*len(idx)/workers
		wg.Go(func() { parts[w] = encodeRun(out.window(lo, hi), p, tr, env, batch, idx[lo:hi]) })
	}
	wg.Wait()
	for _, part := range parts {
		out.recs, out.at = append(out.recs, part.recs...), append(out.at, part.at...)
		out.enc, out.errs = append(out.enc, part.enc...), append(out.errs, part.errs...)
		out.filtered, out.failed = out.filtered+part.filtered, out.failed+part.failed
	}
	return out
}

// window returns the empty encodedEvents whose arrays are e's from lo to
// hi, past e's own events.
func (e encodedEvents) window(lo, hi int) encodedEvents {
	return encodedEvents{recs: e.recs[lo:lo:hi], at: e.at[lo:lo:hi], enc: e.enc[lo:lo:hi], errs: e.errs[lo:lo:hi]}
}

// encodeRun is encodeEvents on one goroutine, appending to out, whose
// arrays have room for idx.
func encodeRun(out encodedEvents, p *Partner, tr *transformer, env envelope, batch []sink.Record, idx []int) encodedEvents {
	// Every event is encoded into one buffer; ends[j] is where recs[j]'s
	// JSON ends.
	need := 0
	if n := tr.outputSizeHint(); n > 0 {
		need = len(idx) * n
	} else {
		for _, i := range idx {
			need += eventSizeHint(&batch[i])
		}
	}
	encoded := make([]byte, 0, need)
	ends := make([]int, 0, len(idx))
	var ev *eventValue
	if tr != nil {
		ev = tr.newEvent()
	}
	for _, i := range idx {
		r := &batch[i]
		if !p.wants(r.Event.Op) {
			continue // filtered out: applied
		}
		start := len(encoded)
		err := checkEvent(r)
		switch {
		case err != nil:
		case tr != nil:
			var keep bool
			if encoded, keep, err = tr.apply(encoded, ev, r); err == nil && !keep {
				out.filtered++
				continue // dropped by the partner's filter: applied
			}
			if err != nil {
				out.failed++
			}
		default:
			encoded = appendCheckedEvent(encoded, r)
		}
		if size := len(encoded) - start; err == nil && env.size(size) > p.MaxRequestBytes {
			err = sink.Permanent(fmt.Sprintf("event is %d bytes in a request, partner %s takes at most %d", env.size(size), p.Name, p.MaxRequestBytes), ErrEventTooLarge)
		}
		out.recs, out.at, ends, out.errs = append(out.recs, *r), append(out.at, i), append(ends, len(encoded)), append(out.errs, err)
	}
	if tr != nil && len(ends) > 0 {
		tr.outputSize.Store(int64(len(encoded) / len(ends)))
	}
	start := 0
	for _, end := range ends {
		out.enc = append(out.enc, encoded[start:end:end])
		start = end
	}
	return out
}
