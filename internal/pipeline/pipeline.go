// Package pipeline runs the whole of fairway in one process: the ingest
// service, the dispatcher and one sink runner per destination, wired as
// cmd/ingest, cmd/dispatcher and cmd/sinks wire them, each with the NATS
// connection and PostgreSQL pool of its own that its process has in a
// deployment. `fairway demo` runs it, and tests and BenchmarkEndToEnd
// stand it up through internal/testenv/pipelinetest.
//
// It runs on servers it is given (PostgreSQL, NATS with JetStream,
// ClickHouse) and creates the streams, tenants and partners its Config
// names.
package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/ingest"
	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/runner"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks"
	"github.com/fairwayhq/fairway/sinks/b2b"
)

// NameDefault is Config.Name's default.
const NameDefault = "pipeline"

// Config says what a pipeline runs on and what it holds.
type Config struct {
	// DSN is the PostgreSQL database the pipeline runs on; its migrations
	// are applied at start. Required.
	DSN string
	// NATSURL is where the NATS servers are (comma-separated); every
	// component connects as its service does (bootstrap.ConnectNATS:
	// reconnecting for ever). Required.
	NATSURL string
	// Sinks configures the sinks: ClickHouse's address and database, the
	// partner registry's key and whether it takes http:// URLs (which the
	// partners below are registered with too).
	Sinks sinks.Config
	// Name names the NATS connections ("fairway-<name>-dispatcher",
	// "fairway-<name>-dispatcher-doorbell", "fairway-<name>-sink-postgres",
	// …) and is the ingest node. Default NameDefault.
	Name string
	// Logger receives every component's logs, each with service=ingest,
	// dispatcher or sinks. Default: discard.
	Logger *slog.Logger
	// Replicas of the streams PRODUCTS, WORK and DLQ. Default 1.
	Replicas int
	// Tenancy configures the tenancy store of every component; its Logger
	// is the component's.
	Tenancy tenancy.Config
	// Tenants are created at start, each with a bearer token (Tokens).
	Tenants []string
	// Partners are registered at start.
	Partners []Partner
	// Dests are the destinations a sink runner runs for. Default
	// postgres, clickhouse and b2b:<name> of every partner.
	Dests []string
	// Dispatcher configures the dispatcher. Its Dests default to Dests
	// without the b2b ones: partners come from the partner registry, per
	// tenant.
	Dispatcher dispatch.Config
	// Runner configures every sink runner; Concurrency 0 takes the
	// destination kind's default (sinks.Concurrency), as cmd/sinks does.
	Runner runner.Config
	// WrapSink, when set, wraps every sink before its runner gets it: a
	// demo.Tracker counting what was applied, a test's recorder.
	WrapSink func(sink.Sink) sink.Sink
	// Ingest, when set, runs the ingest service with it (Pipeline.Ingest;
	// serve its handler with Serve). Node defaults to Name, Logger to
	// Logger's.
	Ingest *ingest.Config
	// BeforeRun, when set, runs once the streams, tenants, partners and
	// sinks exist, before the dispatcher and the runners start: a backlog
	// published there is what they find at start.
	BeforeRun func(context.Context, *Pipeline) error
}

// Partner is a B2B partner registered at start.
type Partner struct {
	// Name is the partner's name: destination b2b:<name>.
	Name string
	// URL and Secret are where webhooks go and what signs them.
	URL    string
	Secret b2b.Secret
	// Tenants registered the partner. Default: every tenant of
	// Config.Tenants.
	Tenants []string
}

// Pipeline is a running pipeline. NC, JS, Pool and Store are the
// operator's (setup, dashboards, the checks of tests); every component
// has connections of its own.
type Pipeline struct {
	NC    *nats.Conn
	JS    jetstream.JetStream
	Pool  *pgxpool.Pool
	Store *tenancy.Store
	// Registry holds every component's metrics.
	Registry *prometheus.Registry
	// Ingest is the ingest service (nil without Config.Ingest) and
	// IngestJS the JetStream context it publishes through.
	Ingest   *ingest.Server
	IngestJS jetstream.JetStream
	// Dests are the destinations a sink runner runs for.
	Dests []string
	// Tokens are the tenants' bearer tokens.
	Tokens map[string]string

	cfg     Config
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

// Start builds and starts a pipeline. ctx bounds the start; the pipeline
// runs until Close.
func Start(ctx context.Context, cfg Config) (_ *Pipeline, err error) {
	if cfg.DSN == "" || cfg.NATSURL == "" {
		return nil, errors.New("pipeline: DSN and NATSURL are required")
	}
	cfg.Name = cmp.Or(cfg.Name, NameDefault)
	log := cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	p := &Pipeline{
		Registry: bootstrap.NewRegistry(),
		Dests:    cfg.Dests,
		Tokens:   map[string]string{},
		cfg:      cfg,
		log:      log,
		exited:   make(chan struct{}),
	}
	if p.Dests == nil {
		p.Dests = []string{tenancy.DestPostgres, tenancy.DestClickHouse}
		for _, pa := range cfg.Partners {
			p.Dests = append(p.Dests, tenancy.DestB2BPrefix+pa.Name)
		}
	}
	p.ctx, p.stop = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			_ = p.Close(context.WithoutCancel(ctx))
		}
	}()

	op, err := p.process(ctx, cfg.Name, log)
	if err != nil {
		return nil, err
	}
	p.NC, p.JS, p.Pool, p.Store = op.nc, op.js, op.pool, op.store
	if err := p.setUp(ctx); err != nil {
		return nil, err
	}

	// One sink per destination, each in a process of its own.
	type sinkProc struct {
		dest string
		proc *proc
		sink sink.Sink
	}
	var sps []sinkProc
	for _, dest := range p.Dests {
		sp, err := p.process(ctx, cfg.Name+"-sink-"+strings.ReplaceAll(dest, ":", "-"), log.With("service", "sinks"))
		if err != nil {
			return nil, err
		}
		s, err := p.openSink(ctx, dest, sp)
		if err != nil {
			return nil, err
		}
		if cfg.WrapSink != nil {
			s = cfg.WrapSink(s)
		}
		sps = append(sps, sinkProc{dest, sp, s})
	}
	if cfg.BeforeRun != nil {
		if err := cfg.BeforeRun(ctx, p); err != nil {
			return nil, err
		}
	}

	// The dispatcher, with its doorbell on a connection of its own as
	// cmd/dispatcher opens it.
	dp, err := p.process(ctx, cfg.Name+"-dispatcher", log.With("service", "dispatcher"))
	if err != nil {
		return nil, err
	}
	bell, err := p.connect(ctx, cfg.Name+"-dispatcher-doorbell", dp.log)
	if err != nil {
		return nil, err
	}
	partners, err := b2b.NewRegistry(dp.pool, nil)
	if err != nil {
		return nil, err
	}
	dcfg := cfg.Dispatcher
	if dcfg.Dests == nil {
		for _, d := range p.Dests {
			if !strings.HasPrefix(d, tenancy.DestB2BPrefix) {
				dcfg.Dests = append(dcfg.Dests, d)
			}
		}
	}
	d, err := dispatch.New(dispatch.Deps{Store: dp.store, NATS: dp.nc, Doorbell: bell, Registry: p.Registry, Logger: dp.log, Partners: partners}, &dcfg)
	if err != nil {
		return nil, err
	}
	p.Go(d.Run)

	for _, sp := range sps {
		rc := cfg.Runner
		rc.Logger = cmp.Or(rc.Logger, sp.proc.log)
		rc.Concurrency = cmp.Or(rc.Concurrency, sinks.Concurrency(sp.dest))
		r, err := runner.New(ctx, runner.Deps{JetStream: sp.proc.js, Sink: sp.sink, Leases: sp.proc.store, Registry: p.Registry}, &rc)
		if err != nil {
			return nil, err
		}
		p.Go(r.Run)
	}

	if cfg.Ingest != nil {
		if err := p.startIngest(ctx); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// setUp creates the streams, the tenants and the partners.
func (p *Pipeline) setUp(ctx context.Context) error {
	r := p.cfg.Replicas
	if _, err := events.EnsureStream(ctx, p.JS, events.StreamConfig{Replicas: r}); err != nil {
		return err
	}
	if _, err := work.EnsureStream(ctx, p.JS, work.StreamConfig{Replicas: r}); err != nil {
		return err
	}
	if _, err := dlq.EnsureStream(ctx, p.JS, dlq.StreamConfig{Replicas: r}); err != nil {
		return err
	}
	for _, name := range p.cfg.Tenants {
		_, tok, err := p.Store.CreateTenant(ctx, name, name)
		if err != nil {
			return err
		}
		p.Tokens[name] = tok
	}
	registry, err := b2b.NewRegistry(p.Pool, &p.cfg.Sinks.B2B)
	if err != nil {
		return err
	}
	for _, pa := range p.cfg.Partners {
		tenants := pa.Tenants
		if tenants == nil {
			tenants = p.cfg.Tenants
		}
		for _, tn := range tenants {
			if _, err := registry.Add(ctx, b2b.Partner{Tenant: tn, Name: pa.Name, URL: pa.URL, Secret: pa.Secret, Enabled: true}); err != nil {
				return err
			}
		}
	}
	return nil
}

// openSink opens dest's sink in sp, registers its closing and, for a B2B
// sink, makes partner changes apply at once, as cmd/sinks does.
func (p *Pipeline) openSink(ctx context.Context, dest string, sp *proc) (sink.Sink, error) {
	s, closeSink, err := sinks.Open(ctx, dest, sinks.Deps{Pool: sp.pool, Registerer: p.Registry, Logger: sp.log}, p.cfg.Sinks)
	if err != nil {
		return nil, fmt.Errorf("open the %s sink: %w", dest, err)
	}
	p.onClose(closeSink)
	if b, ok := s.(*b2b.Sink); ok {
		changes, err := sp.store.ListenPartners(p.ctx)
		if err != nil {
			return nil, err
		}
		p.Go(func(ctx context.Context) error { b.FollowChanges(ctx, changes); return nil })
	}
	return s, nil
}

// startIngest starts the ingest service as cmd/ingest does.
func (p *Pipeline) startIngest(ctx context.Context) error {
	ip, err := p.process(ctx, p.cfg.Name+"-ingest", p.log.With("service", "ingest"))
	if err != nil {
		return err
	}
	if p.IngestJS, err = ingest.NewJetStream(ip.nc); err != nil {
		return err
	}
	pub, err := ingest.NewPublisher(p.IngestJS)
	if err != nil {
		return err
	}
	icfg := *p.cfg.Ingest
	icfg.Logger = cmp.Or(icfg.Logger, ip.log)
	icfg.Node = cmp.Or(icfg.Node, p.cfg.Name)
	p.Ingest, err = ingest.New(ingest.Deps{Publisher: pub, Tenants: ip.store, Pool: ip.pool, Registry: p.Registry, Gatherer: p.Registry,
		Ready: ingest.DefaultChecks(p.IngestJS, ip.pool, events.StreamName), Quotas: ip.store, Backlog: work.NewReader(ip.nc, "")}, &icfg)
	if err != nil {
		return err
	}
	return p.Ingest.Start(p.ctx)
}

// proc is what a fairway process has of its own: a NATS connection and a
// PostgreSQL pool with a tenancy store on it, and its logger. In
// production the ingest service, the dispatcher and every sink are
// processes; the pipeline gives each its own, so that none queues behind
// another's connection.
type proc struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	pool  *pgxpool.Pool
	store *tenancy.Store
	log   *slog.Logger
}

// process opens a proc's connections (as name), closed at Close.
func (p *Pipeline) process(ctx context.Context, name string, log *slog.Logger) (*proc, error) {
	nc, err := p.connect(ctx, name, log)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	pool, err := bootstrap.OpenPostgres(ctx, p.cfg.DSN)
	if err != nil {
		return nil, err
	}
	p.onClose(pool.Close)
	tc := p.cfg.Tenancy
	tc.Logger = log
	store, err := tenancy.New(pool, &tc)
	if err != nil {
		return nil, err
	}
	return &proc{nc: nc, js: js, pool: pool, store: store, log: log}, nil
}

// connect opens a NATS connection named "fairway-<name>", drained at
// Close (after the components stopped, before the caller stops the
// servers).
func (p *Pipeline) connect(ctx context.Context, name string, log *slog.Logger) (*nats.Conn, error) {
	nc, err := bootstrap.ConnectNATS(ctx, bootstrap.NATSConfig{URL: p.cfg.NATSURL}, "fairway-"+name, log)
	if err != nil {
		return nil, err
	}
	p.onClose(func() { bootstrap.DrainNATS(nc, 5*time.Second, p.log) })
	return nc, nil
}

// onClose registers f to run at Close, after the pipeline's goroutines
// ended; the last registered runs first.
func (p *Pipeline) onClose(f func()) { p.closers = append(p.closers, f) }

// Go runs f in the pipeline until Close. An error it returns is reported
// by Close; Exited is closed when any such f returns.
func (p *Pipeline) Go(f func(context.Context) error) {
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

// Exited is closed when a goroutine of the pipeline (the dispatcher, a
// sink runner, or one started by Go) returned: before Close, that is a
// failure.
func (p *Pipeline) Exited() <-chan struct{} { return p.exited }

// Serve serves h on ln until Close.
func (p *Pipeline) Serve(ln net.Listener, h http.Handler) {
	hs := bootstrap.HTTPServer(h, p.log)
	p.mu.Lock()
	p.servers = append(p.servers, hs)
	p.mu.Unlock()
	go func() { _ = hs.Serve(ln) }()
}

// DeadLetters counts the events in the dead-letter stream.
func (p *Pipeline) DeadLetters(ctx context.Context) (uint64, error) {
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
// back or finishes its work), then sinks and connections close. It returns
// the first error a pipeline goroutine returned.
func (p *Pipeline) Close(ctx context.Context) error {
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
