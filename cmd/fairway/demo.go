package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/demo"
	"github.com/fairwayhq/fairway/internal/ingest"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

func (c *cli) demoCmd() *cobra.Command {
	var cfg demo.Config
	var listen string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the pipeline in one process: a noisy tenant's catalog import and many small tenants, with a live view",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if c.databaseURL == "" {
				return usageError{errors.New("set DATABASE_URL (make demo does this for you)")}
			}
			return c.runDemo(cmd.Context(), cfg, listen)
		},
	}
	cmd.Flags().DurationVar(&cfg.Duration, "duration", 0, "stop by itself after this long (default: run until Ctrl-C or the import is done and small tenants ran 10 s more)")
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

	dsn, err := demoDatabase(ctx, c.databaseURL)
	if err != nil {
		return err
	}
	pool, err := bootstrap.OpenPostgres(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := tenancy.New(pool, &tenancy.Config{Logger: log})
	if err != nil {
		return err
	}

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
	pub, err := events.NewPublisher(js, events.WithValidatedEvents())
	if err != nil {
		return err
	}
	reg := bootstrap.NewRegistry()
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
	hs := bootstrap.HTTPServer(srv.Handler(), log)
	go func() { _ = hs.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
		_ = srv.Close(sctx)
	}()

	cfg.BaseURL = "http://" + ln.Addr().String()
	cfg.Out = c.out
	cfg.Tokens = func(ctx context.Context, tenant string) (string, error) {
		_, tok, err := store.CreateTenant(ctx, tenant, tenant)
		if errors.Is(err, tenancy.ErrTenantExists) {
			return store.IssueToken(ctx, tenant)
		}
		return tok, err
	}
	cfg.Client = &http.Client{Timeout: 30 * time.Second}
	fmt.Fprintf(c.out, "fairway demo: ingest on %s, embedded JetStream on %s, PostgreSQL %s; logs in %s\n",
		cfg.BaseURL, ns.ClientURL(), redactDSN(dsn), logFile.Name())
	return demo.Run(ctx, cfg)
}

// demoDatabase makes sure a database named fairway_demo exists on the
// server of adminURL and returns its URL, so the demo never writes into the
// database a user pointed us at.
func demoDatabase(ctx context.Context, adminURL string) (string, error) {
	u, err := url.Parse(adminURL)
	if err != nil || u.Host == "" {
		return "", usageError{errors.New("DATABASE_URL must be a postgres:// URL")}
	}
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", fmt.Errorf("PostgreSQL at %s: %w (start it with make services)", u.Redacted(), err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'fairway_demo')").Scan(&exists); err != nil {
		return "", err
	}
	if !exists {
		if _, err := conn.Exec(ctx, "CREATE DATABASE fairway_demo"); err != nil {
			return "", fmt.Errorf("create database fairway_demo: %w", err)
		}
	}
	u.Path = "/fairway_demo"
	return u.String(), nil
}

func redactDSN(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "<dsn>"
	}
	return u.Redacted()
}
