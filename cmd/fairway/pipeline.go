package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/fairwayhq/fairway/internal/demo"
	"github.com/fairwayhq/fairway/internal/ingest"
	"github.com/fairwayhq/fairway/internal/pipeline"
	"github.com/fairwayhq/fairway/internal/sink/runner"
	"github.com/fairwayhq/fairway/sinks"
	"github.com/fairwayhq/fairway/sinks/b2b"
	"github.com/fairwayhq/fairway/sinks/b2b/b2btest"
	"github.com/fairwayhq/fairway/sinks/clickhouse"
)

// pipelinePartner is the B2B partner every tenant of a pipeline has.
const pipelinePartner = "partner"

// pipelineSecret signs the webhooks to the in-process partner.
var pipelineSecret = []byte("demo-partner-secret-0123456789abcdef")

// pipelineConfig says where the demo's pipeline runs and who uses it.
type pipelineConfig struct {
	// AdminURL is a PostgreSQL URL; Database is dropped and created on its
	// server. Required.
	AdminURL string
	// ClickHouseAddr is ClickHouse's native address. Default
	// clickhouse.AddrDefault.
	ClickHouseAddr string
	// Database names the PostgreSQL and ClickHouse databases the pipeline
	// owns; both are dropped and created at start, so runs never see each
	// other's state. Required.
	Database string
	// Name names the NATS connections, the ingest node and the JetStream
	// store directory (pipeline.Config.Name). Required.
	Name string
	// Tenants are created at start, each with a token and the partner.
	Tenants []string
	// Logger receives every component's logs. Default: discard.
	Logger *slog.Logger
}

// demoPipeline is the whole of fairway in one process (internal/pipeline)
// on servers of its own, as `fairway demo` runs it: embedded JetStream
// with file storage in a temporary directory, fresh PostgreSQL and
// ClickHouse databases, and an in-process partner webhook receiver that
// every tenant registered as partner "partner". The ingest service runs
// (its handler is served by the caller through Serve) and every sink
// reports to Tracker.
//
// startPipeline starts it; Close stops the pipeline, then the servers.
type demoPipeline struct {
	*pipeline.Pipeline
	// DSN is the URL of the pipeline's PostgreSQL database.
	DSN string
	// ClickHouseAddr and Database locate the ClickHouse database.
	ClickHouseAddr, Database string
	NATSServer               *server.Server
	Receiver                 *b2btest.Receiver
	// Tracker counts what every destination applied, per tenant.
	Tracker *demo.Tracker

	closers []func() // the servers', run in reverse order after the pipeline's Close
}

// startPipeline starts the servers and the pipeline on them. ctx bounds
// the start; the pipeline runs until Close.
func startPipeline(ctx context.Context, cfg pipelineConfig) (_ *demoPipeline, err error) {
	if cfg.AdminURL == "" || cfg.Database == "" || cfg.Name == "" {
		return nil, errors.New("pipeline: AdminURL, Database and Name are required")
	}
	p := &demoPipeline{
		ClickHouseAddr: cmp.Or(cfg.ClickHouseAddr, clickhouse.AddrDefault),
		Database:       cfg.Database,
		Tracker:        demo.NewTracker(),
	}
	defer func() {
		if err != nil {
			_ = p.Close(context.WithoutCancel(ctx))
		}
	}()

	// PostgreSQL and ClickHouse, fresh.
	if p.DSN, err = recreatePostgres(ctx, cfg.AdminURL, cfg.Database); err != nil {
		return nil, err
	}
	if err := recreateClickHouse(ctx, p.ClickHouseAddr, cfg.Database); err != nil {
		return nil, err
	}

	// Embedded JetStream.
	storeDir, err := os.MkdirTemp("", "fairway-"+cfg.Name+"-nats-")
	if err != nil {
		return nil, err
	}
	p.onClose(func() { _ = os.RemoveAll(storeDir) })
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: storeDir, NoSigs: true, NoLog: true})
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	ns.Start()
	p.NATSServer = ns
	p.onClose(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		return nil, errors.New("embedded NATS did not start in 10 s")
	}

	// The partner: an in-process receiver that verifies signatures.
	p.Receiver = b2btest.Start(b2btest.Options{Secret: pipelineSecret})
	p.onClose(p.Receiver.Close)

	pc := demoConfig(cfg.Name, cfg.Tenants, cfg.Logger, p.Tracker)
	pc.DSN, pc.NATSURL = p.DSN, ns.ClientURL()
	pc.Sinks = sinks.Config{
		ClickHouse: clickhouse.Config{Addr: p.ClickHouseAddr, Database: cfg.Database},
		B2B:        b2b.RegistryConfig{AllowInsecureHTTP: true},
	}
	pc.Partners = []pipeline.Partner{{Name: pipelinePartner, URL: p.Receiver.URL(), Secret: pipelineSecret}}
	if p.Pipeline, err = pipeline.Start(ctx, pc); err != nil {
		return nil, err
	}
	return p, nil
}

// demoConfig is the demo's pipeline (name, tenants, logger) without the
// servers and the partner: the ingest service runs, sink runners fetch
// with a 1 s wait, and tracker counts what every sink applied.
// BenchmarkEndToEnd measures this configuration.
func demoConfig(name string, tenants []string, log *slog.Logger, tracker *demo.Tracker) pipeline.Config {
	return pipeline.Config{
		Name:     name,
		Logger:   log,
		Tenants:  tenants,
		Runner:   runner.Config{FetchWait: time.Second},
		WrapSink: tracker.Wrap,
		Ingest:   &ingest.Config{},
	}
}

// onClose registers f to run at Close, after the pipeline stopped; the
// last registered runs first.
func (p *demoPipeline) onClose(f func()) { p.closers = append(p.closers, f) }

// Close stops the pipeline (pipeline.Pipeline.Close), then the servers.
// It returns the pipeline's error.
func (p *demoPipeline) Close(ctx context.Context) error {
	var err error
	if p.Pipeline != nil {
		err = p.Pipeline.Close(ctx)
	}
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
	p.closers = nil
	return err
}

// recreatePostgres drops and creates database db on the server of adminURL
// and returns its URL, so a pipeline never writes into the database a user
// pointed us at and every run starts clean.
func recreatePostgres(ctx context.Context, adminURL, db string) (string, error) {
	u, err := url.Parse(adminURL)
	if err != nil || u.Host == "" {
		return "", usageError{errors.New("DATABASE_URL must be a postgres:// URL")}
	}
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("PostgreSQL at %s: %w (start it with make services)", u.Redacted(), err)
	}
	defer conn.Close(ctx)
	id := pgx.Identifier{db}.Sanitize()
	for _, q := range []string{"DROP DATABASE IF EXISTS " + id + " WITH (FORCE)", "CREATE DATABASE " + id} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return "", fmt.Errorf("recreate database %s: %w", db, err)
		}
	}
	u.Path = "/" + db
	return u.String(), nil
}

// recreateClickHouse drops database db; the ClickHouse sink creates it.
func recreateClickHouse(ctx context.Context, addr, db string) error {
	conn, err := ch.Open(&ch.Options{Addr: []string{addr}, DialTimeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("ClickHouse at %s: %w (start it with make services)", addr, err)
	}
	defer conn.Close()
	if err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db); err != nil {
		return fmt.Errorf("ClickHouse at %s: %w (start it with make services, or set CLICKHOUSE_ADDR)", addr, err)
	}
	return nil
}
