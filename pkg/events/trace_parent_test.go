package events

import (
	"context"
	"testing"
	"time"
)

// ContextWithTraceParent puts its value on every message of the call, next
// to the request id; without it no traceparent header is stored, and a
// value that could break the header block is dropped, never failing the
// publish.
func TestPublisherTraceParent(t *testing.T) {
	t.Parallel()
	_, js, s := setup(t)
	p := newPublisher(t, js)
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	stored := func(ctx context.Context, version int64) map[string][]string {
		t.Helper()
		e := validEvent()
		e.Version = version
		r := p.PublishOne(ctx, e)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		m, err := s.GetMsg(context.Background(), r.Seq)
		if err != nil {
			t.Fatal(err)
		}
		return m.Header
	}
	ctx := ContextWithTraceParent(ContextWithRequestID(context.Background(), "req-1"), tp)
	h := stored(ctx, 1)
	if got := h[HeaderTraceParent]; len(got) != 1 || got[0] != tp {
		t.Errorf("header %s = %q, want %q", HeaderTraceParent, got, tp)
	}
	if got := RequestIDFromContext(ctx); got != "req-1" || h[HeaderRequestID][0] != "req-1" {
		t.Errorf("request id %q, header %q: the trace parent must not replace it", got, h[HeaderRequestID])
	}
	// The request id set after the trace parent keeps it too.
	if h := stored(ContextWithRequestID(ContextWithTraceParent(context.Background(), tp), "req-2"), 2); h[HeaderTraceParent] == nil || h[HeaderRequestID][0] != "req-2" {
		t.Errorf("headers %v: want both", h)
	}
	if h := stored(ContextWithRequestID(context.Background(), "req-3"), 3); h[HeaderTraceParent] != nil {
		t.Errorf("header %s = %q without a trace parent", HeaderTraceParent, h[HeaderTraceParent])
	}
	if h := stored(ContextWithTraceParent(context.Background(), tp+"\r\nX-Evil: 1"), 4); h[HeaderTraceParent] != nil || h["X-Evil"] != nil {
		t.Errorf("headers %v: a trace parent with control characters was sent", h)
	}
}

// BenchmarkPublisherTraceParent measures what the traceparent header
// costs the publish path: each iteration publishes a batch of 500 events
// without it (tracing off, or a request not sampled: the path of every
// publish without tracing) and one with it (a sampled request), in turn,
// so that both see the same machine. Reported: both rates and
// traced/off, the fraction of the rate left with the header.
func BenchmarkPublisherTraceParent(b *testing.B) {
	_, js, _ := setup(b)
	p := newPublisher(b, js)
	evs := benchEvents(benchBatch, 1)
	off := ContextWithRequestID(context.Background(), "0123456789abcdef01234567")
	traced := ContextWithTraceParent(off, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	var (
		round      int64
		spent      [2]time.Duration
		runs       = [2]context.Context{off, traced}
		firstFirst = true
	)
	b.ResetTimer()
	for b.Loop() {
		order := []int{0, 1}
		if !firstFirst {
			order = []int{1, 0}
		}
		firstFirst = !firstFirst
		for _, k := range order {
			for i := range evs {
				evs[i].Version = round*benchBatch + int64(i) + 1
			}
			round++
			start := time.Now()
			for i, r := range p.Publish(runs[k], evs) {
				if r.Err != nil || r.Duplicate {
					b.Fatalf("event %d: %+v", i, r)
				}
			}
			spent[k] += time.Since(start)
		}
	}
	rate := func(d time.Duration) float64 { return float64(b.N*benchBatch) / d.Seconds() }
	b.ReportMetric(rate(spent[0]), "events/s-off")
	b.ReportMetric(rate(spent[1]), "events/s-traced")
	b.ReportMetric(spent[0].Seconds()/spent[1].Seconds(), "traced/off")
}
