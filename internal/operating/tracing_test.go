package operating

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/testenv"
)

// With OTEL_EXPORTER_OTLP_ENDPOINT set, as docs/operating.md says, one
// event's path reaches an OTLP collector as the spans of three
// processes, each naming the ingest request id: ingest's request and its
// publish; the dispatcher's grant, linked to that publish; and the sink's
// apply, the grant's child. The batching delay is an hour, so every span
// arrives at the exit of its process: the services flush on SIGTERM.
func TestTracesFollowAnEventThroughTheServices(t *testing.T) {
	t.Parallel()
	bin := binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	nats := startNATS(t)
	dsn, pool, token := acmeDatabase(ctx, t)
	recv := testenv.StartOTLPReceiver(t)
	ingestAddr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	env := func(user string) []string {
		return []string{"DATABASE_URL=" + dsn, "NATS_URL=" + nats.url(user),
			"OTEL_EXPORTER_OTLP_ENDPOINT=" + recv.URL, "OTEL_BSP_SCHEDULE_DELAY=3600000"}
	}
	ingest := start(t, filepath.Join(bin, "ingest"), env("ingest"), "--listen", ingestAddr)
	dispatcher := start(t, filepath.Join(bin, "dispatcher"), env("dispatcher"), "--dest", "postgres",
		"--listen", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)))
	sinks := start(t, filepath.Join(bin, "sinks"), env("sinks"), "--dest", "postgres",
		"--listen", fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t)))
	// The dispatcher follows the stream (its doorbell, which sees the
	// events' trace contexts) once it says it runs.
	testenv.Eventually(t, time.Minute, "the dispatcher running", func() error {
		if !strings.Contains(dispatcher.out.String(), "dispatcher running") {
			return errors.New("it has not said so")
		}
		return nil
	})

	const rid = "trace-test-1"
	postEvents(ctx, t, ingestAddr, "acme", token, `[{"product_id":"p1","version":1,"op":"upsert","payload":{"name":"Chair"}}]`,
		http.Header{"X-Request-Id": {rid}})
	waitProduct(ctx, t, pool, "acme", "p1")
	if n := recv.Requests(); n != 0 {
		t.Fatalf("%d exports before the services stopped; the batching delay is an hour", n)
	}
	for _, p := range []*proc{ingest, dispatcher, sinks} {
		p.signal()
	}
	for _, p := range []*proc{ingest, dispatcher, sinks} {
		p.stop(t)
	}

	spans := recv.Spans()
	find := func(service, name string) testenv.Span {
		t.Helper()
		var found []testenv.Span
		for _, s := range spans {
			if s.Service == service && s.GetName() == name {
				found = append(found, s)
			}
		}
		if len(found) != 1 {
			var all []string
			for _, s := range spans {
				all = append(all, s.Service+" "+s.GetName())
			}
			t.Fatalf("%d spans %q of %s, want 1; received %q", len(found), name, service, all)
		}
		return found[0]
	}
	request := find("fairway-ingest", "POST /v1/tenants/{tenant}/events")
	publish := find("fairway-ingest", "publish PRODUCTS")
	dispatch := find("fairway-dispatcher", "dispatch")
	apply := find("fairway-sinks", "apply")

	if got := request.Attr("fairway.request_id").GetStringValue(); got != rid {
		t.Errorf("request span's request id %q, want %q", got, rid)
	}
	if publish.TraceID() != request.TraceID() || publish.ParentSpanID() != request.SpanID() {
		t.Errorf("publish span (trace %s, parent %s) is not the request's child (trace %s, span %s)",
			publish.TraceID(), publish.ParentSpanID(), request.TraceID(), request.SpanID())
	}
	linked := false
	for _, l := range dispatch.GetLinks() {
		if fmt.Sprintf("%x", l.GetTraceId()) == publish.TraceID() && fmt.Sprintf("%x", l.GetSpanId()) == publish.SpanID() {
			linked = true
		}
	}
	if !linked {
		t.Errorf("dispatch span's links %v do not reach the publish span (trace %s, span %s)", dispatch.GetLinks(), publish.TraceID(), publish.SpanID())
	}
	if apply.TraceID() != dispatch.TraceID() || apply.ParentSpanID() != dispatch.SpanID() {
		t.Errorf("apply span (trace %s, parent %s) is not the dispatch span's child (trace %s, span %s)",
			apply.TraceID(), apply.ParentSpanID(), dispatch.TraceID(), dispatch.SpanID())
	}
	for _, s := range []testenv.Span{dispatch, apply} {
		if ids := testenv.StringsAttr(s.GetAttributes(), "fairway.request_ids"); !slices.Contains(ids, rid) {
			t.Errorf("%s span's request ids %q, want %q among them", s.GetName(), ids, rid)
		}
		if got := s.Attr("fairway.tenant").GetStringValue(); got != "acme" {
			t.Errorf("%s span's tenant %q, want acme", s.GetName(), got)
		}
	}
	if got := apply.Attr("fairway.outcome").GetStringValue(); got != "done" {
		t.Errorf("apply span's outcome %q, want done", got)
	}
}
