package tracing

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairwayhq/fairway/pkg/events"
)

func tracer(s sdktrace.Sampler) trace.Tracer {
	return sdktrace.NewTracerProvider(sdktrace.WithSampler(s)).Tracer(Name)
}

// A sampled span's context goes into the header pkg/events names, and
// comes back out as the same (remote) span context; an unsampled one
// writes nothing.
func TestHeaderCarriesSampledContext(t *testing.T) {
	t.Parallel()
	ctx, span := tracer(sdktrace.AlwaysSample()).Start(context.Background(), "s")
	defer span.End()
	h := nats.Header{}
	if !InjectSampled(ctx, h) {
		t.Fatal("sampled span not injected")
	}
	if got, want := h.Get(events.HeaderTraceParent), TraceParent(ctx); got == "" || got != want {
		t.Fatalf("header %s = %q, TraceParent = %q", events.HeaderTraceParent, got, want)
	}
	sc := SpanContext(h)
	if !sc.IsRemote() || sc.TraceID() != span.SpanContext().TraceID() || sc.SpanID() != span.SpanContext().SpanID() || !sc.IsSampled() {
		t.Errorf("extracted %+v, want the span's context", sc)
	}

	ctx, unsampled := tracer(sdktrace.NeverSample()).Start(context.Background(), "u")
	defer unsampled.End()
	h = nats.Header{}
	if InjectSampled(ctx, h) || len(h) != 0 || TraceParent(ctx) != "" {
		t.Errorf("unsampled span wrote %v", h)
	}
	if SpanContext(nats.Header{events.HeaderTraceParent: {"garbage"}}).IsValid() || SpanContext(nil).IsValid() {
		t.Error("a malformed or missing header gave a valid context")
	}
}
