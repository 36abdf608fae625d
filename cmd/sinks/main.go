// Command sinks runs one destination's sink consumers: it applies work
// items from stream WORK to PostgreSQL, ClickHouse or a B2B partner
// (--dest), with retries, dead letters, /metrics and /healthz. Run as many
// replicas per destination as needed; they share one durable consumer.
// See internal/sink/runner and docs/sinks.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/fairwayhq/fairway/internal/bootstrap"
)

func main() {
	cfg, err := parseConfig(os.Args[1:], os.Getenv, os.Stdout)
	switch {
	case errors.Is(err, bootstrap.ErrHelp), errors.Is(err, bootstrap.ErrVersion):
		os.Exit(0)
	case err != nil:
		fmt.Fprintln(os.Stderr, "sinks:", err)
		os.Exit(2)
	}
	log, err := newLogger(cfg, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sinks:", err)
		os.Exit(2)
	}
	cfg.Runner.Logger = log
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		log.Error("sinks stopped", "err", err)
		os.Exit(1)
	}
}
