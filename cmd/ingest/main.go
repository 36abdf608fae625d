// Command ingest is fairway's HTTP entry for upstream systems: it accepts
// product events and CSV catalog imports per tenant and stores them in the
// PRODUCTS stream. See internal/ingest for the API.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/ingest"
	"github.com/fairwayhq/fairway/pkg/events"
)

func main() {
	cfg, err := parseConfig(os.Args[1:], os.Getenv, os.Stdout)
	switch {
	case errors.Is(err, bootstrap.ErrHelp), errors.Is(err, bootstrap.ErrVersion):
		os.Exit(0)
	case err != nil:
		fmt.Fprintln(os.Stderr, "ingest:", err)
		os.Exit(2)
	}
	log, err := cfg.Log.New(os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ingest:", err)
		os.Exit(2)
	}
	cfg.Ingest.Logger = log
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		log.Error("ingest stopped", "err", err)
		os.Exit(1)
	}
}

// command is ingest's --help and --version.
var command = bootstrap.Command{
	Name: "ingest",
	Summary: `ingest is fairway's HTTP entry for upstream systems: it accepts product
events and CSV catalog imports per tenant (docs/ingest-api.md) and stores
them in the PRODUCTS stream, which it creates.`,
	EnvOnly: bootstrap.TracingEnv,
}

// parseConfig reads the command line and the environment (getenv); --help
// and --version print to out and return bootstrap.ErrHelp or ErrVersion.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	var c Config
	fs := pflag.NewFlagSet("ingest", pflag.ContinueOnError)
	fs.StringVar(&c.Listen, "listen", bootstrap.IngestListenDefault, "HTTP listen address of the API, /metrics and /healthz")
	c.TLS.RegisterFlags(fs, "FAIRWAY_INGEST_")
	c.NATS.RegisterFlags(fs)
	fs.StringVar(&c.DatabaseURL, "database-url", "", "PostgreSQL URL (required)")
	bootstrap.SetEnv(fs, "database-url", "DATABASE_URL")
	fs.IntVar(&c.Stream.Replicas, "replicas", 1, "PRODUCTS stream replicas (3 in a cluster)")
	fs.IntVar(&c.Stream.Partitions, "partitions", events.PartitionsDefault, "partitions of PRODUCTS when ingest creates it (dispatchers split the tenants by partition); an existing stream keeps its own")
	fs.DurationVar(&c.Stream.MaxAge, "max-age", events.StreamConfig{}.WithDefaults().MaxAge, "how long PRODUCTS keeps events: the replay horizon")
	fs.Int64Var(&c.Ingest.MaxBodyBytes, "max-body", ingest.MaxBodyBytesDefault, "largest events request body in bytes")
	fs.IntVar(&c.Ingest.MaxEvents, "max-events", ingest.MaxEventsDefault, "most events in one request")
	fs.IntVar(&c.Ingest.MaxCSVRecordBytes, "max-csv-record", ingest.MaxCSVRecordBytesDefault, "largest CSV record in bytes (a row, quoted fields over several lines included); a longer one fails its row")
	fs.Int64Var(&c.Ingest.UploadMinRate, "upload-min-rate", ingest.UploadMinRateDefault, "slowest average rate in bytes/s at which a CSV upload may arrive after --upload-grace; a slower one is cut with 408")
	fs.DurationVar(&c.Ingest.UploadGrace, "upload-grace", ingest.UploadGraceDefault, "time a CSV upload has before --upload-min-rate counts")
	fs.DurationVar(&c.Ingest.UploadTimeout, "upload-timeout", ingest.UploadTimeoutDefault, "longest time one CSV upload may take to arrive")
	fs.StringVar(&c.Ingest.SpoolDir, "spool-dir", "", "directory for CSV uploads in progress; keep it across restarts (default $TMPDIR/fairway-imports)")
	fs.StringVar(&c.Ingest.Node, "node", "", "name of this instance; it resumes its own unfinished imports (default host name)")
	c.Log.RegisterFlags(fs, "info")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", 30*time.Second, "time in-flight requests get to finish on shutdown")
	bootstrap.BindEnv(fs, "FAIRWAY_INGEST_", getenv)
	if err := command.Parse(fs, args, getenv, out); err != nil {
		return c, err
	}
	if c.DatabaseURL == "" {
		return c, fmt.Errorf("DATABASE_URL (or --database-url) is required")
	}
	var err error
	c.Tracing, err = bootstrap.TracingFromEnv(bootstrap.ServiceIngest, getenv)
	return c, err
}
