package work

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// RangeTimesSpan is how many milliseconds a range of n events may span
// for RangeTimes to be worth its requests (one per millisecond boundary)
// rather than a read with headers: at most 64, and a request per 16
// events.
func RangeTimesSpan(n int) int { return min(64, n/16) }

// RangeTimes returns the store times, to the millisecond, of every event
// in [from, to], a range in which every sequence is stored (a dense run,
// as the dispatcher cuts one without reading it), so that its work items
// carry times and the sinks read their bodies without headers
// (ReadItem). Reading the range with headers to learn them would cost the
// server a header block built per event; this asks for a few events
// instead: the first and the last (one direct get by sequence each), then,
// for every millisecond boundary between them, the first event stored at
// or after it (a direct get by start_time, which the server answers from
// its time index). Every event from one boundary's answer up to the next
// one's was stored in that millisecond.
//
// It returns nil, without error, when the range spans more than maxSpan
// milliseconds (RangeTimesSpan: reading it is cheaper then) or when the
// stream's times do not rise with its sequences (a clock stepped back):
// the caller leaves the items without times and the sinks read the
// headers.
func (r *Reader) RangeTimes(ctx context.Context, from, to uint64, maxSpan int) (*Times, error) {
	if from == 0 || to < from {
		return nil, fmt.Errorf("work: range times: bad range %d..%d", from, to)
	}
	n := to - from + 1
	ends, err := r.probeAll(ctx, []directGetRequest{{Seq: from}, {Seq: to}})
	if err != nil {
		return nil, err
	}
	first, last := ends[0], ends[1]
	if first.seq != from || last.seq != to {
		return nil, fmt.Errorf("work: range times: %d..%d is not stored (got %d, %d)", from, to, first.seq, last.seq)
	}
	ms0, msN := first.at.UnixMilli(), last.at.UnixMilli()
	span := msN - ms0
	if span < 0 || span > int64(maxSpan) {
		return nil, nil
	}
	t := &Times{BaseMs: ms0, OffsetsMs: make([]uint32, 0, n)}
	// bounds[k] is the first event stored at or after ms0+k+1.
	bounds := make([]uint64, span)
	if span > 0 {
		reqs := make([]directGetRequest, span)
		for k := range reqs {
			at := time.UnixMilli(ms0 + int64(k) + 1).UTC()
			reqs[k] = directGetRequest{StartTime: &at}
		}
		got, err := r.probeAll(ctx, reqs)
		if err != nil {
			return nil, err
		}
		prev := from
		for k, g := range got {
			if g.seq <= from || g.seq > to || g.seq < prev {
				return nil, nil // times not rising with sequences
			}
			bounds[k], prev = g.seq, g.seq
		}
	}
	k := 0
	for seq := from; seq <= to; seq++ {
		for k < len(bounds) && bounds[k] <= seq {
			k++
		}
		t.OffsetsMs = append(t.OffsetsMs, uint32(k))
	}
	return t, nil
}

// probed is what a single direct get answered: the event's sequence and
// store time.
type probed struct {
	seq uint64
	at  time.Time
}

// probeAll sends the single (not batched) direct gets reqs at once and
// returns their answers in order.
func (r *Reader) probeAll(ctx context.Context, reqs []directGetRequest) ([]probed, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	out := make([]probed, len(reqs))
	errs := make([]error, len(reqs))
	var wg sync.WaitGroup
	for i, req := range reqs {
		wg.Go(func() { out[i], errs[i] = r.probeOne(ctx, req) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (r *Reader) probeOne(ctx context.Context, req directGetRequest) (probed, error) {
	body, _ := json.Marshal(req)
	m, err := r.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+r.stream, body)
	if err != nil {
		return probed{}, fmt.Errorf("%w: %v", ErrStreamRead, err)
	}
	return parseProbe(m)
}

func parseProbe(m *nats.Msg) (probed, error) {
	if m.Header == nil {
		return probed{}, fmt.Errorf("%w: direct get answered without headers", ErrStreamRead)
	}
	if status := m.Header.Get("Status"); status != "" {
		return probed{}, fmt.Errorf("%w: status %s %s", ErrStreamRead, status, m.Header.Get("Description"))
	}
	seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
	if err != nil {
		return probed{}, fmt.Errorf("%w: reply without Nats-Sequence", ErrStreamRead)
	}
	at, err := time.Parse(time.RFC3339Nano, m.Header.Get("Nats-Time-Stamp"))
	if err != nil {
		return probed{}, fmt.Errorf("%w: reply without Nats-Time-Stamp", ErrStreamRead)
	}
	return probed{seq: seq, at: at}, nil
}
