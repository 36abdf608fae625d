package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/status"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/b2b"
)

// Config is everything the dispatcher command reads from flags and env.
type Config struct {
	Listen       string
	NATS         bootstrap.NATSConfig
	DatabaseURL  string
	LeaseTTL     time.Duration
	WorkReplicas int
	WorkStorage  string
	Dispatch     dispatch.Config
	// TenantMetrics configures the backlog gauges; TopK 0 turns them off.
	TenantMetrics status.ExporterConfig
	Log           bootstrap.LogConfig
	Logger        *slog.Logger
	// MemoryLimit is the soft memory limit given to Go's garbage collector
	// (bootstrap.SetMemoryLimit); 0 leaves the runtime's.
	MemoryLimit bootstrap.Bytes
	// Tracing is read from the standard OTEL_* variables; off by default.
	Tracing bootstrap.TracingConfig
}

// MemoryLimitDefault keeps the dispatcher within about 512 MB with the
// default body budget and a backlog of 1,000,000 events over two
// destinations (docs/benchmarks.md, BenchmarkDispatcherMemory).
const MemoryLimitDefault = 448 << 20

func run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	bootstrap.SetMemoryLimit(int64(cfg.MemoryLimit))
	tracing, err := bootstrap.StartTracing(ctx, cfg.Tracing, log)
	if err != nil {
		return err
	}
	defer tracing.Close(log) // last: after everything that makes spans stopped
	startCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	pool, err := bootstrap.OpenPostgres(startCtx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := tenancy.New(pool, &tenancy.Config{LeaseTTL: cfg.LeaseTTL, Logger: log})
	if err != nil {
		return err
	}
	nc, err := bootstrap.ConnectNATS(startCtx, cfg.NATS, "fairway-dispatcher", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	// The doorbell gets a connection of its own (dispatch.Deps.Doorbell),
	// with the same URL and credentials, so its deliveries never wait on a
	// socket busy with reads and work item publishes.
	bellNC, err := bootstrap.ConnectNATS(startCtx, cfg.NATS, "fairway-dispatcher-doorbell", log)
	if err != nil {
		return err
	}
	defer bellNC.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	// The dispatcher owns WORK: it creates it and applies its settings.
	// PRODUCTS belongs to ingest: wait for it, however long that takes
	// (docs/operating.md).
	workCfg := work.StreamConfig{Replicas: cfg.WorkReplicas, Storage: cfg.WorkStorage}
	ensureWork := func(ctx context.Context) error {
		s, err := work.EnsureStream(ctx, js, workCfg)
		if err == nil {
			if kept := work.KeptStorage(s, workCfg); kept != "" {
				log.Warn("stream WORK keeps its "+kept+" storage: JetStream cannot change a stream's storage (docs/operating.md, \"WORK storage\")",
					"stream", work.StreamName, "storage", kept, "work_storage", workCfg.WithDefaults().Storage)
			}
		}
		return err
	}
	if err := bootstrap.UntilRefused(startCtx, nc, ensureWork); err != nil {
		return err
	}
	// WORK is gone when it was in memory and its server restarted, or
	// someone deleted it: create it again, as ingest does PRODUCTS. The
	// items it held are dispatched again once their leases expire.
	go bootstrap.KeepStream(ctx, js, work.StreamName, bootstrap.KeepStreamEvery, ensureWork, log)
	if _, err := bootstrap.AwaitStream(ctx, js, events.StreamName, "ingest", log); err != nil {
		return err
	}
	reg := bootstrap.NewRegistry()
	// Each tenant's enabled partners add "b2b:<partner>" destinations
	// (fairway partners add). Listing partners needs no secret key.
	partners, err := b2b.NewRegistry(pool, nil)
	if err != nil {
		return err
	}
	d, err := dispatch.New(dispatch.Deps{Store: store, NATS: nc, Doorbell: bellNC, Registry: reg, Logger: log, Partners: partners,
		Tracer: tracing.Tracer()}, &cfg.Dispatch)
	if err != nil {
		return err
	}
	var backlog *status.Exporter
	if cfg.TenantMetrics.TopK > 0 {
		cfg.TenantMetrics.Logger = log
		// No dead letters: the gauges need backlog and slots only.
		backlog, err = status.NewExporter(&status.Source{Pairs: store, Reader: work.NewReader(nc, "")}, reg, &cfg.TenantMetrics)
		if err != nil {
			return err
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if !nc.IsConnected() {
			http.Error(w, "nats disconnected", http.StatusServiceUnavailable)
			return
		}
		if !bellNC.IsConnected() {
			http.Error(w, "nats (doorbell connection) disconnected", http.StatusServiceUnavailable)
			return
		}
		if err := pool.Ping(r.Context()); err != nil {
			http.Error(w, "postgres: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	log.Info("dispatcher listening", "addr", ln.Addr().String())
	httpCtx, stopHTTP := context.WithCancel(context.WithoutCancel(ctx))
	httpDone := make(chan error, 1)
	go func() { httpDone <- bootstrap.Serve(httpCtx, bootstrap.HTTPServer(mux, log), ln, 5*time.Second) }()

	// Run returns after its two-phase shutdown: no new grants, in-flight
	// batches published or handed back. Metrics stay up until then. Run
	// also returns on its own (the stream went back): the sampler stops
	// then too, and the process exits for its supervisor to restart it.
	exportCtx, stopExport := context.WithCancel(ctx)
	exportDone := make(chan struct{})
	go func() {
		defer close(exportDone)
		if backlog != nil {
			_ = backlog.Run(exportCtx)
		}
	}()
	runErr := d.Run(ctx)
	stopExport()
	<-exportDone
	stopHTTP()
	if err := <-httpDone; err != nil {
		log.Warn("http server", "err", err)
	}
	bootstrap.DrainNATS(nc, 10*time.Second, log)
	bootstrap.DrainNATS(bellNC, 10*time.Second, log)
	return runErr
}
