// Package tracing is what fairway's services share of OpenTelemetry
// tracing: the attribute keys of their spans, and the W3C trace context
// carried in NATS message headers from ingest (on the stored event,
// events.HeaderTraceParent) and from the dispatcher (on the work item) to
// the sinks. bootstrap.StartTracing makes the tracer; ingest, the
// dispatcher and the sink runner take it as a dependency, and a nil tracer
// means tracing is off: they check for nil and do nothing else.
// docs/operating.md says how to turn it on.
package tracing

import (
	"context"
	"net/http"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairwayhq/fairway/pkg/events"
)

// Name is the instrumentation scope of every fairway span
// (TracerProvider.Tracer).
const Name = "github.com/fairwayhq/fairway"

// Attribute keys of fairway's spans.
const (
	// RequestID is the ingest request's id (the X-Request-Id answer,
	// events.HeaderRequestID on the stored events).
	RequestID = attribute.Key("fairway.request_id")
	// RequestIDs are the distinct request ids of the events a dispatch or
	// an apply handles, the first few of them.
	RequestIDs = attribute.Key("fairway.request_ids")
	Tenant     = attribute.Key("fairway.tenant")
	Dest       = attribute.Key("fairway.dest")
	// Events counts the events a span handles.
	Events = attribute.Key("fairway.events")
	// Source is where a grant's events came from (index, dense, feed,
	// read: fairway_dispatcher_grants_total{source}).
	Source = attribute.Key("fairway.source")
	// Item is a work item's id (work.Item.MsgID).
	Item = attribute.Key("fairway.item")
	// Seq is an event's PRODUCTS sequence (on a span link).
	Seq = attribute.Key("fairway.seq")
	// Outcome is how a work item ended (fairway_sink_items_total{outcome}).
	Outcome = attribute.Key("fairway.outcome")
)

// propagator reads and writes the W3C traceparent (and tracestate).
var propagator = propagation.TraceContext{}

// headerCarrier adapts a nats.Header, whose keys are case-sensitive, to
// the propagator: it reads and writes the W3C names as they are.
type headerCarrier nats.Header

func (c headerCarrier) Get(key string) string { return nats.Header(c).Get(key) }
func (c headerCarrier) Set(key, v string)     { nats.Header(c).Set(key, v) }
func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// InjectSampled writes the trace context of ctx's span into h, only when
// that span is sampled: a header costs publish throughput
// (docs/design.md), and an unsampled context is worth nothing downstream.
// It says whether it wrote. h must not be nil.
func InjectSampled(ctx context.Context, h nats.Header) bool {
	if !trace.SpanContextFromContext(ctx).IsSampled() {
		return false
	}
	propagator.Inject(ctx, headerCarrier(h))
	return true
}

// Extract returns ctx with the remote span context h carries, or ctx
// itself when h carries none (or a malformed one).
func Extract(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return propagator.Extract(ctx, headerCarrier(h))
}

// SpanContext returns the span context h carries; not valid when none.
func SpanContext(h nats.Header) trace.SpanContext {
	return trace.SpanContextFromContext(Extract(context.Background(), h))
}

// TraceParent returns the W3C traceparent of ctx's span when it is
// sampled, else "".
func TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsSampled() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c.Get(events.HeaderTraceParent)
}

// ExtractHTTP returns ctx with the remote span context of an HTTP
// request's traceparent header, or ctx itself when it has none.
func ExtractHTTP(ctx context.Context, h http.Header) context.Context {
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}
