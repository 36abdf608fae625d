package runner

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairwayhq/fairway/internal/tracing"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
)

// startItem starts the span of work item it, from fetch to ack or nak
// (Deps.Tracer set): the child of the dispatcher's grant span when msg
// carries its context (internal/dispatch tracing.go), named after the
// requests of the item's events that msg names. The sink's Apply gets
// the span in its context.
func (r *Runner) startItem(ctx context.Context, msg jetstream.Msg, it work.Item, deliveries uint64) (context.Context, trace.Span) {
	h := msg.Headers()
	ctx = tracing.Extract(ctx, h)
	return r.tracer.Start(ctx, "apply", trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(
		tracing.Tenant.String(it.Tenant), tracing.Dest.String(r.cfg.Dest), tracing.Item.String(it.MsgID()),
		tracing.Events.Int(it.Count), tracing.RequestIDs.StringSlice(h.Values(events.HeaderRequestID)),
		attribute.Bool("fairway.replay", it.Replay), attribute.Int64("fairway.delivery", int64(deliveries))))
}

// endItem ends an item's span with its outcome and the events applied.
func endItem(span trace.Span, outcome string, applied int) {
	span.SetAttributes(tracing.Outcome.String(outcome), attribute.Int("fairway.applied", applied))
	if outcome != outcomeDone {
		span.SetStatus(codes.Error, outcome)
	}
	span.End()
}
