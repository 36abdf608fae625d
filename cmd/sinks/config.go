package main

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/pflag"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/sink/kind"
	"github.com/fairwayhq/fairway/internal/sink/runner"
	"github.com/fairwayhq/fairway/internal/status"
	"github.com/fairwayhq/fairway/sinks"
	"github.com/fairwayhq/fairway/sinks/b2b"
	"github.com/fairwayhq/fairway/sinks/clickhouse"
)

// Config is everything the sinks command reads from flags and env.
type Config struct {
	// Dest is postgres, clickhouse or b2b:<partner> (kind.Describe).
	// Required.
	Dest string
	// Listen serves /metrics and /healthz. Default
	// bootstrap.SinksListenDefault(Dest): a port per destination.
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
	Log           bootstrap.LogConfig
	ShutdownGrace time.Duration
	// Tracing is read from the standard OTEL_* variables; off by default.
	Tracing bootstrap.TracingConfig
}

// command is the sinks' --help and --version.
var command = bootstrap.Command{
	Name: "sinks",
	Summary: `sinks applies one destination's work items from stream WORK (--dest):
` + kind.Describe() + `, with retries, dead letters, /metrics
and /healthz (docs/sinks.md). Run one process or more per destination.`,
	EnvOnly: append([]bootstrap.EnvVar{{Name: b2b.SecretKeyEnv,
		Usage: "32-byte key (64 hex digits or base64) that decrypts partner secrets, for --dest b2b:<partner>: the key fairway partners add encrypted them with"}},
		bootstrap.TracingEnv...),
	Notes: `Default --listen by destination: postgres ` + bootstrap.SinksPostgresListenDefault + `, clickhouse ` +
		bootstrap.SinksClickHouseListenDefault + `,
b2b:<partner> ` + bootstrap.SinksB2BListenDefault + ` (a free port, logged at start; give each partner's sinks a
--listen to scrape them at a fixed address).
A second replica of one destination on the same host needs a --listen of its own.`,
}

// parseConfig reads the command line and the environment (getenv); --help
// and --version print to out and return bootstrap.ErrHelp or ErrVersion.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	var c Config
	r := &c.Runner
	fs := pflag.NewFlagSet("sinks", pflag.ContinueOnError)
	fs.StringVar(&c.Dest, "dest", "", "destination: "+kind.Describe()+" (required)")
	fs.StringVar(&c.Listen, "listen", "", "HTTP address for /metrics and /healthz (default by --dest, below)")
	c.NATS.RegisterFlags(fs)
	fs.StringVar(&c.DatabaseURL, "database-url", "", "PostgreSQL URL: slot leases, and the catalog for --dest postgres (required)")
	bootstrap.SetEnv(fs, "database-url", "DATABASE_URL")
	fs.StringVar(&c.ClickHouseAddr, "clickhouse-addr", clickhouse.AddrDefault, "ClickHouse native address host:port")
	bootstrap.SetEnv(fs, "clickhouse-addr", "CLICKHOUSE_ADDR")
	fs.StringVar(&c.ClickHouseDatabase, "clickhouse-database", clickhouse.DatabaseDefault, "ClickHouse database")
	bootstrap.SetEnv(fs, "clickhouse-database", "CLICKHOUSE_DATABASE")
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
	fs.DurationVar(&r.Backoff.MaxElapsed, "backoff-max-elapsed", runner.BackoffElapsedDefault, "how long transient failures of one item are retried with backoff; after it the destination counts as down (see --max-hold)")
	fs.DurationVar(&r.MaxHold, "max-hold", runner.MaxHoldDefault, "how long an item failing transiently is held, probed every --backoff-max, once --backoff-max-elapsed is spent, before it is dead-lettered; negative: dead-letter when --backoff-max-elapsed is spent")
	fs.Float64Var(&r.Backoff.Multiplier, "backoff-multiplier", runner.BackoffMultiplierDefault, "growth of the retry delay")
	fs.Float64Var(&r.Backoff.Randomization, "backoff-jitter", runner.BackoffRandomizationDefault, "retry delay jitter factor in [0, 1]")
	fs.IntVar(&r.LatencyTopK, "latency-top-k", status.TopKDefault, fmt.Sprintf("tenants, those with the most events applied in the last minute, that get their own series of fairway_sink_tenant_end_to_end_seconds (the rest: tenant=\"other\"); 1..%d", status.TopKMax))
	c.Log.RegisterFlags(fs, "info")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", runner.ShutdownGraceDefault, "time items inside Apply get to finish on shutdown before they are handed back")
	bootstrap.BindEnv(fs, "FAIRWAY_SINKS_", getenv)
	if err := command.Parse(fs, args, getenv, out); err != nil {
		return c, err
	}
	if c.Dest == "" {
		return c, fmt.Errorf("--dest is required: %s", kind.Describe())
	}
	switch err := kind.Check(c.Dest); {
	case err != nil:
		return c, fmt.Errorf("--dest: %w", err)
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
	if c.Listen == "" {
		c.Listen = bootstrap.SinksListenDefault(c.Dest)
	}
	if n := sinks.Concurrency(c.Dest); n > 0 && !bootstrap.Changed(fs, "concurrency") {
		r.Concurrency = n
	}
	if c.ClickHouseFillWait == 0 {
		c.ClickHouseFillWait = -1 // an explicit 0 means no holding back
	}
	if r.Backoff.Randomization == 0 {
		r.Backoff.Randomization = -1 // an explicit 0 means no jitter
	}
	if r.LatencyTopK < 1 || r.LatencyTopK > status.TopKMax {
		return c, fmt.Errorf("--latency-top-k %d: want 1..%d", r.LatencyTopK, status.TopKMax)
	}
	r.Dest = c.Dest
	r.ShutdownGrace = c.ShutdownGrace
	var err error
	c.Tracing, err = bootstrap.TracingFromEnv(bootstrap.ServiceSinks, getenv)
	return c, err
}

// sinkConfig is what the sink of c.Dest is opened with (sinks.Open).
func (c Config) sinkConfig() sinks.Config {
	return sinks.Config{
		ClickHouse: clickhouse.Config{Addr: c.ClickHouseAddr, Database: c.ClickHouseDatabase, Linger: c.ClickHouseLinger,
			GroupRows: c.ClickHouseGroupRows, FillRows: c.ClickHouseFillRows, FillWait: c.ClickHouseFillWait},
		B2B: b2b.RegistryConfig{SecretKey: c.SecretKey, AllowInsecureHTTP: c.AllowInsecureHTTP},
	}
}

// newLogger returns the logger of the process. It does not carry the
// destination: the runner and the B2B sink add dest= to their lines, and
// run adds it to its own.
func newLogger(c Config, w io.Writer) (*slog.Logger, error) {
	log, err := c.Log.New(w)
	if err != nil {
		return nil, err
	}
	return log.With("service", "sinks"), nil
}
