package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/sink/runner"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks"
	"github.com/fairwayhq/fairway/sinks/b2b"
)

func run(ctx context.Context, cfg Config) error {
	// The runner and the B2B sink get cfg.Runner.Logger and add dest=
	// themselves; the lines of this process get it here.
	log := cfg.Runner.Logger.With("dest", cfg.Dest)
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
	store, err := tenancy.New(pool, &tenancy.Config{Logger: log})
	if err != nil {
		return err
	}
	if cfg.Runner.ExtendEvery >= store.LeaseTTL()/2 {
		log.Warn("--extend-every is not well below the lease TTL; leases may expire under slow items",
			"extend_every", cfg.Runner.ExtendEvery, "lease_ttl", store.LeaseTTL())
	}
	nc, err := bootstrap.ConnectNATS(startCtx, cfg.NATS, "fairway-sinks-"+cfg.Dest, log)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	// The sinks own DLQ: they create it and apply its settings. WORK
	// belongs to the dispatcher: wait for it, however long that takes
	// (docs/operating.md).
	ensure := func(ctx context.Context) error {
		_, err := dlq.EnsureStream(ctx, js, dlq.StreamConfig{Replicas: cfg.Replicas})
		return err
	}
	if err := bootstrap.UntilRefused(startCtx, nc, ensure); err != nil {
		return err
	}
	go bootstrap.KeepStream(ctx, js, dlq.StreamName, bootstrap.KeepStreamEvery, ensure, log)
	if _, err := bootstrap.AwaitStream(ctx, js, work.StreamName, "the dispatcher", log); err != nil {
		return err
	}
	startCtx, cancel = context.WithTimeout(ctx, time.Minute) // the rest of the start, after the wait
	defer cancel()
	reg := bootstrap.NewRegistry()
	s, closeSink, err := sinks.Open(startCtx, cfg.Dest, sinks.Deps{Pool: pool, Registerer: reg, Logger: cfg.Runner.Logger}, cfg.sinkConfig())
	if err != nil {
		return err
	}
	defer closeSink()
	if b, ok := s.(*b2b.Sink); ok { // partner changes apply at once
		changes, err := store.ListenPartners(ctx)
		if err != nil {
			return err
		}
		go b.FollowChanges(ctx, changes)
	}
	var r *runner.Runner
	if err := bootstrap.UntilRefused(startCtx, nc, func(ctx context.Context) error {
		r, err = runner.New(ctx, runner.Deps{JetStream: js, Sink: s, Leases: store, Registry: reg, Tracer: tracing.Tracer()}, &cfg.Runner)
		return err
	}); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	log.Info("sinks listening", "addr", ln.Addr().String())
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, req *http.Request) {
		hctx, cancel := context.WithTimeout(req.Context(), 2*time.Second)
		defer cancel()
		if !nc.IsConnected() {
			http.Error(w, "nats: not connected", http.StatusServiceUnavailable)
			return
		}
		if err := pool.Ping(hctx); err != nil {
			http.Error(w, "postgres: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	// HTTP outlives the runner so that /metrics shows the shutdown.
	httpCtx, stopHTTP := context.WithCancel(context.WithoutCancel(ctx))
	httpErr := make(chan error, 1)
	go func() { httpErr <- bootstrap.Serve(httpCtx, bootstrap.HTTPServer(mux, log), ln, 5*time.Second) }()

	runErr := r.Run(ctx) // stops fetching when ctx ends; returns when in-flight items are done or handed back
	stopHTTP()
	if err := <-httpErr; err != nil && runErr == nil {
		runErr = err
	}
	bootstrap.DrainNATS(nc, 10*time.Second, log)
	return runErr
}
