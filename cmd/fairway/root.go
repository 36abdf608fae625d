package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// usageError marks a wrong invocation (exit code 2).
type usageError struct{ error }

// cli carries what every subcommand needs.
type cli struct {
	getenv      func(string) string
	out, errOut io.Writer
	databaseURL string
	nats        bootstrap.NATSConfig
	logFormat   string
	logLevel    string
}

func newRootCmd(getenv func(string) string, out, errOut io.Writer) *cobra.Command {
	c := &cli{getenv: getenv, out: out, errOut: errOut}
	root := &cobra.Command{
		Use:           "fairway",
		Short:         "Operate fairway: a fair, slot-limited multi-tenant product sync pipeline",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	root.SetErr(errOut)
	root.PersistentFlags().StringVar(&c.databaseURL, "database-url", getenv("DATABASE_URL"), "PostgreSQL URL (env DATABASE_URL)")
	natsFlags := flag.NewFlagSet("nats", flag.ContinueOnError)
	c.nats.RegisterFlags(natsFlags, getenv)
	root.PersistentFlags().AddGoFlagSet(natsFlags)
	root.PersistentFlags().StringVar(&c.logFormat, "log-format", "text", "text or json")
	root.PersistentFlags().StringVar(&c.logLevel, "log-level", "warn", "debug, info, warn or error")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(c.migrateCmd(), c.tenantsCmd(), c.adminTokenCmd(), c.tokensCmd(), c.demoCmd(), c.statusCmd(), c.partnersCmd(), c.dlqCmd(), c.replayCmd(), c.cursorsCmd(), c.serveCmd())
	return root
}

func (c *cli) logger() (*slog.Logger, error) {
	return bootstrap.NewLogger(c.errOut, c.logFormat, c.logLevel)
}

// store opens PostgreSQL (migrating it) and a tenancy store on it.
func (c *cli) store(ctx context.Context) (*tenancy.Store, *pgxpool.Pool, error) {
	if c.databaseURL == "" {
		return nil, nil, usageError{fmt.Errorf("set DATABASE_URL or --database-url (for the local dev server: make services, then . .dev/services.env)")}
	}
	log, err := c.logger()
	if err != nil {
		return nil, nil, usageError{err}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pool, err := bootstrap.OpenPostgres(ctx, c.databaseURL)
	if err != nil {
		return nil, nil, err
	}
	st, err := tenancy.New(pool, &tenancy.Config{Logger: log})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return st, pool, nil
}

func (c *cli) migrateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Apply pending PostgreSQL schema migrations (services also do this at start)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if c.databaseURL == "" {
				return usageError{fmt.Errorf("set DATABASE_URL or --database-url")}
			}
			res, err := migrate.Up(cmd.Context(), c.databaseURL)
			if err != nil {
				return err
			}
			if len(res) == 0 {
				fmt.Fprintln(c.out, "schema is up to date")
			}
			for _, r := range res {
				fmt.Fprintf(c.out, "applied %05d %s\n", r.Version, r.Source)
			}
			return nil
		},
	}
}
