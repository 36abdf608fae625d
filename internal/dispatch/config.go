package dispatch

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"strconv"
	"time"

	"github.com/fairwayhq/fairway/internal/dispatch/scheduler"
	"github.com/fairwayhq/fairway/internal/sink/kind"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Defaults and bounds for Config.
const (
	BatchSizeDefault       = 500
	BatchSizeMax           = 10_000
	ClickHouseBatchDefault = kind.ClickHouseBatchSize
	ConcurrencyDefault     = 16
	GrantBatchesDefault    = 4
	PollIntervalDefault    = 30 * time.Second
	RecoverIntervalDefault = 5 * time.Second
	PublishTimeoutDefault  = 10 * time.Second
	ShutdownGraceDefault   = 10 * time.Second
	RetryDelayDefault      = time.Second
	ScanParallelismDefault = 16
	BackfillDefault        = 2_000_000
	BodyBudgetDefault      = 128 << 20
	WorkWithoutSinkDefault = 32 << 20
	ReplayRateDefault      = 2_500
	ReplayBatchDefault     = 100
	ReplayLookaheadDefault = 1_000
	HeartbeatDefault       = 2 * time.Second
	// BatchLogRetentionDefault is the stream's default MaxAge, the replay
	// horizon.
	BatchLogRetentionDefault = events.StreamMaxAgeDefault
)

// Config configures a Dispatcher. The zero value plus Dests is valid.
type Config struct {
	// Holder names this process in slot leases and the batch log. Default
	// "<hostname>-<pid>". Every replica needs its own.
	Holder string

	// Dests are the destinations every tenant's events go to: "postgres",
	// "clickhouse" or "b2b:<partner>". Default [postgres, clickhouse].
	// Partners adds per-tenant b2b destinations on top.
	Dests []string

	// BatchSize is the most events one work item covers (the scheduler's
	// MaxBatch), in destinations DestBatchSize does not name. Default 500,
	// at most 10,000.
	BatchSize int

	// DestBatchSize is BatchSize for the destinations it names, on top of
	// the default batch size of each destination's sink kind
	// (kind.Kind.BatchSize; clickhouse: ClickHouseBatchDefault, 5,000,
	// because every ClickHouse INSERT makes a part that the server merges
	// again and again in the background: docs/dispatcher.md, "Batch size
	// per destination"). Name "clickhouse" here to give it another size.
	// Each at most BatchSizeMax.
	DestBatchSize map[string]int

	// Quantum is the credit, in events, a weight-1 tenant earns per
	// deficit-round-robin round. Default: the destination's batch size
	// (BatchSize or DestBatchSize), so a weight-w tenant gets w full
	// batches per round. A Quantum set here applies to every destination.
	Quantum int64

	// GrantBatches is the most batches one grant may dispatch: the events
	// are read in one direct get, the slots taken and the cursor moved in
	// one PostgreSQL statement (tenancy.DispatchMany), and the work items
	// published together, one per batch. A grant holds at most the
	// tenant's credit (Quantum·weight events), except that a tenant alone
	// in the destination may take up to GrantBatches rounds' credit at
	// once (scheduler.Config.LoneRounds): nobody waits for those rounds.
	// 1 dispatches batch by batch. Default 4, at most
	// tenancy.DispatchManyMax.
	GrantBatches int

	// Concurrency is how many grants one destination dispatches at once
	// (for different tenants: one tenant's grants are cut and committed
	// one at a time; a grant's work items are published after it ends and
	// do not count). When a destination has more ready tenants than this,
	// they wait in weighted round-robin order. Default 16: grants in flight at once
	// share their PostgreSQL statements (tenancy, "Grouped statements"),
	// and with 4 the small tenants of the noisy-neighbour benchmark queued
	// behind each other (docs/benchmarks.md).
	Concurrency int

	// Dampening optionally dampens greedy tenants per destination (see
	// scheduler.Dampening). Default none.
	Dampening map[string]*scheduler.Dampening

	// PollInterval is the fallback rescan of every tenant's backlog,
	// cursor, weight and partners, and of the stream's cursors
	// (stream_reset.go). Operators' changes (replays, weights, partners)
	// arrive at once as notifications (tenancy.Listen); the rescan
	// catches what a lost one would miss. Default 30s.
	PollInterval time.Duration

	// RecoverInterval is how often the dispatcher sweeps expired leases and
	// re-dispatches orphaned batches (tenancy.Orphans). A release of a
	// tenant with a waiting orphan also triggers it. Default 5s.
	RecoverInterval time.Duration

	// PublishTimeout bounds handing one work item to WORK, retries
	// included. Default 10s.
	PublishTimeout time.Duration

	// RetryDelay is how long a tenant is set aside after a read or database
	// error, so errors cannot spin the loop. Default 1s.
	RetryDelay time.Duration

	// Heartbeat is how often the dispatcher records that it is alive in
	// fairway.dispatchers and reads which others are. Dispatchers side by
	// side split the stream's partitions (partitions.go; without them, the
	// (tenant, destination) pairs) between them by rendezvous hashing over
	// that list; one whose heartbeat is older than 2 × Heartbeat is taken
	// for gone and what it owned is taken over. Default 2s.
	Heartbeat time.Duration

	// ShutdownGrace is how long batches in flight get to be published after
	// the context ends; what is left is handed back (ReturnBatches).
	// Default 10s.
	ShutdownGrace time.Duration

	// Backfill is the most stream sequences the dispatcher replays at
	// start, headers only, to learn where the existing backlog's events
	// are (from the oldest event still to dispatch), so that the backlog too is
	// cut into batches without reading PRODUCTS. Backlog older than that is
	// read. Negative: no backfill. Default 2,000,000.
	Backfill int64

	// DeepWork turns off the work window (work_window.go), which keeps
	// what waits in WORK for a destination to about what its sinks take
	// at once, so that the order of grants is the order of application.
	// Set, the dispatcher publishes as far as slots allow. Default false.
	DeepWork bool

	// WorkWithoutSink bounds the bytes of work items this dispatcher lets
	// wait in WORK for a destination no sink has consumed yet (its
	// consumer does not exist: a partner registered before its sink
	// started, say); the rest of the destination's backlog waits in
	// PRODUCTS: WORK is shared by every destination, and may be in memory
	// (work.StorageMemory). Negative: no bound. Zero: the default, 32 MiB.
	WorkWithoutSink int64

	// BodyBudget bounds the bytes of event bodies the dispatcher holds
	// between the doorbell delivering them and the grants that dispatch
	// them: their work items carry them (work.Item.Bodies), so the sinks
	// do not read PRODUCTS for them. Events past the budget are indexed
	// without their bodies, and their items are read from PRODUCTS as
	// before. Each event counts its data plus about 160 bytes. Negative:
	// no bodies are held. Default 128 MiB.
	BodyBudget int64

	// ReplayRate is how many events per second a replaying (tenant,
	// destination) is dispatched at, when its replay did not set a rate
	// (tenancy.Rewind.Rate). A replay is dispatched one batch per grant and
	// throttled so that it cannot take the machines from live traffic; the
	// rate is per dispatcher process. Negative: replays are not throttled.
	// Default 2,500: a 1M-event replay then takes about 7 minutes and
	// leaves the other tenants' p99 within a few percent
	// (BenchmarkReplayImpact, docs/benchmarks.md).
	ReplayRate int

	// ReplayBatch is the most events one replayed work item covers (at
	// most BatchSize). Smaller than BatchSize so a throttled replay comes
	// in short steps: a live event that meets one waits for less. Default
	// 100.
	ReplayBatch int

	// ReplayLookahead is the most events a replay feed holds ahead of a
	// replaying pair's cursor (replay_feed.go): it learns the replayed
	// events' sequences and store times from one headers-only consumer of
	// the tenant's subjects, fetching only while it holds fewer, so that
	// replayed items carry store times (the sinks read them without
	// headers) without a million-entry index for a million-event replay.
	// It fetches 2 replay batches at a time (at most half the look-ahead).
	// About 4 bytes an event, plus 64 a run of consecutive sequences.
	// Negative: no feeds; replays are cut by arithmetic or read, and their
	// items carry no times. Default 1,000 (10 replay batches, a fifth of a
	// second at the default rate).
	ReplayLookahead int

	// ScanParallelism is how many backlog probes (one batched direct get
	// each) the startup and poll scans run at once. Default 16.
	ScanParallelism int

	// BatchLogRetention is how long the batch log (fairway.batches: one row
	// per dispatched batch, the audit trail that no range was dispatched
	// twice) keeps a row. The dispatcher deletes older rows at start and
	// about once a minute, the oldest first, at most 100,000 a pass; without
	// that the log grows by a row per work item forever. Negative: keep
	// every row. Default 7 days (BatchLogRetentionDefault, the stream's
	// default MaxAge).
	BatchLogRetention time.Duration

	// Stream is the events stream. Default PRODUCTS.
	Stream string

	// Clock is the time source (dampening, latency). Default time.Now.
	Clock func() time.Time
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c *Config) WithDefaults() *Config {
	if c == nil {
		c = &Config{}
	}
	out := *c
	out.Holder = cmp.Or(c.Holder, defaultHolder())
	if len(c.Dests) == 0 {
		out.Dests = []string{tenancy.DestPostgres, tenancy.DestClickHouse}
	} else {
		out.Dests = append([]string(nil), c.Dests...)
	}
	out.BatchSize = cmp.Or(c.BatchSize, BatchSizeDefault)
	out.DestBatchSize = map[string]int{}
	for _, k := range kind.All() {
		if k.BatchSize > 0 && k.Instance == "" { // a kind with instances has no one destination to name
			out.DestBatchSize[k.Name] = k.BatchSize
		}
	}
	maps.Copy(out.DestBatchSize, c.DestBatchSize)
	out.GrantBatches = cmp.Or(c.GrantBatches, GrantBatchesDefault)
	out.Concurrency = cmp.Or(c.Concurrency, ConcurrencyDefault)
	out.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	out.RecoverInterval = cmp.Or(c.RecoverInterval, RecoverIntervalDefault)
	out.PublishTimeout = cmp.Or(c.PublishTimeout, PublishTimeoutDefault)
	out.RetryDelay = cmp.Or(c.RetryDelay, RetryDelayDefault)
	out.ShutdownGrace = cmp.Or(c.ShutdownGrace, ShutdownGraceDefault)
	out.Heartbeat = cmp.Or(c.Heartbeat, HeartbeatDefault)
	out.ScanParallelism = cmp.Or(c.ScanParallelism, ScanParallelismDefault)
	out.Backfill = cmp.Or(c.Backfill, BackfillDefault)
	out.BodyBudget = cmp.Or(c.BodyBudget, BodyBudgetDefault)
	out.WorkWithoutSink = cmp.Or(c.WorkWithoutSink, WorkWithoutSinkDefault)
	out.ReplayRate = cmp.Or(c.ReplayRate, ReplayRateDefault)
	out.ReplayLookahead = cmp.Or(c.ReplayLookahead, ReplayLookaheadDefault)
	out.ReplayBatch = min(cmp.Or(c.ReplayBatch, ReplayBatchDefault), out.BatchSize)
	out.BatchLogRetention = cmp.Or(c.BatchLogRetention, BatchLogRetentionDefault)
	out.Stream = cmp.Or(c.Stream, events.StreamName)
	if out.Clock == nil {
		out.Clock = time.Now
	}
	return &out
}

func (c *Config) validate() error {
	seen := map[string]bool{}
	for _, d := range c.Dests {
		if err := tenancy.ValidDest(d); err != nil {
			return fmt.Errorf("%w: Dests: %v", ErrInvalidConfig, err)
		}
		if seen[d] {
			return fmt.Errorf("%w: Dests: %q twice", ErrInvalidConfig, d)
		}
		seen[d] = true
	}
	for d, n := range c.DestBatchSize {
		if err := tenancy.ValidDest(d); err != nil {
			return fmt.Errorf("%w: DestBatchSize: %v", ErrInvalidConfig, err)
		}
		if n < 1 || n > BatchSizeMax {
			return fmt.Errorf("%w: DestBatchSize[%s] %d not in [1, %d]", ErrInvalidConfig, d, n, BatchSizeMax)
		}
	}
	for d := range c.Dampening {
		if err := tenancy.ValidDest(d); err != nil {
			return fmt.Errorf("%w: Dampening: %v", ErrInvalidConfig, err)
		}
	}
	switch {
	case c.BatchSize < 1 || c.BatchSize > BatchSizeMax:
		return fmt.Errorf("%w: BatchSize %d not in [1, %d]", ErrInvalidConfig, c.BatchSize, BatchSizeMax)
	case c.GrantBatches < 1 || c.GrantBatches > tenancy.DispatchManyMax:
		return fmt.Errorf("%w: GrantBatches %d not in [1, %d]", ErrInvalidConfig, c.GrantBatches, tenancy.DispatchManyMax)
	case c.Quantum < 0:
		return fmt.Errorf("%w: Quantum %d < 0", ErrInvalidConfig, c.Quantum)
	case c.ReplayBatch < 1:
		return fmt.Errorf("%w: ReplayBatch %d < 1", ErrInvalidConfig, c.ReplayBatch)
	case c.Concurrency < 1:
		return fmt.Errorf("%w: Concurrency %d < 1", ErrInvalidConfig, c.Concurrency)
	case c.PollInterval < 0 || c.RecoverInterval < 0 || c.PublishTimeout < 0 || c.RetryDelay < 0 || c.ShutdownGrace < 0 || c.Heartbeat < 0:
		return fmt.Errorf("%w: negative duration", ErrInvalidConfig)
	case c.ScanParallelism < 1:
		return fmt.Errorf("%w: ScanParallelism %d < 1", ErrInvalidConfig, c.ScanParallelism)
	}
	return nil
}

// batchSize is the most events one work item of dest covers: as
// DestBatchSize names it, else its kind's default, else BatchSize.
func (c *Config) batchSize(dest string) int {
	if n, ok := c.DestBatchSize[dest]; ok {
		return n
	}
	return cmp.Or(kind.BatchSize(dest), c.BatchSize)
}

// quantum is the credit a weight-1 tenant earns per round in dest.
func (c *Config) quantum(dest string) int64 {
	return cmp.Or(c.Quantum, int64(c.batchSize(dest)))
}

func defaultHolder() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "dispatcher"
	}
	return h + "-" + strconv.Itoa(os.Getpid())
}
