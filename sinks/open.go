// Package sinks opens the sink of any destination: it maps every kind of
// internal/sink/kind to the constructor of its sink package (postgres,
// clickhouse, b2b) and to the sink runner's defaults for it. cmd/sinks
// and the in-process pipeline (internal/pipeline) open their sinks here,
// so that both build a destination's sink the same way.
//
// Adding a kind adds its line to opens below (TestEveryKindOpens fails
// until it does).
package sinks

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/kind"
	"github.com/fairwayhq/fairway/sinks/b2b"
	"github.com/fairwayhq/fairway/sinks/clickhouse"
	"github.com/fairwayhq/fairway/sinks/postgres"
)

// Deps are what the sinks of every kind are built on.
type Deps struct {
	// Pool holds the postgres sink's catalog and the B2B partners
	// (fairway.partners). Required.
	Pool *pgxpool.Pool
	// Registerer gets the sinks' own metrics. Default: none.
	Registerer prometheus.Registerer
	// Logger receives the sinks' logs. Default: discard.
	Logger *slog.Logger
}

// Config holds the settings of every kind; a sink reads its own.
type Config struct {
	// ClickHouse configures the clickhouse sink; its Registerer is
	// Deps.Registerer.
	ClickHouse clickhouse.Config
	// B2B configures the partner registry a b2b:<partner> sink reads.
	B2B b2b.RegistryConfig
}

// opener builds the sink of one kind's destination (instance is what
// follows "<kind>:", a B2B partner) and the func that closes it.
type opener func(ctx context.Context, instance string, deps Deps, cfg Config) (sink.Sink, func(), error)

// kindSinks is what this package knows of one kind.
type kindSinks struct {
	open opener
	// concurrency is the sink runner's default concurrency for the kind;
	// 0: runner.ConcurrencyDefault.
	concurrency int
}

// opens has an entry for every kind of kind.All (TestEveryKindOpens).
var opens = map[string]kindSinks{
	kind.Postgres:   {open: openPostgres},
	kind.ClickHouse: {open: openClickHouse, concurrency: clickhouse.ConcurrencyDefault},
	kind.B2B:        {open: openB2B},
}

// Open builds dest's sink and returns it with the func that closes it.
func Open(ctx context.Context, dest string, deps Deps, cfg Config) (sink.Sink, func(), error) {
	k, instance, err := kind.Parse(dest)
	if err != nil {
		return nil, nil, err
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	return opens[k.Name].open(ctx, instance, deps, cfg)
}

// Concurrency is the sink runner's default concurrency for dest
// (runner.Config.Concurrency); 0 when dest's kind keeps the runner's own
// default or dest is not valid.
func Concurrency(dest string) int {
	k, _, err := kind.Parse(dest)
	if err != nil {
		return 0
	}
	return opens[k.Name].concurrency
}

func openPostgres(ctx context.Context, _ string, deps Deps, _ Config) (sink.Sink, func(), error) {
	s, err := postgres.New(ctx, &postgres.Config{Pool: deps.Pool})
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}

func openClickHouse(ctx context.Context, _ string, deps Deps, cfg Config) (sink.Sink, func(), error) {
	c := cfg.ClickHouse
	c.Registerer = deps.Registerer
	s, err := clickhouse.New(ctx, &c)
	if err != nil {
		return nil, nil, err
	}
	return s, func() { _ = s.Close() }, nil
}

func openB2B(_ context.Context, partner string, deps Deps, cfg Config) (sink.Sink, func(), error) {
	reg, err := b2b.NewRegistry(deps.Pool, &cfg.B2B)
	if err != nil {
		return nil, nil, err
	}
	s, err := b2b.New(&b2b.Config{Registry: reg, Partner: partner, Logger: deps.Logger, Registerer: deps.Registerer})
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}
