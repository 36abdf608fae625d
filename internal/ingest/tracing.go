package ingest

import (
	"context"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairwayhq/fairway/internal/tracing"
	"github.com/fairwayhq/fairway/pkg/events"
)

// Spans of ingest, made only with Deps.Tracer set (tracing on): a server
// span per API request, continuing the client's trace when it sent a
// traceparent, and a producer span per Publish call below it, whose
// context every stored event carries (events.HeaderTraceParent) when it
// is sampled, for the dispatcher's spans to link to.

// startRequest starts the span of request r, whose request id is rid.
func (s *Server) startRequest(ctx context.Context, r *http.Request, route, rid string) (context.Context, trace.Span) {
	ctx = tracing.ExtractHTTP(ctx, r.Header)
	name := r.Pattern // "POST /v1/tenants/{tenant}/events": bounded
	if name == "" {
		name = route
	}
	_, path, _ := strings.Cut(name, " ")
	attrs := []attribute.KeyValue{
		attribute.String("http.request.method", r.Method),
		attribute.String("http.route", path),
		tracing.RequestID.String(rid),
	}
	if t := r.PathValue("tenant"); t != "" {
		attrs = append(attrs, tracing.Tenant.String(t))
	}
	return s.deps.Tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// endRequest ends a request's span with its status code.
func endRequest(span trace.Span, code int) {
	span.SetAttributes(attribute.Int("http.response.status_code", code))
	if code >= http.StatusInternalServerError {
		span.SetStatus(codes.Error, http.StatusText(code))
	}
	span.End()
}

// startPublish starts the span of publishing n events of tenant, and
// returns the context to publish with: with the span's traceparent for
// the stored events when it is sampled. Without a tracer it returns ctx
// and a nil span.
func (s *Server) startPublish(ctx context.Context, tenant string, n int) (context.Context, trace.Span) {
	if s.deps.Tracer == nil {
		return ctx, nil
	}
	ctx, span := s.deps.Tracer.Start(ctx, "publish "+events.StreamName, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(tracing.Tenant.String(tenant), tracing.Events.Int(n),
			tracing.RequestID.String(events.RequestIDFromContext(ctx))))
	if tp := tracing.TraceParent(ctx); tp != "" {
		ctx = events.ContextWithTraceParent(ctx, tp)
	}
	return ctx, span
}

// endPublish ends a publish span (nil: none) with the call's outcome.
func endPublish(span trace.Span, res []events.Result) {
	if span == nil {
		return
	}
	var stored, duplicates, failed int
	for _, r := range res {
		switch {
		case r.Err != nil:
			failed++
		case r.Duplicate:
			duplicates++
		default:
			stored++
		}
	}
	span.SetAttributes(attribute.Int("fairway.stored", stored), attribute.Int("fairway.duplicates", duplicates), attribute.Int("fairway.failed", failed))
	if failed > 0 {
		span.SetStatus(codes.Error, "events not stored")
	}
	span.End()
}
