package dispatch

import (
	"context"
	"slices"
	"sort"
	"sync"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairwayhq/fairway/internal/tracing"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Tracing (Deps.Tracer; nil: off, and nothing here runs). A work item
// holds many events from many ingest requests, so a grant's span is not
// the child of any of them: it links to the trace contexts of the first
// of its events (spanLinksMax), which the doorbell sees in their headers
// (events.HeaderTraceParent, present when the ingest request was
// sampled). Each item's WORK message carries the grant span's context,
// when sampled, and the request ids of its first events, so the sink's
// span is the grant's child and names the requests.

const (
	// spanLinksMax bounds a grant span's links and the request ids it
	// names.
	spanLinksMax = 8
	// itemRequestIDsMax and itemRequestIDsBytes bound the request ids a
	// work item's message carries (events.HeaderRequestID): they take
	// room from the item's body (maxItem leaves 512 bytes for headers).
	itemRequestIDsMax   = 3
	itemRequestIDsBytes = 128
	// tracedEventsMax bounds the traced events a dispatcher remembers:
	// the last ones the doorbell delivered. A batch dispatched after more
	// traced events than this arrived behind it links to none.
	tracedEventsMax = 4096
)

// grantTracing is the dispatcher's tracer and the trace contexts of the
// events the doorbell delivered last.
type grantTracing struct {
	tracer trace.Tracer

	mu       sync.Mutex
	ring     []tracedEvent // ring[(start+i)%len] for i < n, ascending seq
	start, n int
}

// tracedEvent is an event whose headers held a trace context.
type tracedEvent struct {
	seq       uint64
	tenant    string
	sc        trace.SpanContext
	requestID string
}

// newGrantTracing returns nil for a nil tracer: tracing off.
func newGrantTracing(t trace.Tracer) *grantTracing {
	if t == nil {
		return nil
	}
	return &grantTracing{tracer: t, ring: make([]tracedEvent, tracedEventsMax)}
}

// note remembers the trace context of tenant's event seq from its
// headers, if they hold one. Sequences arrive in stream order; one not
// after the last means the stream moved back, and what was remembered is
// forgotten.
func (g *grantTracing) note(tenant string, seq uint64, h nats.Header) {
	if h.Get(events.HeaderTraceParent) == "" {
		return
	}
	sc := tracing.SpanContext(h)
	if !sc.IsValid() {
		return
	}
	e := tracedEvent{seq: seq, tenant: tenant, sc: sc, requestID: h.Get(events.HeaderRequestID)}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n > 0 && g.at(g.n-1).seq >= seq {
		g.start, g.n = 0, 0
	}
	if g.n == len(g.ring) {
		g.ring[g.start] = e
		g.start = (g.start + 1) % len(g.ring)
		return
	}
	g.ring[(g.start+g.n)%len(g.ring)] = e
	g.n++
}

func (g *grantTracing) at(i int) *tracedEvent { return &g.ring[(g.start+i)%len(g.ring)] }

// each calls f with tenant's remembered events in [from, to], in order,
// while f returns true.
func (g *grantTracing) each(tenant string, from, to uint64, f func(*tracedEvent) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := sort.Search(g.n, func(i int) bool { return g.at(i).seq >= from }); i < g.n; i++ {
		e := g.at(i)
		if e.seq > to {
			return
		}
		if e.tenant == tenant && !f(e) {
			return
		}
	}
}

// startGrant starts the span of a grant's publish: linked to the first
// traced events of its committed batches, named after their requests.
func (g *grantTracing) startGrant(ctx context.Context, dest string, p *grant, leases []tenancy.Lease) (context.Context, trace.Span) {
	var (
		links []trace.Link
		ids   []string
	)
	for _, l := range leases {
		g.each(p.k.Tenant, l.FromSeq, l.ToSeq, func(e *tracedEvent) bool {
			links = append(links, trace.Link{SpanContext: e.sc, Attributes: []attribute.KeyValue{tracing.Seq.Int64(int64(e.seq)), tracing.RequestID.String(e.requestID)}})
			if e.requestID != "" && !slices.Contains(ids, e.requestID) {
				ids = append(ids, e.requestID)
			}
			return len(links) < spanLinksMax
		})
		if len(links) == spanLinksMax {
			break
		}
	}
	return g.tracer.Start(ctx, "dispatch", trace.WithSpanKind(trace.SpanKindProducer), trace.WithLinks(links...),
		trace.WithAttributes(tracing.Tenant.String(p.k.Tenant), tracing.Dest.String(dest), tracing.Source.String(p.source),
			tracing.Events.Int(sum(p.counts[:len(leases)])), tracing.RequestIDs.StringSlice(ids)))
}

// endGrant ends a grant's span, saying how many items went out.
func endGrant(span trace.Span, items int) {
	span.SetAttributes(attribute.Int("fairway.items", items))
	span.End()
}

// markItem puts the grant span's context (ctx), when sampled, on the
// message h of work item it, with the request ids of its first traced
// events.
func (g *grantTracing) markItem(ctx context.Context, it work.Item, h nats.Header) {
	if !tracing.InjectSampled(ctx, h) {
		return
	}
	var ids []string
	size := 0
	g.each(it.Tenant, it.FromSeq, it.ToSeq, func(e *tracedEvent) bool {
		if e.requestID == "" || slices.Contains(ids, e.requestID) || size+len(e.requestID) > itemRequestIDsBytes {
			return true
		}
		ids = append(ids, e.requestID)
		size += len(e.requestID)
		return len(ids) < itemRequestIDsMax
	})
	for _, id := range ids {
		h.Add(events.HeaderRequestID, id)
	}
}
