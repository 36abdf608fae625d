// Command ingest is fairway's HTTP entry for upstream systems: it accepts
// product events and CSV catalog imports per tenant and stores them in the
// PRODUCTS stream. See internal/ingest for the API.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/ingest"
	"github.com/fairwayhq/fairway/pkg/events"
)

func main() {
	cfg, err := parseConfig(os.Args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ingest:", err)
		os.Exit(2)
	}
	log, err := bootstrap.NewLogger(os.Stderr, cfg.LogFormat, cfg.LogLevel)
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

func parseConfig(args []string, getenv func(string) string) (Config, error) {
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	var c Config
	fs := flag.NewFlagSet("ingest", flag.ContinueOnError)
	fs.StringVar(&c.Listen, "listen", env("FAIRWAY_INGEST_LISTEN", "127.0.0.1:8080"), "HTTP listen address (env FAIRWAY_INGEST_LISTEN)")
	c.TLS.RegisterFlags(fs, "FAIRWAY_INGEST_", getenv)
	c.NATS.RegisterFlags(fs, getenv)
	fs.StringVar(&c.DatabaseURL, "database-url", env("DATABASE_URL", ""), "PostgreSQL URL (env DATABASE_URL, required)")
	fs.IntVar(&c.Stream.Replicas, "replicas", 1, "PRODUCTS stream replicas (3 in a cluster)")
	fs.DurationVar(&c.Stream.MaxAge, "max-age", events.StreamConfig{}.WithDefaults().MaxAge, "how long PRODUCTS keeps events: the replay horizon")
	fs.Int64Var(&c.Ingest.MaxBodyBytes, "max-body", ingest.MaxBodyBytesDefault, "largest events request body in bytes")
	fs.IntVar(&c.Ingest.MaxEvents, "max-events", ingest.MaxEventsDefault, "most events in one request")
	fs.IntVar(&c.Ingest.MaxCSVRecordBytes, "max-csv-record", ingest.MaxCSVRecordBytesDefault, "largest CSV record in bytes (a row, quoted fields over several lines included); a longer one fails its row")
	fs.Int64Var(&c.Ingest.UploadMinRate, "upload-min-rate", ingest.UploadMinRateDefault, "slowest average rate in bytes/s at which a CSV upload may arrive after --upload-grace; a slower one is cut with 408")
	fs.DurationVar(&c.Ingest.UploadGrace, "upload-grace", ingest.UploadGraceDefault, "time a CSV upload has before --upload-min-rate counts")
	fs.DurationVar(&c.Ingest.UploadTimeout, "upload-timeout", ingest.UploadTimeoutDefault, "longest time one CSV upload may take to arrive")
	fs.StringVar(&c.Ingest.SpoolDir, "spool-dir", env("FAIRWAY_SPOOL_DIR", ""), "directory for CSV uploads in progress (default $TMPDIR/fairway-imports)")
	fs.StringVar(&c.Ingest.Node, "node", env("FAIRWAY_NODE", ""), "name of this instance; it resumes its own unfinished imports (default host name)")
	fs.StringVar(&c.LogFormat, "log-format", env("FAIRWAY_LOG_FORMAT", "text"), "text or json")
	fs.StringVar(&c.LogLevel, "log-level", env("FAIRWAY_LOG_LEVEL", "info"), "debug, info, warn or error")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", 30*time.Second, "time in-flight requests get to finish on shutdown")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.DatabaseURL == "" {
		return c, fmt.Errorf("DATABASE_URL (or --database-url) is required")
	}
	return c, nil
}
