package testenv

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// OTLPReceiver is an OpenTelemetry collector for tests: an HTTP server
// that accepts OTLP/HTTP protobuf trace exports on /v1/traces (gzip or
// not), decodes them with the OTLP types, and keeps their spans. Point a
// service at it with OTEL_EXPORTER_OTLP_ENDPOINT=URL.
type OTLPReceiver struct {
	// URL is the receiver's base URL (http://127.0.0.1:port).
	URL string

	mu       sync.Mutex
	requests int
	spans    []Span
}

// Span is one received span and the service.name of the resource that
// sent it.
type Span struct {
	Service string
	*tracepb.Span
}

// StartOTLPReceiver starts a receiver, closed at the end of the test.
func StartOTLPReceiver(t testing.TB) *OTLPReceiver {
	t.Helper()
	r := &OTLPReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *OTLPReceiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "want POST /v1/traces", http.StatusNotFound)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "want application/x-protobuf, got "+ct, http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var export coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &export); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.requests++
	for _, rs := range export.ResourceSpans {
		service := StringAttr(rs.GetResource().GetAttributes(), "service.name")
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, Span{Service: service, Span: s})
			}
		}
	}
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// Requests counts the export requests received.
func (r *OTLPReceiver) Requests() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests
}

// Spans returns the spans received so far, in the order they came.
func (r *OTLPReceiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Attr returns the value of the span's attribute key, nil if it has none.
func (s Span) Attr(key string) *commonpb.AnyValue {
	return attr(s.GetAttributes(), key)
}

// TraceID and SpanID are the span's ids in hex, as a traceparent writes
// them.
func (s Span) TraceID() string { return hex.EncodeToString(s.GetTraceId()) }
func (s Span) SpanID() string  { return hex.EncodeToString(s.GetSpanId()) }

// ParentSpanID is the span's parent's id in hex, "" for a root span.
func (s Span) ParentSpanID() string { return hex.EncodeToString(s.GetParentSpanId()) }

// StringAttr returns the string value of attribute key in kvs, "" if none.
func StringAttr(kvs []*commonpb.KeyValue, key string) string {
	return attr(kvs, key).GetStringValue()
}

// StringsAttr returns the values of a string array attribute key in kvs.
func StringsAttr(kvs []*commonpb.KeyValue, key string) []string {
	var out []string
	for _, v := range attr(kvs, key).GetArrayValue().GetValues() {
		out = append(out, v.GetStringValue())
	}
	return out
}

func attr(kvs []*commonpb.KeyValue, key string) *commonpb.AnyValue {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}
