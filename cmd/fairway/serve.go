package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/dashboard"
	"github.com/fairwayhq/fairway/internal/status"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/sinks/b2b"
)

// serveListenDefault is where `fairway serve` listens: loopback, where the
// dashboard needs no token (dashboardTokens).
const serveListenDefault = bootstrap.DashboardListenDefault

func (c *cli) serveCmd() *cobra.Command {
	var listen string
	var requireToken bool
	var sinkMetrics []string
	var cfg dashboard.Config
	var tlsFiles bootstrap.ServerTLS
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the live dashboard at /ui: per tenant backlog, slots in use against the limit, dead letters and why work waits",
		Long: `serve reads PostgreSQL (DATABASE_URL) and JetStream (NATS_URL) and serves
a live page at http://<listen>/ui with what ` + "`fairway status`" + ` prints: per tenant and
destination the backlog, the oldest waiting event, slots in use against the
limit, the weight, dead letters and why work waits. Tenants come a page at a
time (--page-size), the most backlog first, with a filter by tenant id. The
page polls /ui/api/status (JSON). A tenant's name opens its B2B partners:
attempts, success rate and last error from the delivery log
(/ui/api/partners?tenant=<id>).

Events/s and p95 end-to-end latency per destination come from the sinks'
Prometheus metrics: --sink-metrics lists the /metrics address (the --listen
address) of every sinks process, e.g.
  --sink-metrics 127.0.0.1:9102,10.0.0.7:9102
It reads them every 2 s and adds up the processes of one destination; the
page names any that does not answer. Without it they read "no data".

Listening beyond loopback (--listen :8090, say), /ui/api/status needs a
fairway API token (Authorization: Bearer; the page asks for one and keeps it
for the browser tab): an admin token shows every tenant, a tenant token that
tenant's rows and partners alone. On loopback it is open to anyone on the host, unless
--require-token (for a proxy on the same host). The start lines say which.

With --tls-cert and --tls-key it serves HTTPS.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.runServe(cmd.Context(), listen, requireToken, sinkMetrics, tlsFiles, cfg)
		},
	}
	c.envFlags(cmd.Flags(), "FAIRWAY_SERVE_", func(fs *pflag.FlagSet) {
		fs.StringSliceVar(&sinkMetrics, "sink-metrics", nil,
			"/metrics of every sinks process (host:port of its --listen, or a URL), comma-separated, for events/s and p95 per destination")
		fs.BoolVar(&requireToken, "require-token", false, "ask for a token on loopback too (always asked beyond loopback)")
		fs.StringVar(&listen, "listen", serveListenDefault, "HTTP address of the dashboard")
		fs.IntVar(&cfg.PageSize, "page-size", dashboard.PageSizeDefault, fmt.Sprintf("tenants per page, the most backlog first (at most %d)", dashboard.PageSizeMax))
		fs.DurationVar(&cfg.Refresh, "refresh", dashboard.RefreshDefault, "how often the page refreshes (and status is read)")
		tlsFiles.RegisterFlags(fs, "FAIRWAY_SERVE_")
	})
	c.addFlags(cmd.Flags(), usesDatabase|usesNATS|usesLog)
	return cmd
}

func (c *cli) runServe(ctx context.Context, listen string, requireToken bool, sinkMetrics []string, tlsFiles bootstrap.ServerTLS, cfg dashboard.Config) error {
	log, err := c.logger()
	if err != nil {
		return usageError{err}
	}
	tlsConfig, err := tlsFiles.Config()
	if err != nil {
		return usageError{err}
	}
	var sources []dashboard.MetricsSource
	for _, u := range sinkMetrics {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		src, err := dashboard.Scrape(u, nil)
		if err != nil {
			return usageError{fmt.Errorf("--sink-metrics: %w", err)}
		}
		sources = append(sources, src)
	}
	st, pool, err := c.store(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	nc, js, err := c.jetstream()
	if err != nil {
		return err
	}
	defer nc.Close()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", listen, err)
	}
	defer ln.Close()
	tokens, authLine := dashboardTokens(ln, requireToken, st)
	cfg.Logger = log
	partners, err := b2b.NewRegistry(pool, nil) // reads the delivery log only: no secret key
	if err != nil {
		return err
	}
	deps := dashboard.Deps{Status: &status.Source{Pairs: st, Reader: work.NewReader(nc, ""), JS: js, Dispatchers: st}, Partners: partners, Tokens: tokens}
	metricsLine := "no --sink-metrics: events/s and p95 read \"no data\""
	if len(sources) > 0 {
		sampler, err := dashboard.NewSampler(&dashboard.SamplerConfig{Logger: log}, sources...)
		if err != nil {
			return err
		}
		deps.Dests = sampler
		sctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = sampler.Run(sctx)
		}()
		defer func() { stop(); <-done }()
		names := make([]string, len(sources))
		for i, src := range sources {
			names[i] = src.Name()
		}
		metricsLine = "events/s and p95 from the sink metrics at " + strings.Join(names, ", ")
	}
	dash, err := dashboard.New(deps, &cfg)
	if err != nil {
		return usageError{err}
	}
	mux := http.NewServeMux()
	mux.Handle(dashboard.Path+"/", dash)
	mux.Handle(dashboard.Path, dash)
	mux.Handle("GET /{$}", http.RedirectHandler(dashboard.Path+"/", http.StatusFound))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if !nc.IsConnected() {
			http.Error(w, "nats disconnected", http.StatusServiceUnavailable)
			return
		}
		if err := pool.Ping(r.Context()); err != nil {
			http.Error(w, "postgres: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	scheme := "http"
	if tlsConfig != nil {
		scheme = "https"
	}
	fmt.Fprintf(c.out, "fairway serve: dashboard at %s://%s%s/ (Ctrl-C stops)\n", scheme, ln.Addr(), dashboard.Path)
	if tokens == nil {
		authLine += " (--require-token asks for one)"
	}
	fmt.Fprintf(c.out, "fairway serve: the dashboard %s\n", authLine)
	fmt.Fprintf(c.out, "fairway serve: %s\n", metricsLine)
	srv := bootstrap.HTTPServer(mux, log)
	srv.TLSConfig = tlsConfig
	return bootstrap.Serve(ctx, srv, ln, 5*time.Second)
}
