package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/dashboard"
	"github.com/fairwayhq/fairway/internal/status"
	"github.com/fairwayhq/fairway/internal/work"
)

// serveListenDefault is where `fairway serve` listens: loopback, where the
// dashboard needs no token (dashboardTokens).
const serveListenDefault = bootstrap.DashboardListenDefault

func (c *cli) serveCmd() *cobra.Command {
	var listen string
	var requireToken bool
	var cfg dashboard.Config
	var tlsFiles bootstrap.ServerTLS
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the live dashboard at /ui: per tenant backlog, slots in use against the limit, dead letters and why work waits",
		Long: `serve reads PostgreSQL (DATABASE_URL) and JetStream (NATS_URL) and serves
a live page at http://<listen>/ui with what ` + "`fairway status`" + ` prints: per tenant and
destination the backlog, the oldest waiting event, slots in use against the
limit, the weight, dead letters and why work waits. The tenants with the most
backlog are listed (--top); the rest are summed in one row. The page polls
/ui/api/status (JSON).

Throughput and p95 latency per destination need the sink runners' metrics in
the same process (` + "`fairway demo`" + ` has them); here they read "no data".

Listening beyond loopback (--listen :8090, say), /ui/api/status needs a
fairway API token (Authorization: Bearer; the page asks for one and keeps it
for the browser tab): an admin token shows every tenant, a tenant token that
tenant's rows alone. On loopback it is open to anyone on the host, unless
--require-token (for a proxy on the same host). The start lines say which.

With --tls-cert and --tls-key it serves HTTPS.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.runServe(cmd.Context(), listen, requireToken, tlsFiles, cfg)
		},
	}
	c.envFlags(cmd.Flags(), "FAIRWAY_SERVE_", func(fs *pflag.FlagSet) {
		fs.BoolVar(&requireToken, "require-token", false, "ask for a token on loopback too (always asked beyond loopback)")
		fs.StringVar(&listen, "listen", serveListenDefault, "HTTP address of the dashboard")
		fs.IntVar(&cfg.TopK, "top", dashboard.TopKDefault, "tenants listed one by one, those with the most backlog")
		fs.DurationVar(&cfg.Refresh, "refresh", dashboard.RefreshDefault, "how often the page refreshes (and status is read)")
		tlsFiles.RegisterFlags(fs, "FAIRWAY_SERVE_")
	})
	c.addFlags(cmd.Flags(), usesDatabase|usesNATS|usesLog)
	return cmd
}

func (c *cli) runServe(ctx context.Context, listen string, requireToken bool, tlsFiles bootstrap.ServerTLS, cfg dashboard.Config) error {
	log, err := c.logger()
	if err != nil {
		return usageError{err}
	}
	tlsConfig, err := tlsFiles.Config()
	if err != nil {
		return usageError{err}
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
	dash, err := dashboard.New(dashboard.Deps{Status: &status.Source{Pairs: st, Reader: work.NewReader(nc, ""), JS: js}, Tokens: tokens}, &cfg)
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
	srv := bootstrap.HTTPServer(mux, log)
	srv.TLSConfig = tlsConfig
	return bootstrap.Serve(ctx, srv, ln, 5*time.Second)
}
