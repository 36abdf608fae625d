package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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
	log         bootstrap.LogConfig
}

func newRootCmd(getenv func(string) string, out, errOut io.Writer) *cobra.Command {
	c := &cli{getenv: getenv, out: out, errOut: errOut}
	root := &cobra.Command{
		Use:           "fairway",
		Short:         "Operate fairway: a fair, slot-limited multi-tenant product sync pipeline",
		Version:       bootstrap.Version("fairway"),
		SilenceUsage:  true,
		SilenceErrors: true,
		// The flags a command was not given take their environment
		// variables (DATABASE_URL, NATS_URL, FAIRWAY_LOG_LEVEL, …).
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := bootstrap.ApplyEnv(cmd.Flags(), getenv); err != nil {
				return usageError{err}
			}
			return nil
		},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SetOut(out)
	root.SetErr(errOut)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(c.migrateCmd(), c.tenantsCmd(), c.adminTokenCmd(), c.tokensCmd(), c.demoCmd(), c.statusCmd(), c.partnersCmd(), c.dlqCmd(), c.replayCmd(), c.cursorsCmd(), c.serveCmd())
	for _, cmd := range root.Commands() {
		bindCommandEnv(cmd, getenv)
	}
	return root
}

// bindCommandEnv gives every flag of cmd and its subcommands that has no
// environment variable yet (the connection and log flags share theirs)
// one named for the command and the flag: --events-per-sec of `fairway
// tenants set-rate` is FAIRWAY_TENANTS_SET_RATE_EVENTS_PER_SEC. The root's
// PersistentPreRunE applies them (bootstrap.ApplyEnv).
func bindCommandEnv(cmd *cobra.Command, getenv func(string) string) {
	name := strings.NewReplacer(" ", "_", "-", "_").Replace(strings.TrimPrefix(cmd.CommandPath(), "fairway "))
	unbound := pflag.NewFlagSet("", pflag.ContinueOnError)
	cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
		if bootstrap.EnvOf(f) == "" && f.Name != "help" {
			unbound.AddFlag(f)
		}
	})
	bootstrap.BindEnv(unbound, "FAIRWAY_"+strings.ToUpper(name)+"_", getenv)
	for _, sub := range cmd.Commands() {
		bindCommandEnv(sub, getenv)
	}
}

// uses says which connection and log flags a command takes; a command
// shows in --help only those it uses.
type uses int

const (
	usesDatabase uses = 1 << iota // --database-url (DATABASE_URL)
	usesNATS                      // --nats-url, --nats-creds, … (NATS_URL, NATS_CREDS, …)
	usesLog                       // --log-format, --log-level (FAIRWAY_LOG_FORMAT, FAIRWAY_LOG_LEVEL)
)

// addFlags adds the flags of u to fs: the persistent flags of a command
// with subcommands, or a command's own.
func (c *cli) addFlags(fs *pflag.FlagSet, u uses) {
	c.envFlags(fs, "", func(g *pflag.FlagSet) {
		if u&usesDatabase != 0 {
			g.StringVar(&c.databaseURL, "database-url", "", "PostgreSQL URL")
			bootstrap.SetEnv(g, "database-url", "DATABASE_URL")
		}
		if u&usesNATS != 0 {
			c.nats.RegisterFlags(g)
		}
		if u&usesLog != 0 {
			c.log.RegisterFlags(g, "warn")
		}
	})
}

// envFlags adds the flags register registers to fs, each read from its
// environment variable when not given (bootstrap.BindEnv: the variable
// SetEnv named, else prefix and the flag's name).
func (c *cli) envFlags(fs *pflag.FlagSet, prefix string, register func(*pflag.FlagSet)) {
	g := pflag.NewFlagSet("", pflag.ContinueOnError)
	register(g)
	bootstrap.BindEnv(g, prefix, c.getenv)
	fs.AddFlagSet(g)
}

func (c *cli) logger() (*slog.Logger, error) {
	return c.log.New(c.errOut)
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
	cmd := &cobra.Command{
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
	c.addFlags(cmd.Flags(), usesDatabase)
	return cmd
}
