package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	ch "github.com/ClickHouse/clickhouse-go/v2"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/dashboard"
	"github.com/fairwayhq/fairway/internal/demo"
	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/ingest"
	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/runner"
	"github.com/fairwayhq/fairway/internal/status"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/b2b"
	"github.com/fairwayhq/fairway/sinks/b2b/b2btest"
	"github.com/fairwayhq/fairway/sinks/clickhouse"
	"github.com/fairwayhq/fairway/sinks/postgres"
)

// demoDB names the PostgreSQL and ClickHouse databases the demo owns; both
// are recreated at every start, so runs never see each other's state.
const demoDB = "fairway_demo"

// demoPartner is the B2B partner every demo tenant has.
const demoPartner = "partner"

func (c *cli) demoCmd() *cobra.Command {
	var cfg demo.Config
	var listen string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole pipeline in one process: a noisy tenant's catalog import next to many small tenants, with a live view",
		Long: `demo runs embedded JetStream, the ingest API, the dispatcher and the
PostgreSQL, ClickHouse and B2B sinks in one process, against the local
PostgreSQL and ClickHouse (databases fairway_demo, recreated at start) and an
in-process partner webhook receiver. Tenant "noisy" uploads a large CSV
catalog while small tenants publish a few events per second each; the live
view shows per tenant how much each destination applied and the end-to-end
latency. Ctrl-C stops cleanly and prints a summary.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if c.databaseURL == "" {
				return usageError{errors.New("set DATABASE_URL (make demo does this for you)")}
			}
			return c.runDemo(cmd.Context(), cfg, listen)
		},
	}
	cmd.Flags().DurationVar(&cfg.Duration, "duration", 0, "stop by itself after this long (default: when every destination applied the import, or Ctrl-C)")
	cmd.Flags().IntVar(&cfg.NoisyRows, "noisy-rows", 200_000, "rows in the noisy tenant's CSV catalog import")
	cmd.Flags().IntVar(&cfg.SmallTenants, "small-tenants", 12, "small tenants publishing steadily")
	cmd.Flags().Float64Var(&cfg.SmallRate, "small-rate", 5, "events per second per small tenant")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "ingest HTTP address")
	return cmd
}

func (c *cli) runDemo(ctx context.Context, cfg demo.Config, listen string) error {
	logFile, err := os.CreateTemp("", "fairway-demo-*.log")
	if err != nil {
		return err
	}
	defer logFile.Close()
	log, err := bootstrap.NewLogger(logFile, c.logFormat, "info")
	if err != nil {
		return usageError{err}
	}

	// PostgreSQL and ClickHouse, fresh.
	dsn, err := recreatePostgres(ctx, c.databaseURL)
	if err != nil {
		return err
	}
	pool, err := bootstrap.OpenPostgres(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	chAddr := c.getenv("CLICKHOUSE_ADDR")
	if chAddr == "" {
		chAddr = clickhouse.AddrDefault
	}
	if err := recreateClickHouse(ctx, chAddr); err != nil {
		return err
	}
	store, err := tenancy.New(pool, &tenancy.Config{Logger: log})
	if err != nil {
		return err
	}

	// Embedded JetStream and the streams.
	storeDir, err := os.MkdirTemp("", "fairway-demo-nats-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(storeDir)
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: storeDir, NoSigs: true, NoLog: true})
	if err != nil {
		return fmt.Errorf("embedded NATS: %w", err)
	}
	ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		return errors.New("embedded NATS did not start in 10 s")
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.Name("fairway-demo"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		return err
	}
	if _, err := work.EnsureStream(ctx, js, work.StreamConfig{}); err != nil {
		return err
	}
	if _, err := dlq.EnsureStream(ctx, js, dlq.StreamConfig{}); err != nil {
		return err
	}

	// Tenants, their tokens, and one B2B partner each: an in-process
	// receiver that verifies signatures.
	secret := []byte("demo-partner-secret-0123456789abcdef")
	receiver := b2btest.Start(b2btest.Options{Secret: secret})
	defer receiver.Close()
	partners, err := b2b.NewRegistry(pool, &b2b.RegistryConfig{AllowInsecureHTTP: true})
	if err != nil {
		return err
	}
	tokens := map[string]string{}
	names := []string{"noisy"}
	for i := range cfg.SmallTenants {
		names = append(names, fmt.Sprintf("small-%02d", i+1))
	}
	for _, name := range names {
		_, tok, err := store.CreateTenant(ctx, name, name)
		if err != nil {
			return err
		}
		tokens[name] = tok
		if _, err := partners.Add(ctx, b2b.Partner{Tenant: name, Name: demoPartner, URL: receiver.URL(), Secret: secret, Enabled: true}); err != nil {
			return err
		}
	}

	reg := bootstrap.NewRegistry()
	tracker := demo.NewTracker()
	dests := []string{tenancy.DestPostgres, tenancy.DestClickHouse, tenancy.DestB2BPrefix + demoPartner}

	// The pipeline: dispatcher and one sink runner per destination. They
	// stop when pipeCtx ends, after the load and the view.
	pipeCtx, stopPipe := context.WithCancel(context.WithoutCancel(ctx))
	defer stopPipe()
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	d, err := dispatch.New(dispatch.Deps{Store: store, NATS: nc, Registry: reg, Logger: log, Partners: partners},
		&dispatch.Config{Dests: dests[:2]})
	if err != nil {
		return err
	}
	wg.Add(1)
	go func() { defer wg.Done(); errc <- d.Run(pipeCtx) }()
	sinks, err := demoSinks(ctx, pool, chAddr, partners, log)
	if err != nil {
		return err
	}
	for _, s := range sinks {
		defer s.close()
		r, err := runner.New(ctx, runner.Deps{JetStream: js, Sink: tracker.Wrap(s.Sink), Leases: store, Registry: reg},
			&runner.Config{Logger: log, FetchWait: time.Second})
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() { defer wg.Done(); errc <- r.Run(pipeCtx) }()
	}

	// Ingest.
	pub, err := events.NewPublisher(js, events.WithValidatedEvents())
	if err != nil {
		return err
	}
	srv, err := ingest.New(ingest.Deps{Publisher: pub, Tenants: store, Pool: pool, Registry: reg, Gatherer: reg,
		Ready: ingest.DefaultChecks(js, pool, events.StreamName)}, &ingest.Config{Logger: log, Node: "demo"})
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	// The dashboard at /ui: status from PostgreSQL and JetStream,
	// throughput and p95 from the sink runners' metrics on reg.
	sampler, err := dashboard.NewSampler(reg, &dashboard.SamplerConfig{Logger: log})
	if err != nil {
		return err
	}
	wg.Add(1)
	go func() { defer wg.Done(); errc <- sampler.Run(pipeCtx) }()
	dash, err := dashboard.New(dashboard.Deps{
		Status: &status.Source{Pairs: store, Reader: work.NewReader(nc, ""), JS: js},
		Dests:  sampler,
	}, &dashboard.Config{Logger: log})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(dashboard.Path+"/", dash)
	mux.Handle(dashboard.Path, dash)
	mux.Handle("/", srv.Handler())
	hs := bootstrap.HTTPServer(mux, log)
	go func() { _ = hs.Serve(ln) }()

	cfg.BaseURL = "http://" + ln.Addr().String()
	cfg.Out = c.out
	cfg.Tokens = func(_ context.Context, tenant string) (string, error) { return tokens[tenant], nil }
	cfg.Client = &http.Client{Timeout: 30 * time.Second}
	cfg.Tracker, cfg.Dests = tracker, dests
	cfg.DeadLetters = func(ctx context.Context) (uint64, error) {
		st, err := js.Stream(ctx, dlq.StreamName)
		if err != nil {
			return 0, err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return 0, err
		}
		return info.State.Msgs, nil
	}
	cfg.Footer = "dashboard: " + cfg.BaseURL + dashboard.Path + "/   metrics: " + cfg.BaseURL + "/metrics   logs: " + logFile.Name()
	fmt.Fprintf(c.out, "fairway demo: ingest %s, embedded JetStream %s, PostgreSQL %s, ClickHouse %s/%s, partner %s\n",
		cfg.BaseURL, ns.ClientURL(), bootstrap.RedactURL(dsn), chAddr, demoDB, receiver.URL())
	fmt.Fprintf(c.out, "dashboard: %s%s/\n", cfg.BaseURL, dashboard.Path)
	runErr := demo.Run(ctx, cfg)

	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	_ = srv.Close(sctx)
	stopPipe()
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil && runErr == nil {
			runErr = err
		}
	}
	return runErr
}

type demoSink struct {
	sink.Sink
	close func()
}

func demoSinks(ctx context.Context, pool *pgxpool.Pool, chAddr string, partners *b2b.Registry, log *slog.Logger) ([]demoSink, error) {
	pg, err := postgres.New(ctx, &postgres.Config{Pool: pool})
	if err != nil {
		return nil, err
	}
	chs, err := clickhouse.New(ctx, &clickhouse.Config{Addr: chAddr, Database: demoDB})
	if err != nil {
		pg.Close()
		return nil, fmt.Errorf("ClickHouse at %s: %w (start it with make services)", chAddr, err)
	}
	bs, err := b2b.New(&b2b.Config{Registry: partners, Partner: demoPartner, Logger: log})
	if err != nil {
		pg.Close()
		_ = chs.Close()
		return nil, err
	}
	return []demoSink{
		{pg, pg.Close},
		{chs, func() { _ = chs.Close() }},
		{bs, bs.Close},
	}, nil
}

// recreatePostgres drops and creates the fairway_demo database on the
// server of adminURL and returns its URL, so the demo never writes into the
// database a user pointed us at and every run starts clean.
func recreatePostgres(ctx context.Context, adminURL string) (string, error) {
	u, err := url.Parse(adminURL)
	if err != nil || u.Host == "" {
		return "", usageError{errors.New("DATABASE_URL must be a postgres:// URL")}
	}
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("PostgreSQL at %s: %w (start it with make services)", u.Redacted(), err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{"DROP DATABASE IF EXISTS " + demoDB + " WITH (FORCE)", "CREATE DATABASE " + demoDB} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return "", fmt.Errorf("recreate database %s: %w", demoDB, err)
		}
	}
	u.Path = "/" + demoDB
	return u.String(), nil
}

func recreateClickHouse(ctx context.Context, addr string) error {
	conn, err := ch.Open(&ch.Options{Addr: []string{addr}, DialTimeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("ClickHouse at %s: %w (start it with make services)", addr, err)
	}
	defer conn.Close()
	if err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+demoDB); err != nil {
		return fmt.Errorf("ClickHouse at %s: %w (start it with make services, or set CLICKHOUSE_ADDR)", addr, err)
	}
	return nil
}
