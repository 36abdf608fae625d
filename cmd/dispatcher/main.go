// Command dispatcher moves each tenant's product events from stream
// PRODUCTS to stream WORK, fairly across tenants and inside their slot
// limits. Run several for availability: they share PostgreSQL and
// JetStream and need no leader, but they race for the same tenants: on
// the 2-core development machine a second one slowed dispatch down
// (docs/dispatcher.md, Known limits). See internal/dispatch and
// docs/dispatcher.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/fairwayhq/fairway/internal/bootstrap"
	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/dispatch/scheduler"
	"github.com/fairwayhq/fairway/internal/status"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

func main() {
	cfg, err := parseConfig(os.Args[1:], os.Getenv, os.Stdout)
	switch {
	case errors.Is(err, bootstrap.ErrHelp), errors.Is(err, bootstrap.ErrVersion):
		os.Exit(0)
	case err != nil:
		fmt.Fprintln(os.Stderr, "dispatcher:", err)
		os.Exit(2)
	}
	log, err := cfg.Log.New(os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dispatcher:", err)
		os.Exit(2)
	}
	cfg.Logger = log
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		log.Error("dispatcher stopped", "err", err)
		os.Exit(1)
	}
}

// command is the dispatcher's --help and --version.
var command = bootstrap.Command{
	Name: "dispatcher",
	Summary: `dispatcher moves each tenant's product events from stream PRODUCTS to
stream WORK, fairly across tenants and inside their slot limits
(docs/dispatcher.md). Replicas share PostgreSQL and JetStream and split the
tenants between them; two on one host need a --listen each.`,
	EnvOnly: bootstrap.TracingEnv,
}

// parseConfig reads the command line and the environment (getenv); --help
// and --version print to out and return bootstrap.ErrHelp or ErrVersion.
func parseConfig(args []string, getenv func(string) string, out io.Writer) (Config, error) {
	var (
		c     Config
		dests string
	)
	fs := pflag.NewFlagSet("dispatcher", pflag.ContinueOnError)
	fs.StringVar(&c.Listen, "listen", bootstrap.DispatcherListenDefault, "HTTP address for /metrics and /healthz")
	c.NATS.RegisterFlags(fs)
	fs.StringVar(&c.DatabaseURL, "database-url", "", "PostgreSQL URL (required)")
	bootstrap.SetEnv(fs, "database-url", "DATABASE_URL")
	fs.StringVar(&dests, "dest", "postgres,clickhouse", "comma-separated destinations: postgres, clickhouse, b2b:<partner>")
	fs.StringVar(&c.Dispatch.Holder, "holder", "", "name of this replica in leases and the batch log (default <hostname>-<pid>)")
	fs.IntVar(&c.Dispatch.BatchSize, "batch-size", dispatch.BatchSizeDefault, "most events per work item")
	fs.Func("dest-batch-size", fmt.Sprintf("`dest=N`: most events per work item of one destination instead of --batch-size; repeat per destination or separate with commas (default clickhouse=%d: ClickHouse wants few big inserts)", dispatch.ClickHouseBatchDefault), eachOf(func(v string) error {
		dest, n, ok := strings.Cut(v, "=")
		size, err := strconv.Atoi(n)
		if !ok || err != nil || dest == "" {
			return fmt.Errorf("%q: want dest=N, e.g. clickhouse=5000", v)
		}
		if c.Dispatch.DestBatchSize == nil {
			c.Dispatch.DestBatchSize = map[string]int{}
		}
		if _, dup := c.Dispatch.DestBatchSize[dest]; dup {
			return fmt.Errorf("%s: given twice", dest)
		}
		c.Dispatch.DestBatchSize[dest] = size
		return nil
	}))
	fs.Int64Var(&c.Dispatch.Quantum, "quantum", 0, "events a weight-1 tenant earns per round (default: the destination's batch size)")
	fs.Int64Var(&c.Dispatch.Backfill, "backfill", dispatch.BackfillDefault, "most stream sequences replayed at start to index the existing backlog; negative: none")
	c.MemoryLimit = MemoryLimitDefault
	fs.Var(&c.MemoryLimit, "memory-limit", "soft limit of the process's memory for Go's garbage collector (as GOMEMLIMIT, which wins when set and this flag is not given); the index of waiting events takes about 30 bytes an event per destination beside --body-budget; under a limit the collector runs at GOGC=200 unless GOGC is set; 0: Go's default")
	fs.Int64Var(&c.Dispatch.BodyBudget, "body-budget", dispatch.BodyBudgetDefault, "bytes of event bodies held for work items to carry to the sinks (which then do not read PRODUCTS for them); negative: none")
	fs.IntVar(&c.Dispatch.GrantBatches, "grant-batches", dispatch.GrantBatchesDefault, "most batches one grant dispatches in one read, one SQL statement and one publish round")
	fs.IntVar(&c.Dispatch.ReplayRate, "replay-rate", dispatch.ReplayRateDefault, "events per second a replaying tenant is dispatched at per destination, unless its replay set a rate (fairway replay --rate); negative: unthrottled")
	fs.IntVar(&c.Dispatch.ReplayBatch, "replay-batch", dispatch.ReplayBatchDefault, "most events per replayed work item (at most --batch-size)")
	fs.IntVar(&c.Dispatch.ReplayLookahead, "replay-lookahead", dispatch.ReplayLookaheadDefault, "most events a replay feed (one headers-only consumer per replaying tenant and destination) holds ahead of the cursor, so replayed items carry store times; negative: no feeds")
	fs.IntVar(&c.Dispatch.Concurrency, "concurrency", dispatch.ConcurrencyDefault, "grants dispatched at once per destination")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", tenancy.LeaseTTLDefault, "slot lease time; an unextended batch lease is re-dispatched after it")
	fs.DurationVar(&c.Dispatch.PollInterval, "poll-interval", dispatch.PollIntervalDefault, "fallback backlog rescan interval")
	fs.DurationVar(&c.Dispatch.RecoverInterval, "recover-interval", dispatch.RecoverIntervalDefault, "orphaned-batch recovery interval")
	fs.IntVar(&c.WorkReplicas, "replicas", 1, "replicas of the WORK stream, which the dispatcher creates (3 in a cluster)")
	fs.Int64Var(&c.Dispatch.WorkWithoutSink, "work-without-sink", dispatch.WorkWithoutSinkDefault, "bytes of work items that may wait in WORK for a destination whose sinks have never run (a partner registered before its sink started); the rest of its backlog waits in PRODUCTS; negative: no bound; 0: the default")
	fs.StringVar(&c.WorkStorage, "work-storage", work.StorageFile, "storage of the WORK stream when the dispatcher creates it: file (work items survive a server's restart) or memory (the server does not write the carried bodies to disk a second time; an item lost with a server's memory is dispatched again once its lease expires)")
	c.Log.RegisterFlags(fs, "info")
	fs.IntVar(&c.TenantMetrics.TopK, "tenant-metrics-top", status.TopKDefault, "per destination, tenants with the most backlog that get their own metric series (the rest: tenant=\"other\"); 0 turns backlog metrics off")
	fs.DurationVar(&c.TenantMetrics.Interval, "tenant-metrics-interval", status.IntervalDefault, "how often backlog metrics are sampled (one direct get per tenant and destination)")
	fs.Func("dampen", "dampen greedy tenants of a destination, `dest:events/window[/factor]` (e.g. postgres:100000/1m/4: a tenant dispatched more than 100,000 events in the last minute gets a quarter of its weight; factor default 2); repeat per destination or separate with commas", eachOf(func(v string) error {
		dest, rule, err := parseDampening(v)
		if err != nil {
			return err
		}
		if c.Dispatch.Dampening == nil {
			c.Dispatch.Dampening = map[string]*scheduler.Dampening{}
		}
		if c.Dispatch.Dampening[dest] != nil {
			return fmt.Errorf("%s: given twice", dest)
		}
		c.Dispatch.Dampening[dest] = rule
		return nil
	}))
	fs.DurationVar(&c.Dispatch.ShutdownGrace, "shutdown-grace", dispatch.ShutdownGraceDefault, "time in-flight batches get to be published on shutdown")
	fs.DurationVar(&c.Dispatch.BatchLogRetention, "batch-log-retention", dispatch.BatchLogRetentionDefault, "how long the batch log (fairway.batches, a row per dispatched batch) keeps a row; negative keeps every row")
	fs.DurationVar(&c.Dispatch.Heartbeat, "heartbeat", dispatch.HeartbeatDefault, "how often this replica records it is alive; replicas split the stream's partitions between them and take over those of one whose heartbeat is 2 intervals old")
	bootstrap.BindEnv(fs, "FAIRWAY_DISPATCHER_", getenv)
	if err := command.Parse(fs, args, getenv, out); err != nil {
		return c, err
	}
	if c.DatabaseURL == "" {
		return c, fmt.Errorf("DATABASE_URL (or --database-url) is required")
	}
	if getenv("GOMEMLIMIT") != "" && !fs.Changed("memory-limit") {
		c.MemoryLimit = 0 // the runtime applied GOMEMLIMIT
	}
	if _, err := work.StorageType(c.WorkStorage); err != nil {
		return c, fmt.Errorf("--work-storage: %w", err)
	}
	if c.TenantMetrics.TopK < 0 {
		return c, fmt.Errorf("--tenant-metrics-top %d: want 0 (off) or more", c.TenantMetrics.TopK)
	}
	for _, d := range strings.Split(dests, ",") {
		if d = strings.TrimSpace(d); d != "" {
			c.Dispatch.Dests = append(c.Dispatch.Dests, d)
		}
	}
	var err error
	c.Tracing, err = bootstrap.TracingFromEnv(bootstrap.ServiceDispatcher, getenv)
	return c, err
}

// eachOf returns a flag function that calls set for each comma-separated
// part of its value, so a repeatable flag's environment variable holds
// several values.
func eachOf(set func(string) error) func(string) error {
	return func(v string) error {
		for _, part := range strings.Split(v, ",") {
			if err := set(strings.TrimSpace(part)); err != nil {
				return err
			}
		}
		return nil
	}
}

// parseDampening reads a --dampen value, dest:events/window[/factor].
func parseDampening(v string) (string, *scheduler.Dampening, error) {
	bad := func(why string) (string, *scheduler.Dampening, error) {
		return "", nil, fmt.Errorf("%q: %s; want dest:events/window[/factor], e.g. postgres:100000/1m/4", v, why)
	}
	i := strings.LastIndex(v, ":")
	if i < 0 {
		return bad("no destination")
	}
	dest, parts := v[:i], strings.Split(v[i+1:], "/")
	if err := tenancy.ValidDest(dest); err != nil {
		return bad(err.Error())
	}
	if len(parts) < 2 || len(parts) > 3 {
		return bad("want events/window or events/window/factor")
	}
	n, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || n < 1 {
		return bad("events must be a positive number")
	}
	w, err := time.ParseDuration(parts[1])
	if err != nil || w < scheduler.DampeningWindowMin {
		return bad(fmt.Sprintf("window must be a duration of at least %v", scheduler.DampeningWindowMin))
	}
	rule := &scheduler.Dampening{Threshold: n, Window: w}
	if len(parts) == 3 {
		f, err := strconv.ParseFloat(parts[2], 64)
		if err != nil || f < 1 {
			return bad("factor must be a number of at least 1")
		}
		rule.Factor = f
	}
	return dest, rule, nil
}
