package main

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/ingest"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Config is everything the ingest command reads from flags and env.
type Config struct {
	Listen string
	// TLS, when set, makes Listen serve HTTPS.
	TLS           bootstrap.ServerTLS
	NATS          bootstrap.NATSConfig
	DatabaseURL   string
	Stream        events.StreamConfig
	Ingest        ingest.Config
	Log           bootstrap.LogConfig
	ShutdownGrace time.Duration
	// Tracing is read from the standard OTEL_* variables; off by default.
	Tracing bootstrap.TracingConfig
}

func run(ctx context.Context, cfg Config) error {
	log := cfg.Ingest.Logger
	tlsConfig, err := cfg.TLS.Config()
	if err != nil {
		return err
	}
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
	nc, err := bootstrap.ConnectNATS(startCtx, cfg.NATS, "fairway-ingest", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := ingest.NewJetStream(nc)
	if err != nil {
		return err
	}
	// Ingest owns PRODUCTS: it creates it and applies its settings; the
	// dispatcher and the sinks wait for it (docs/operating.md).
	ensure := func(ctx context.Context) error {
		_, err := events.EnsureStream(ctx, js, cfg.Stream)
		return err
	}
	if err := bootstrap.UntilRefused(startCtx, nc, ensure); err != nil {
		return err
	}
	go bootstrap.KeepStream(ctx, js, cfg.Stream.WithDefaults().Name, bootstrap.KeepStreamEvery, ensure, log)
	pub, err := ingest.NewPublisher(js)
	if err != nil {
		return err
	}
	reg := bootstrap.NewRegistry()
	srv, err := ingest.New(ingest.Deps{
		Publisher: pub,
		Tenants:   store,
		Pool:      pool,
		Registry:  reg,
		Gatherer:  reg,
		Ready:     ingest.DefaultChecks(js, pool, cfg.Stream.WithDefaults().Name),
		Quotas:    store,
		Backlog:   work.NewReader(nc, cfg.Stream.WithDefaults().Name),
		Tracer:    tracing.Tracer(),
	}, &cfg.Ingest)
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	log.Info("ingest listening", "addr", ln.Addr().String(), "tls", tlsConfig != nil)
	httpSrv := bootstrap.HTTPServer(srv.Handler(), log)
	httpSrv.TLSConfig = tlsConfig
	serveErr := bootstrap.Serve(ctx, httpSrv, ln, cfg.ShutdownGrace)
	// HTTP is drained (every accepted request was answered); now stop the
	// import workers at a chunk boundary and flush NATS.
	closeCtx, cancelClose := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownGrace)
	defer cancelClose()
	if err := srv.Close(closeCtx); err != nil {
		log.Warn("imports did not stop in time", "err", err)
	}
	bootstrap.DrainNATS(nc, 10*time.Second, log)
	return serveErr
}
