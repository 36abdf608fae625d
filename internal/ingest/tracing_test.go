package ingest_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairwayhq/fairway/internal/ingest"
	"github.com/fairwayhq/fairway/pkg/events"
)

// The stored events carry the trace context of their publish only when
// tracing is on and the request is sampled: the header costs publish
// throughput. A client's traceparent is continued.
func TestStoredEventsCarryTheSampledTraceContext(t *testing.T) {
	t.Parallel()
	f := setup(t, ingest.Config{})
	const (
		clientTrace = "0af7651916cd43dd8448eb211c80319c"
		clientSpan  = "b7ad6b7169203331"
	)
	sampled := sdktrace.NewTracerProvider().Tracer("test") // parentbased_always_on, as by default
	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample())).Tracer("test")
	for i, c := range []struct {
		name        string
		tracer      trace.Tracer
		traceparent string // the client's
		want        string // the stored header's trace id: clientTrace, "new", or "" for no header
	}{
		{name: "tracing off", tracer: nil, traceparent: "00-" + clientTrace + "-" + clientSpan + "-01", want: ""},
		{name: "client's sampled trace continued", tracer: sampled, traceparent: "00-" + clientTrace + "-" + clientSpan + "-01", want: clientTrace},
		{name: "client's trace not sampled", tracer: sampled, traceparent: "00-" + clientTrace + "-" + clientSpan + "-00", want: ""},
		{name: "no client trace: one of its own", tracer: sampled, want: "new"},
		{name: "sampler says no", tracer: never, want: ""},
	} {
		deps := f.deps
		deps.Tracer = c.tracer
		_, url := serve(t, deps, ingest.Config{SpoolDir: t.TempDir(), Logger: quietLogger()})
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/tenants/acme/events", ndjson(ev("p1", int64(i+1))))
		req.Header.Set("Authorization", "Bearer "+f.tokens["acme"])
		req.Header.Set("Content-Type", "application/x-ndjson")
		if c.traceparent != "" {
			req.Header.Set("traceparent", c.traceparent)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("%s: status %d: %s", c.name, resp.StatusCode, body)
		}
		m, err := f.stream.GetMsg(context.Background(), decode(t, body).Results[0].Seq)
		if err != nil {
			t.Fatal(err)
		}
		got := m.Header.Values(events.HeaderTraceParent)
		switch {
		case c.want == "" && got != nil:
			t.Errorf("%s: stored header %s = %q, want none", c.name, events.HeaderTraceParent, got)
		case c.want == "":
		case len(got) != 1:
			t.Errorf("%s: stored header %s = %q, want one", c.name, events.HeaderTraceParent, got)
		default:
			parts := strings.Split(got[0], "-")
			if len(parts) != 4 || parts[3] != "01" || parts[2] == clientSpan ||
				(c.want == clientTrace) != (parts[1] == clientTrace) {
				t.Errorf("%s: stored traceparent %q, want a sampled child span in trace %s", c.name, got[0], c.want)
			}
		}
	}
}
