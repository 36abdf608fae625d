package main

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/kind"
	"github.com/fairwayhq/fairway/sinks/b2b"
	"github.com/fairwayhq/fairway/sinks/clickhouse"
	"github.com/fairwayhq/fairway/sinks/postgres"
)

// sinkKind is how this command runs the sinks of one kind
// (internal/sink/kind).
type sinkKind struct {
	// open builds the sink of cfg.Dest (instance is what follows "<kind>:",
	// a B2B partner) and the func that closes it.
	open func(ctx context.Context, cfg Config, instance string, pool *pgxpool.Pool, metrics prometheus.Registerer) (sink.Sink, func(), error)
	// concurrency is the default --concurrency; 0: runner.ConcurrencyDefault.
	concurrency int
}

// kinds has an entry for every kind of kind.All (TestEveryKindOpens).
var kinds = map[string]sinkKind{
	kind.Postgres:   {open: openPostgres},
	kind.ClickHouse: {open: openClickHouse, concurrency: clickhouse.ConcurrencyDefault},
	kind.B2B:        {open: openB2B},
}

func openPostgres(ctx context.Context, _ Config, _ string, pool *pgxpool.Pool, _ prometheus.Registerer) (sink.Sink, func(), error) {
	s, err := postgres.New(ctx, &postgres.Config{Pool: pool})
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}

func openClickHouse(ctx context.Context, cfg Config, _ string, _ *pgxpool.Pool, metrics prometheus.Registerer) (sink.Sink, func(), error) {
	s, err := clickhouse.New(ctx, &clickhouse.Config{Addr: cfg.ClickHouseAddr, Database: cfg.ClickHouseDatabase,
		Linger: cfg.ClickHouseLinger, GroupRows: cfg.ClickHouseGroupRows, FillRows: cfg.ClickHouseFillRows, FillWait: cfg.ClickHouseFillWait,
		Registerer: metrics})
	if err != nil {
		return nil, nil, err
	}
	return s, func() { _ = s.Close() }, nil
}

func openB2B(_ context.Context, cfg Config, partner string, pool *pgxpool.Pool, metrics prometheus.Registerer) (sink.Sink, func(), error) {
	reg, err := b2b.NewRegistry(pool, &b2b.RegistryConfig{SecretKey: cfg.SecretKey, AllowInsecureHTTP: cfg.AllowInsecureHTTP})
	if err != nil {
		return nil, nil, err
	}
	s, err := b2b.New(&b2b.Config{Registry: reg, Partner: partner, Logger: cfg.Runner.Logger, Registerer: metrics})
	if err != nil {
		return nil, nil, err
	}
	return s, s.Close, nil
}

// openSink builds cfg.Dest's sink and the func that closes it.
func openSink(ctx context.Context, cfg Config, pool *pgxpool.Pool, metrics prometheus.Registerer) (sink.Sink, func(), error) {
	k, instance, err := kind.Parse(cfg.Dest)
	if err != nil {
		return nil, nil, err
	}
	return kinds[k.Name].open(ctx, cfg, instance, pool, metrics)
}
