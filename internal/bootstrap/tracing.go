package bootstrap

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairwayhq/fairway/internal/tracing"
)

// Service names of the binaries: the default service.name of their
// traces.
const (
	ServiceIngest     = "fairway-ingest"
	ServiceDispatcher = "fairway-dispatcher"
	ServiceSinks      = "fairway-sinks"
)

// TracingEnv are the standard OpenTelemetry variables a service's --help
// names (Command.EnvOnly): the ones that turn tracing on and name the
// service. The OpenTelemetry SDK reads the others it defines itself.
var TracingEnv = []EnvVar{
	{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Usage: "OTLP/HTTP collector (http://host:4318): traces are exported when set; off by default (docs/operating.md, Tracing)"},
	{Name: "OTEL_SERVICE_NAME", Usage: "service.name of the traces (default fairway-<binary>)"},
}

// TracingConfig says whether a service exports traces, and its default
// service name. TracingFromEnv reads it from the standard OTEL_*
// variables.
type TracingConfig struct {
	// Enabled turns the OTLP exporter on. Off by default.
	Enabled bool
	// Service is the service.name of the traces unless OTEL_SERVICE_NAME
	// (or service.name in OTEL_RESOURCE_ATTRIBUTES) names another:
	// ServiceIngest, ServiceDispatcher or ServiceSinks.
	Service string
	// Endpoint is the collector's address as configured, for the log line.
	Endpoint string
}

// TracingFromEnv reads whether tracing is on, by the OpenTelemetry rules
// except the default: it is off unless OTEL_TRACES_EXPORTER is otlp, or
// an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) and OTEL_TRACES_EXPORTER is not
// none; OTEL_SDK_DISABLED=true turns it off. fairway exports OTLP over
// HTTP only: another exporter or protocol is an error that says so.
// service is the binary's service name (ServiceIngest, …).
func TracingFromEnv(service string, getenv func(string) string) (TracingConfig, error) {
	c := TracingConfig{Service: service,
		Endpoint: cmp.Or(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))}
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return c, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return c, nil
	case "otlp":
		c.Enabled = true
	case "":
		c.Enabled = c.Endpoint != ""
	default:
		return c, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: fairway exports traces with otlp (or none)", exp)
	}
	if !c.Enabled {
		return c, nil
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(v)); p != "" {
			if p != "http/protobuf" {
				return c, fmt.Errorf("%s=%q: fairway exports OTLP over HTTP only: http/protobuf, to the collector's port 4318", v, p)
			}
			break
		}
	}
	c.Endpoint = cmp.Or(c.Endpoint, "http://localhost:4318")
	return c, nil
}

// Tracing is a service's trace pipeline: an OTLP/HTTP exporter behind a
// batching span processor. With tracing off it holds nothing, Tracer is
// nil and Shutdown does nothing.
type Tracing struct {
	tp *sdktrace.TracerProvider
}

// StartTracing starts the trace pipeline cfg asks for. The OpenTelemetry
// SDK reads the rest of its standard variables from the process
// environment: the endpoint, headers, timeout, compression and TLS files
// of the exporter (OTEL_EXPORTER_OTLP_*), the sampler
// (OTEL_TRACES_SAMPLER, default parentbased_always_on), the batching
// (OTEL_BSP_*) and the resource (OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES). Export errors are logged to log. Call
// Shutdown on exit: it sends the spans still batched.
func StartTracing(ctx context.Context, cfg TracingConfig, log *slog.Logger) (*Tracing, error) {
	if !cfg.Enabled {
		return &Tracing{}, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	// Later options override earlier ones: the variables win over the
	// binary's name.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", cfg.Service)),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource from OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	// The SDK reports export failures through this process-wide handler;
	// set once, by the service's start-up, like the logger.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing", "err", err) }))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	name, _ := res.Set().Value("service.name")
	log.Info("tracing on: exporting spans over OTLP/HTTP", "endpoint", cfg.Endpoint, "service", name.AsString())
	return &Tracing{tp: tp}, nil
}

// Tracer returns the tracer the services' components take, or nil when
// tracing is off.
func (t *Tracing) Tracer() trace.Tracer {
	if t == nil || t.tp == nil {
		return nil
	}
	return t.tp.Tracer(tracing.Name)
}

// Shutdown exports the spans still batched and stops the exporter, within
// ctx. It does nothing when tracing is off.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.tp == nil {
		return nil
	}
	if err := t.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: flush spans: %w", err)
	}
	return nil
}

// TracingShutdownTimeout bounds Close's flush.
const TracingShutdownTimeout = 5 * time.Second

// Close is Shutdown for a service's exit: within TracingShutdownTimeout,
// a failure logged to log.
func (t *Tracing) Close(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), TracingShutdownTimeout)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("spans not exported at exit", "err", err)
	}
}
