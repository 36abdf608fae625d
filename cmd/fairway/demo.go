package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/dashboard"
	"github.com/fairwayhq/fairway/internal/demo"
	"github.com/fairwayhq/fairway/internal/status"
	"github.com/fairwayhq/fairway/internal/work"
)

// demoDB names the PostgreSQL and ClickHouse databases the demo owns; both
// are recreated at every start, so runs never see each other's state.
const demoDB = "fairway_demo"

func (c *cli) demoCmd() *cobra.Command {
	var cfg demo.Config
	var listen string
	var logCfg bootstrap.LogConfig
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole pipeline in one process: a noisy tenant's catalog import next to many small tenants, with a live view",
		Long: `demo runs embedded JetStream, the ingest API, the dispatcher and the
PostgreSQL, ClickHouse and B2B sinks in one process, against the local
PostgreSQL and ClickHouse (databases fairway_demo, recreated at start) and an
in-process partner webhook receiver. Tenant "noisy" uploads a large CSV
catalog while small tenants publish a few events per second each; the live
view shows per tenant how much each destination applied and the end-to-end
latency.

It stops by itself once every destination applied the whole catalog: the
small tenants stop publishing, and once every event stored is applied (at
most 10 s more) it prints a summary. --duration is an upper bound: the run
stops then even if not everything was applied, and the summary says how
much was not. Ctrl-C stops at once, with the summary.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if c.databaseURL == "" {
				return usageError{errors.New("set DATABASE_URL (make demo does this for you)")}
			}
			return c.runDemo(cmd.Context(), cfg, listen, demoDB, logCfg)
		},
	}
	cmd.Flags().DurationVar(&cfg.Duration, "duration", 0, "stop after at most this long, applied or not (default: no limit; it stops once every destination applied everything)")
	cmd.Flags().IntVar(&cfg.NoisyRows, "noisy-rows", 200_000, "rows in the noisy tenant's CSV catalog import")
	cmd.Flags().IntVar(&cfg.SmallTenants, "small-tenants", 12, "small tenants publishing steadily")
	cmd.Flags().Float64Var(&cfg.SmallRate, "small-rate", 5, "events per second per small tenant")
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:0", "ingest HTTP address")
	c.addFlags(cmd.Flags(), usesDatabase)
	// The pipeline logs to a file, at info unless told otherwise.
	c.envFlags(cmd.Flags(), "", func(fs *pflag.FlagSet) { logCfg.RegisterFlags(fs, "info") })
	return cmd
}

// runDemo runs the demo on the PostgreSQL and ClickHouse databases named
// database (recreated); the pipeline logs to a file as logCfg says.
func (c *cli) runDemo(ctx context.Context, cfg demo.Config, listen, database string, logCfg bootstrap.LogConfig) error {
	logFile, err := os.CreateTemp("", "fairway-demo-*.log")
	if err != nil {
		return err
	}
	defer logFile.Close()
	log, err := logCfg.New(logFile)
	if err != nil {
		return usageError{err}
	}

	tenants := []string{"noisy"}
	for i := range cfg.SmallTenants {
		tenants = append(tenants, fmt.Sprintf("small-%02d", i+1))
	}
	p, err := startPipeline(ctx, pipelineConfig{AdminURL: c.databaseURL, ClickHouseAddr: c.getenv("CLICKHOUSE_ADDR"),
		Database: database, Name: "demo", Tenants: tenants, Logger: log})
	if err != nil {
		return err
	}
	// The pipeline stops after the load and the view.
	defer p.Close(ctx)

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	// The dashboard at /ui: status from PostgreSQL and JetStream,
	// throughput and p95 from the sink runners' metrics on the registry.
	sampler, err := dashboard.NewSampler(&dashboard.SamplerConfig{Logger: log}, dashboard.Registry("this process", p.Registry))
	if err != nil {
		return err
	}
	p.Go(sampler.Run)
	tokens, authLine := dashboardTokens(ln, false, p.Store)
	dash, err := dashboard.New(dashboard.Deps{
		Status: &status.Source{Pairs: p.Store, Reader: work.NewReader(p.NC, ""), JS: p.JS, Dispatchers: p.Store},
		Dests:  sampler,
		Tokens: tokens,
	}, &dashboard.Config{Logger: log})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(dashboard.Path+"/", dash)
	mux.Handle(dashboard.Path, dash)
	ingest := p.Ingest.Handler()
	mux.Handle("/", ingest)
	// The API goes to ingest's own handler unrouted: this mux would
	// redirect /v1/tenants//events (an empty tenant id, a 400 there).
	p.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			ingest.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	}))

	cfg.BaseURL = "http://" + ln.Addr().String()
	cfg.Out = c.out
	cfg.Tokens = func(_ context.Context, tenant string) (string, error) { return p.Tokens[tenant], nil }
	cfg.Client = &http.Client{Timeout: 30 * time.Second}
	cfg.Tracker, cfg.Dests = p.Tracker, p.Dests
	cfg.DeadLetters = p.DeadLetters
	cfg.Footer = "dashboard: " + cfg.BaseURL + dashboard.Path + "/   metrics: " + cfg.BaseURL + "/metrics   logs: " + logFile.Name()
	fmt.Fprintf(c.out, "fairway demo: ingest %s, embedded JetStream %s, PostgreSQL %s, ClickHouse %s/%s, partner %s\n",
		cfg.BaseURL, p.NATSServer.ClientURL(), bootstrap.RedactURL(p.DSN), p.ClickHouseAddr, p.Database, p.Receiver.URL())
	fmt.Fprintf(c.out, "dashboard: %s%s/ (it %s); logs: %s\n", cfg.BaseURL, dashboard.Path, authLine, logFile.Name())
	runErr := demo.Run(ctx, cfg)
	if err := p.Close(ctx); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}
