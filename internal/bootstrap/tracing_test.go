package bootstrap

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/fairwayhq/fairway/internal/testenv"
)

func TestTracingFromEnv(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		env     map[string]string
		enabled bool
		err     string // a part of the error; "" for none
	}{
		{name: "nothing set: off", enabled: false},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, enabled: true},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, enabled: true},
		{name: "exporter otlp, default endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, enabled: true},
		{name: "exporter none wins over an endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		{name: "SDK disabled", env: map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"}},
		{name: "http/protobuf", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, enabled: true},
		{name: "grpc refused", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			err: `OTEL_EXPORTER_OTLP_PROTOCOL="grpc": fairway exports OTLP over HTTP only`},
		{name: "traces protocol wins", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, enabled: true},
		{name: "protocol ignored when off", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}},
		{name: "other exporter refused", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, err: `OTEL_TRACES_EXPORTER="zipkin"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := TracingFromEnv(ServiceIngest, func(k string) string { return c.env[k] })
			switch {
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("err = %v, want one saying %q", err, c.err)
			case c.err == "" && err != nil:
				t.Fatal(err)
			case c.err == "" && cfg.Enabled != c.enabled:
				t.Errorf("enabled = %v, want %v", cfg.Enabled, c.enabled)
			}
			if cfg.Service != ServiceIngest {
				t.Errorf("service %q, want %q", cfg.Service, ServiceIngest)
			}
		})
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// With an endpoint set, StartTracing exports to it over OTLP/HTTP, as the
// binary's service unless OTEL_SERVICE_NAME names another, and Shutdown
// sends what is still batched. (t.Setenv: the SDK reads the process
// environment, so the test is not parallel.)
func TestStartTracingExportsAndFlushes(t *testing.T) {
	for _, c := range []struct{ serviceEnv, want string }{{"", ServiceSinks}, {"sinks-eu", "sinks-eu"}} {
		recv := testenv.StartOTLPReceiver(t)
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
		t.Setenv("OTEL_SERVICE_NAME", c.serviceEnv)
		t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "60000") // only Shutdown sends
		cfg, err := TracingFromEnv(ServiceSinks, os.Getenv)
		if err != nil || !cfg.Enabled {
			t.Fatalf("TracingFromEnv = %+v, %v", cfg, err)
		}
		tr, err := StartTracing(context.Background(), cfg, quietLog())
		if err != nil {
			t.Fatal(err)
		}
		if tr.Tracer() == nil {
			t.Fatal("tracing on, but no tracer")
		}
		_, span := tr.Tracer().Start(context.Background(), "test span")
		span.End()
		if n := recv.Requests(); n != 0 {
			t.Fatalf("%d exports before Shutdown; the batch delay is a minute", n)
		}
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		spans := recv.Spans()
		if len(spans) != 1 || spans[0].GetName() != "test span" || spans[0].Service != c.want {
			t.Fatalf("received %v, want the test span of service %s", spans, c.want)
		}
	}
}

// Off, there is no tracer and no exporter: an endpoint set together with
// OTEL_TRACES_EXPORTER=none receives nothing.
func TestTracingOffStartsNoExporter(t *testing.T) {
	recv := testenv.StartOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	t.Setenv("OTEL_TRACES_EXPORTER", "none")
	cfg, err := TracingFromEnv(ServiceIngest, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := StartTracing(context.Background(), cfg, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	if tr.Tracer() != nil || tr.tp != nil {
		t.Fatal("tracing off, but a tracer provider was made")
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := recv.Requests(); n != 0 {
		t.Errorf("%d export requests with tracing off", n)
	}
}
