package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/sink/runner"
	"github.com/fairwayhq/fairway/sinks/b2b"
	"github.com/fairwayhq/fairway/sinks/clickhouse"
)

// Config is everything the sinks command reads from flags and env.
type Config struct {
	// Dest is postgres, clickhouse or b2b:<partner>. Required.
	Dest string
	// Listen serves /metrics and /healthz. Default 127.0.0.1:9102.
	Listen string
	// NATS is where NATS is and how to authenticate (--nats-url, NATS_URL,
	// and the other bootstrap.NATSConfig flags).
	NATS bootstrap.NATSConfig
	// DatabaseURL (env DATABASE_URL) holds the slot leases, and for
	// --dest postgres the catalog too. Required.
	DatabaseURL string
	// ClickHouseAddr (env CLICKHOUSE_ADDR) and ClickHouseDatabase, for
	// --dest clickhouse. Defaults 127.0.0.1:9000 and "fairway".
	ClickHouseAddr     string
	ClickHouseDatabase string
	// ClickHouseLinger and ClickHouseGroupRows shape the ClickHouse sink's
	// group commit (clickhouse.Config.Linger, GroupRows). Defaults
	// clickhouse.LingerDefault (5ms; 0 means no lingering) and
	// clickhouse.GroupRowsDefault (50,000; negative turns group commit off).
	ClickHouseLinger    time.Duration
	ClickHouseGroupRows int
	// ClickHouseFillRows and ClickHouseFillWait hold combined inserts back
	// while only caught-up tenants wait (clickhouse.Config.FillRows,
	// FillWait). Defaults clickhouse.FillRowsDefault (10,000) and
	// clickhouse.FillWaitDefault (200ms; 0 turns it off).
	ClickHouseFillRows int
	ClickHouseFillWait time.Duration
	// SecretKey decrypts partner secrets (env FAIRWAY_SECRET_KEY), for
	// --dest b2b:<partner>. AllowInsecureHTTP accepts http:// partner URLs.
	SecretKey         []byte
	AllowInsecureHTTP bool
	// Replicas of the DLQ stream, which the sinks create. Default 1.
	Replicas int
	// Runner is the runtime's configuration (concurrency, fetch batch,
	// AckWait, MaxDeliver, backoff, …); see runner.Config.
	Runner        runner.Config
	LogFormat     string
	LogLevel      string
	ShutdownGrace time.Duration
}

func parseConfig(args []string, getenv func(string) string) (Config, error) {
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	var c Config
	r := &c.Runner
	fs := flag.NewFlagSet("sinks", flag.ContinueOnError)
	fs.StringVar(&c.Dest, "dest", env("FAIRWAY_SINK_DEST", ""), "destination: postgres, clickhouse or b2b:<partner> (env FAIRWAY_SINK_DEST, required)")
	fs.StringVar(&c.Listen, "listen", env("FAIRWAY_SINKS_LISTEN", "127.0.0.1:9102"), "HTTP address for /metrics and /healthz (env FAIRWAY_SINKS_LISTEN)")
	c.NATS.RegisterFlags(fs, getenv)
	fs.StringVar(&c.DatabaseURL, "database-url", env("DATABASE_URL", ""), "PostgreSQL URL: slot leases, and the catalog for --dest postgres (env DATABASE_URL, required)")
	fs.StringVar(&c.ClickHouseAddr, "clickhouse-addr", env("CLICKHOUSE_ADDR", clickhouse.AddrDefault), "ClickHouse native address host:port (env CLICKHOUSE_ADDR)")
	fs.StringVar(&c.ClickHouseDatabase, "clickhouse-database", env("CLICKHOUSE_DATABASE", clickhouse.DatabaseDefault), "ClickHouse database (env CLICKHOUSE_DATABASE)")
	fs.DurationVar(&c.ClickHouseLinger, "clickhouse-linger", clickhouse.LingerDefault, "ClickHouse group commit: how long an insert waits for the callers of the last one to queue again (0: never waits)")
	fs.IntVar(&c.ClickHouseGroupRows, "clickhouse-group-rows", clickhouse.GroupRowsDefault, "ClickHouse group commit: most rows in one combined INSERT (negative: no group commit, one INSERT per work item)")
	fs.IntVar(&c.ClickHouseFillRows, "clickhouse-fill-rows", clickhouse.FillRowsDefault, "ClickHouse group commit: an insert of caught-up tenants' items only waits until it has this many rows...")
	fs.DurationVar(&c.ClickHouseFillWait, "clickhouse-fill-wait", clickhouse.FillWaitDefault, "...or until its oldest item waited this long (0: never waits; items of tenants with more waiting never wait)")
	fs.BoolVar(&c.AllowInsecureHTTP, "allow-insecure-http", false, "b2b: accept http:// partner URLs (default: https only)")
	fs.IntVar(&c.Replicas, "replicas", 1, "replicas of the DLQ stream, which the sinks create (3 in a cluster)")
	fs.IntVar(&r.Concurrency, "concurrency", runner.ConcurrencyDefault, fmt.Sprintf("work items applied at once by this process (default %d for --dest clickhouse, whose items wait together in group commit)", clickhouse.ConcurrencyDefault))
	fs.IntVar(&r.FetchBatch, "fetch-batch", 0, "most work items per fetch (default: --concurrency); never more than free workers")
	fs.DurationVar(&r.AckWait, "ack-wait", runner.AckWaitDefault, "JetStream AckWait of the WORK consumer (InProgress is sent every third of it)")
	fs.IntVar(&r.MaxDeliver, "max-deliver", runner.MaxDeliverDefault, "deliveries of one work item; the last is dead-lettered instead of applied")
	fs.IntVar(&r.MaxAttempts, "max-attempts", runner.MaxAttemptsDefault, "apply attempts for errors of unknown class before dead-lettering")
	fs.DurationVar(&r.ExtendEvery, "extend-every", runner.ExtendEveryDefault, "how often a working item's slot lease is extended (well below the lease TTL)")
	fs.DurationVar(&r.Backoff.Initial, "backoff-initial", runner.BackoffInitialDefault, "first retry delay")
	fs.DurationVar(&r.Backoff.Max, "backoff-max", runner.BackoffMaxDefault, "longest retry delay")
	fs.DurationVar(&r.Backoff.MaxElapsed, "backoff-max-elapsed", runner.BackoffElapsedDefault, "how long transient failures of one item are retried before dead-lettering")
	fs.Float64Var(&r.Backoff.Multiplier, "backoff-multiplier", runner.BackoffMultiplierDefault, "growth of the retry delay")
	fs.Float64Var(&r.Backoff.Randomization, "backoff-jitter", runner.BackoffRandomizationDefault, "retry delay jitter factor in [0, 1]")
	fs.StringVar(&c.LogFormat, "log-format", env("FAIRWAY_LOG_FORMAT", "text"), "text or json")
	fs.StringVar(&c.LogLevel, "log-level", env("FAIRWAY_LOG_LEVEL", "info"), "debug, info, warn or error")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", runner.ShutdownGraceDefault, "time items inside Apply get to finish on shutdown before they are handed back")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case c.Dest == "":
		return c, fmt.Errorf("--dest is required: postgres, clickhouse or b2b:<partner>")
	case c.Dest != "postgres" && c.Dest != "clickhouse" && !strings.HasPrefix(c.Dest, "b2b:"):
		return c, fmt.Errorf("--dest %q: want postgres, clickhouse or b2b:<partner>", c.Dest)
	case c.DatabaseURL == "":
		return c, fmt.Errorf("DATABASE_URL (or --database-url) is required: slot leases live in PostgreSQL")
	}
	if k := getenv(b2b.SecretKeyEnv); k != "" {
		key, err := b2b.ParseSecretKey(k)
		if err != nil {
			return c, err
		}
		c.SecretKey = key
	}
	if c.ClickHouseLinger == 0 {
		c.ClickHouseLinger = -1 // an explicit 0 means no lingering
	}
	if c.Dest == "clickhouse" && !isSet(fs, "concurrency") {
		r.Concurrency = clickhouse.ConcurrencyDefault
	}
	if c.ClickHouseFillWait == 0 {
		c.ClickHouseFillWait = -1 // an explicit 0 means no holding back
	}
	if r.Backoff.Randomization == 0 {
		r.Backoff.Randomization = -1 // an explicit 0 means no jitter
	}
	r.Dest = c.Dest
	r.ShutdownGrace = c.ShutdownGrace
	return c, nil
}

func newLogger(c Config) (*slog.Logger, error) {
	log, err := bootstrap.NewLogger(os.Stderr, c.LogFormat, c.LogLevel)
	if err != nil {
		return nil, err
	}
	return log.With("service", "sinks", "dest", c.Dest), nil
}

// isSet says whether the command line gave flag name.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
