package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/demo"
	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/ingest"
	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/runner"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/b2b"
	"github.com/fairwayhq/fairway/sinks/b2b/b2btest"
	"github.com/fairwayhq/fairway/sinks/clickhouse"
	"github.com/fairwayhq/fairway/sinks/postgres"
)

// pipelinePartner is the B2B partner every tenant of a pipeline has.
const pipelinePartner = "partner"

// pipelineSecret signs the webhooks to the in-process partner.
var pipelineSecret = []byte("demo-partner-secret-0123456789abcdef")

// pipelineConfig says where a one-process pipeline runs and who uses it.
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
	// Name names the NATS connections ("fairway-<name>",
	// "fairway-<name>-dispatcher", "fairway-<name>-dispatcher-doorbell",
	// …), the ingest node and the JetStream store directory. Required.
	Name string
	// Tenants are created at start, each with a token and the partner.
	Tenants []string
	// Logger receives every component's logs. Default: discard.
	Logger *slog.Logger
	// DestBatchSize overrides the dispatcher's batch sizes per destination
	// (dispatch.Config.DestBatchSize); nil keeps its defaults.
	DestBatchSize map[string]int
}

// pipeline is the whole of fairway in one process, as `fairway demo` runs
// it and BenchmarkEndToEnd measures it: embedded JetStream with file
// storage in a temporary directory, fresh PostgreSQL and ClickHouse
// databases, an in-process partner webhook receiver, the ingest service
// (import workers started; its handler is served by the caller through
// Serve), the dispatcher, and one sink runner per destination (postgres,
// clickhouse, b2b:partner) whose sinks report to Tracker. The ingest
// service, the dispatcher and each runner have a NATS connection and a
// PostgreSQL pool of their own, as the separate processes of a deployment
// do (proc), and the dispatcher's doorbell a second NATS connection, as
// cmd/dispatcher opens; NC, JS and Store are the operator's (setup,
// dashboard).
//
// startPipeline starts it; Close stops it in two phases (HTTP and ingest
// first, then the dispatcher and runners, then the connections and
// servers).
type pipeline struct {
	// DSN is the URL of the pipeline's PostgreSQL database.
	DSN string
	// ClickHouseAddr and Database locate the ClickHouse database.
	ClickHouseAddr, Database string
	NATSServer               *server.Server
	NC                       *nats.Conn
	JS                       jetstream.JetStream
	Store                    *tenancy.Store
	// Registry holds every component's metrics.
	Registry *prometheus.Registry
	Ingest   *ingest.Server
	Receiver *b2btest.Receiver
	// Tracker counts what every destination applied, per tenant.
	Tracker *demo.Tracker
	// Dests are the destinations every tenant's events go to.
	Dests []string
	// Tokens are the tenants' bearer tokens.
	Tokens map[string]string

	log     *slog.Logger
	ctx     context.Context // ends at Close; the goroutines started by Go run under it
	stop    context.CancelFunc
	wg      sync.WaitGroup
	exited  chan struct{} // closed when a goroutine started by Go returns
	mu      sync.Mutex
	errs    []error
	servers []*http.Server
	closers []func() // run in reverse order, after the goroutines ended
	closing sync.Once
}

// startPipeline builds and starts a pipeline. ctx bounds the start and the
// ingest service's import workers; the pipeline itself runs until Close.
func startPipeline(ctx context.Context, cfg pipelineConfig) (_ *pipeline, err error) {
	if cfg.AdminURL == "" || cfg.Database == "" || cfg.Name == "" {
		return nil, errors.New("pipeline: AdminURL, Database and Name are required")
	}
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	p := &pipeline{
		ClickHouseAddr: cmp.Or(cfg.ClickHouseAddr, clickhouse.AddrDefault),
		Database:       cfg.Database,
		Registry:       bootstrap.NewRegistry(),
		Tracker:        demo.NewTracker(),
		Dests:          []string{tenancy.DestPostgres, tenancy.DestClickHouse, tenancy.DestB2BPrefix + pipelinePartner},
		Tokens:         map[string]string{},
		log:            log,
		exited:         make(chan struct{}),
	}
	p.ctx, p.stop = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			_ = p.Close(context.WithoutCancel(ctx))
		}
	}()

	// PostgreSQL and ClickHouse, fresh.
	if p.DSN, err = recreatePostgres(ctx, cfg.AdminURL, cfg.Database); err != nil {
		return nil, err
	}
	pool, err := bootstrap.OpenPostgres(ctx, p.DSN)
	if err != nil {
		return nil, err
	}
	p.onClose(pool.Close)
	if err := recreateClickHouse(ctx, p.ClickHouseAddr, cfg.Database); err != nil {
		return nil, err
	}
	if p.Store, err = tenancy.New(pool, &tenancy.Config{Logger: log}); err != nil {
		return nil, err
	}

	// Embedded JetStream and the streams.
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
	if p.NC, err = nats.Connect(ns.ClientURL(), nats.Name("fairway-"+cfg.Name)); err != nil {
		return nil, err
	}
	p.onClose(p.NC.Close)
	if p.JS, err = jetstream.New(p.NC); err != nil {
		return nil, err
	}
	if _, err := events.EnsureStream(ctx, p.JS, events.StreamConfig{}); err != nil {
		return nil, err
	}
	if _, err := work.EnsureStream(ctx, p.JS, work.StreamConfig{}); err != nil {
		return nil, err
	}
	if _, err := dlq.EnsureStream(ctx, p.JS, dlq.StreamConfig{}); err != nil {
		return nil, err
	}

	// Tenants, their tokens, and one B2B partner each: an in-process
	// receiver that verifies signatures.
	p.Receiver = b2btest.Start(b2btest.Options{Secret: pipelineSecret})
	p.onClose(p.Receiver.Close)
	partners, err := b2b.NewRegistry(pool, &b2b.RegistryConfig{AllowInsecureHTTP: true})
	if err != nil {
		return nil, err
	}
	for _, name := range cfg.Tenants {
		_, tok, err := p.Store.CreateTenant(ctx, name, name)
		if err != nil {
			return nil, err
		}
		p.Tokens[name] = tok
		if _, err := partners.Add(ctx, b2b.Partner{Tenant: name, Name: pipelinePartner, URL: p.Receiver.URL(), Secret: pipelineSecret, Enabled: true}); err != nil {
			return nil, err
		}
	}

	// The dispatcher and one sink runner per destination, each with the
	// connections of a process of its own.
	dp, err := p.process(ctx, cfg.Name+"-dispatcher", log)
	if err != nil {
		return nil, err
	}
	bell, err := p.connect(cfg.Name + "-dispatcher-doorbell")
	if err != nil {
		return nil, err
	}
	dpartners, err := b2b.NewRegistry(dp.pool, &b2b.RegistryConfig{AllowInsecureHTTP: true})
	if err != nil {
		return nil, err
	}
	d, err := dispatch.New(dispatch.Deps{Store: dp.store, NATS: dp.nc, Doorbell: bell, Registry: p.Registry, Logger: log, Partners: dpartners},
		&dispatch.Config{Dests: p.Dests[:2], DestBatchSize: cfg.DestBatchSize})
	if err != nil {
		return nil, err
	}
	p.Go(d.Run)
	for _, dest := range p.Dests {
		sp, err := p.process(ctx, cfg.Name+"-sink-"+strings.ReplaceAll(dest, ":", "-"), log)
		if err != nil {
			return nil, err
		}
		s, err := p.openSink(ctx, dest, sp, log)
		if err != nil {
			return nil, err
		}
		rc := &runner.Config{Logger: log, FetchWait: time.Second}
		if dest == tenancy.DestClickHouse {
			rc.Concurrency = clickhouse.ConcurrencyDefault // as cmd/sinks --dest clickhouse
		}
		r, err := runner.New(ctx, runner.Deps{JetStream: sp.js, Sink: p.Tracker.Wrap(s), Leases: sp.store, Registry: p.Registry}, rc)
		if err != nil {
			return nil, err
		}
		p.Go(r.Run)
	}

	// Ingest.
	ip, err := p.process(ctx, cfg.Name+"-ingest", log)
	if err != nil {
		return nil, err
	}
	pub, err := ingest.NewPublisher(ip.js)
	if err != nil {
		return nil, err
	}
	p.Ingest, err = ingest.New(ingest.Deps{Publisher: pub, Tenants: ip.store, Pool: ip.pool, Registry: p.Registry, Gatherer: p.Registry,
		Ready: ingest.DefaultChecks(ip.js, ip.pool, events.StreamName), Quotas: ip.store, Backlog: work.NewReader(ip.nc, "")},
		&ingest.Config{Logger: log, Node: cfg.Name})
	if err != nil {
		return nil, err
	}
	if err := p.Ingest.Start(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// proc is what a fairway process has of its own: a NATS connection and a
// PostgreSQL pool with a tenancy store on it. In production the ingest
// service, the dispatcher and every sink are processes; the pipeline gives
// each its own, so that none queues behind another's connection.
type proc struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	pool  *pgxpool.Pool
	store *tenancy.Store
}

// process opens a proc's connections (as name), closed at Close.
func (p *pipeline) process(ctx context.Context, name string, log *slog.Logger) (*proc, error) {
	nc, err := p.connect(name)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	pool, err := bootstrap.OpenPostgres(ctx, p.DSN)
	if err != nil {
		return nil, err
	}
	p.onClose(pool.Close)
	store, err := tenancy.New(pool, &tenancy.Config{Logger: log})
	if err != nil {
		return nil, err
	}
	return &proc{nc: nc, js: js, pool: pool, store: store}, nil
}

// connect opens a NATS connection named "fairway-<name>", drained at
// Close (after the components stopped, before the server shuts down).
func (p *pipeline) connect(name string) (*nats.Conn, error) {
	nc, err := nats.Connect(p.NATSServer.ClientURL(), nats.Name("fairway-"+name))
	if err != nil {
		return nil, err
	}
	p.onClose(func() { bootstrap.DrainNATS(nc, 5*time.Second, p.log) })
	return nc, nil
}

// onClose registers f to run at Close, after the pipeline's goroutines
// ended; the last registered runs first.
func (p *pipeline) onClose(f func()) { p.closers = append(p.closers, f) }

// Go runs f in the pipeline until Close. An error it returns is reported
// by Close; Exited is closed when any such f returns.
func (p *pipeline) Go(f func(context.Context) error) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		err := f(p.ctx)
		p.mu.Lock()
		if err != nil {
			p.errs = append(p.errs, err)
		}
		select {
		case <-p.exited:
		default:
			close(p.exited)
		}
		p.mu.Unlock()
	}()
}

// Exited is closed when a goroutine of the pipeline (dispatcher, sink
// runner, or one started by Go) returned: before Close, that is a failure.
func (p *pipeline) Exited() <-chan struct{} { return p.exited }

// Serve serves h on ln until Close.
func (p *pipeline) Serve(ln net.Listener, h http.Handler) {
	hs := bootstrap.HTTPServer(h, p.log)
	p.mu.Lock()
	p.servers = append(p.servers, hs)
	p.mu.Unlock()
	go func() { _ = hs.Serve(ln) }()
}

// DeadLetters counts the events in the dead-letter stream.
func (p *pipeline) DeadLetters(ctx context.Context) (uint64, error) {
	st, err := p.JS.Stream(ctx, dlq.StreamName)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// Close stops the pipeline: the HTTP servers and the ingest service get up
// to 15 s to finish, then the dispatcher and the runners stop (each hands
// back or finishes its work), then sinks, connections and servers close.
// It returns the first error a pipeline goroutine returned.
func (p *pipeline) Close(ctx context.Context) error {
	p.closing.Do(func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		defer cancel()
		p.mu.Lock()
		servers := p.servers
		p.mu.Unlock()
		for _, hs := range servers {
			_ = hs.Shutdown(sctx)
		}
		if p.Ingest != nil {
			_ = p.Ingest.Close(sctx)
		}
		p.stop()
		p.wg.Wait()
		for i := len(p.closers) - 1; i >= 0; i-- {
			p.closers[i]()
		}
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.errs) > 0 {
		return p.errs[0]
	}
	return nil
}

// openSink opens dest's sink on pr's pool, as cmd/sinks does, and
// registers its closing.
func (p *pipeline) openSink(ctx context.Context, dest string, pr *proc, log *slog.Logger) (sink.Sink, error) {
	switch dest {
	case tenancy.DestPostgres:
		s, err := postgres.New(ctx, &postgres.Config{Pool: pr.pool})
		if err != nil {
			return nil, err
		}
		p.onClose(s.Close)
		return s, nil
	case tenancy.DestClickHouse:
		s, err := clickhouse.New(ctx, &clickhouse.Config{Addr: p.ClickHouseAddr, Database: p.Database, Registerer: p.Registry})
		if err != nil {
			return nil, fmt.Errorf("ClickHouse at %s: %w (start it with make services)", p.ClickHouseAddr, err)
		}
		p.onClose(func() { _ = s.Close() })
		return s, nil
	}
	reg, err := b2b.NewRegistry(pr.pool, &b2b.RegistryConfig{AllowInsecureHTTP: true})
	if err != nil {
		return nil, err
	}
	s, err := b2b.New(&b2b.Config{Registry: reg, Partner: strings.TrimPrefix(dest, tenancy.DestB2BPrefix), Logger: log})
	if err != nil {
		return nil, err
	}
	p.onClose(s.Close)
	changes, err := pr.store.ListenPartners(p.ctx)
	if err != nil {
		return nil, err
	}
	p.Go(func(ctx context.Context) error { s.FollowChanges(ctx, changes); return nil })
	return s, nil
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
