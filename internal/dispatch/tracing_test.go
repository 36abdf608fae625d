package dispatch

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairwayhq/fairway/internal/dispatch/scheduler"
	"github.com/fairwayhq/fairway/internal/tracing"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// eventHeaders returns the headers ingest stores on an event of a sampled
// request: a traceparent of trace n and the request id.
func eventHeaders(n int, requestID string) nats.Header {
	return nats.Header{
		events.HeaderTraceParent: {fmt.Sprintf("00-%032x-%016x-01", n, n)},
		events.HeaderRequestID:   {requestID},
	}
}

func TestGrantTracingRemembersTheLastTracedEvents(t *testing.T) {
	t.Parallel()
	g := newGrantTracing(sdktrace.NewTracerProvider().Tracer("test"))
	seqsOf := func(tenant string, from, to uint64) []uint64 {
		var out []uint64
		g.each(tenant, from, to, func(e *tracedEvent) bool { out = append(out, e.seq); return true })
		return out
	}
	g.note("acme", 1, nats.Header{events.HeaderRequestID: {"untraced"}}) // no trace context: not remembered
	g.note("acme", 2, eventHeaders(2, "r2"))
	g.note("beta", 3, eventHeaders(3, "r3"))
	g.note("acme", 4, nats.Header{events.HeaderTraceParent: {"malformed"}})
	g.note("acme", 5, eventHeaders(5, "r5"))
	if got := seqsOf("acme", 1, 10); !slices.Equal(got, []uint64{2, 5}) {
		t.Errorf("acme's traced events %v, want [2 5]", got)
	}
	if got := seqsOf("acme", 3, 4); got != nil {
		t.Errorf("acme's traced events in 3..4: %v, want none", got)
	}
	// Past tracedEventsMax the oldest are forgotten.
	for seq := uint64(6); seq < 6+tracedEventsMax; seq++ {
		g.note("acme", seq, eventHeaders(int(seq), "r"))
	}
	if got := seqsOf("acme", 1, 6); !slices.Equal(got, []uint64{6}) {
		t.Errorf("after %d more: traced events up to 6 %v, want [6]", tracedEventsMax, got)
	}
	if g.n != tracedEventsMax {
		t.Errorf("remembers %d events, want at most %d", g.n, tracedEventsMax)
	}
	// A sequence not after the last: the stream moved back.
	g.note("acme", 3, eventHeaders(3, "again"))
	if got := seqsOf("acme", 1, 1<<40); !slices.Equal(got, []uint64{3}) {
		t.Errorf("after the stream moved back: %v, want [3]", got)
	}
}

// The grant's span links to the first traced events of its batches
// (at most spanLinksMax) and names their requests; each item's message
// carries the span's context and its own first request ids, bounded.
func TestGrantSpanLinksItsEventsAndMarksItsItems(t *testing.T) {
	t.Parallel()
	rec := tracetest.NewSpanRecorder()
	g := newGrantTracing(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test"))
	// acme's i-th event (trace i) at seq 2i-1, beta's between them.
	for i := 1; i <= 20; i++ {
		g.note("acme", uint64(2*i-1), eventHeaders(i, fmt.Sprintf("req-%d", (i+1)/2)))
		g.note("beta", uint64(2*i), eventHeaders(100+i, "beta-req"))
	}
	p := &grant{k: scheduler.Key{Tenant: "acme", Dest: "postgres"}, source: "index"}
	p.counts = []int{10, 10}
	leases := []tenancy.Lease{{FromSeq: 1, ToSeq: 19}, {FromSeq: 21, ToSeq: 39}}
	ctx, span := g.startGrant(context.Background(), "postgres", p, leases)
	h := nats.Header{}
	g.markItem(ctx, work.Item{Tenant: "acme", FromSeq: 21, ToSeq: 39}, h)
	endGrant(span, 2)

	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if n := len(s.Links()); n != spanLinksMax {
		t.Fatalf("%d links, want %d", n, spanLinksMax)
	}
	for i, l := range s.Links() {
		if want := fmt.Sprintf("%032x", i+1); l.SpanContext.TraceID().String() != want {
			t.Errorf("link %d to trace %s, want %s (acme's seq %d)", i, l.SpanContext.TraceID(), want, 2*i+1)
		}
	}
	attrs := map[string]string{}
	for _, kv := range s.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	for k, v := range map[string]string{"fairway.tenant": "acme", "fairway.dest": "postgres", "fairway.events": "20", "fairway.source": "index",
		"fairway.items": "2", "fairway.request_ids": `["req-1","req-2","req-3","req-4"]`} {
		if attrs[k] != v {
			t.Errorf("attribute %s = %q, want %q", k, attrs[k], v)
		}
	}
	if sc := tracing.SpanContext(h); sc.SpanID() != s.SpanContext().SpanID() {
		t.Errorf("item's traceparent %q, want the grant span's", h.Get(events.HeaderTraceParent))
	}
	if got := h.Values(events.HeaderRequestID); !slices.Equal(got, []string{"req-6", "req-7", "req-8"}) {
		t.Errorf("item's request ids %q, want its first three", got)
	}

	// Long ids: the header stays within itemRequestIDsBytes.
	long := fmt.Sprintf("%0100d", 7)
	g.note("gamma", 500, eventHeaders(500, long))
	g.note("gamma", 501, eventHeaders(501, long+"x"))
	g.note("gamma", 502, eventHeaders(502, "short"))
	h = nats.Header{}
	g.markItem(ctx, work.Item{Tenant: "gamma", FromSeq: 500, ToSeq: 502}, h)
	if got := h.Values(events.HeaderRequestID); !slices.Equal(got, []string{long, "short"}) {
		t.Errorf("request ids %q: want those within %d bytes", got, itemRequestIDsBytes)
	}

	// Not sampled: no header at all.
	never := newGrantTracing(sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())).Tracer("test"))
	never.note("acme", 1, eventHeaders(1, "r"))
	ctx, span = never.startGrant(context.Background(), "postgres", p, leases[:1])
	h = nats.Header{}
	never.markItem(ctx, work.Item{Tenant: "acme", FromSeq: 1, ToSeq: 19}, h)
	endGrant(span, 1)
	if len(h) != 0 || trace.SpanFromContext(ctx).SpanContext().IsSampled() {
		t.Errorf("unsampled grant marked its item: %v", h)
	}
}
