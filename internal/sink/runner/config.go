package runner

import (
	"cmp"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/status"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
)

// Defaults and bounds for Config.
const (
	ConcurrencyDefault          = 4
	FetchWaitDefault            = 5 * time.Second
	AckWaitDefault              = 30 * time.Second
	AckWaitMin                  = 100 * time.Millisecond
	MaxDeliverDefault           = 10
	MaxAckPendingDefault        = 1000
	ExtendEveryDefault          = 10 * time.Second // a third of tenancy.LeaseTTLDefault
	MaxAttemptsDefault          = 5
	RetryAfterMaxDefault        = 5 * time.Minute
	ShutdownGraceDefault        = 30 * time.Second
	BackoffInitialDefault       = 500 * time.Millisecond
	BackoffMaxDefault           = 30 * time.Second
	BackoffElapsedDefault       = 10 * time.Minute
	MaxHoldDefault              = 72 * time.Hour
	BackoffMultiplierDefault    = 2.0
	BackoffRandomizationDefault = 0.5
)

// Backoff configures the retry delays (cenkalti/backoff/v4
// ExponentialBackOff). The n-th delay is Initial·Multiplier^(n-1), capped at
// Max, randomized by ±Randomization; retries stop after MaxElapsed since
// the first failure.
type Backoff struct {
	// Initial is the first delay. Default 500ms.
	Initial time.Duration
	// Max caps one delay. Default 30s.
	Max time.Duration
	// MaxElapsed is how long transient failures of one work item are
	// retried before its failing records are dead-lettered. Default 10m.
	MaxElapsed time.Duration
	// Multiplier grows the delay. Default 2.
	Multiplier float64
	// Randomization is the jitter factor in [0, 1]. Default 0.5; a
	// negative value means none.
	Randomization float64
}

// Config configures a Runner. Zero fields take their defaults.
type Config struct {
	// Dest is the destination ("postgres", "clickhouse", "b2b:<partner>").
	// Default: the sink's Name().
	Dest string
	// Consumer is the durable consumer on WORK shared by every process of
	// this destination. Default "sink-<dest>" with ':' replaced by '-'.
	Consumer string
	// WorkStream, ProductsStream and DLQStream name the streams. Defaults
	// work.StreamName, events.StreamName, dlq.StreamName.
	WorkStream     string
	ProductsStream string
	DLQStream      string
	// Concurrency is how many work items this process applies at once
	// (Apply calls in flight). Default 4.
	Concurrency int
	// ReadAhead is how many further work items this process fetches and
	// reads while its applies are busy, so that the next item's events are
	// in memory when an apply finishes; an item also finishes (dead
	// letters, release, ack) without holding an apply. Items read ahead
	// are kept alive like applying ones (InProgress, lease extension).
	// Default Concurrency; negative means none.
	ReadAhead int
	// FetchBatch bounds one fetch; a fetch never asks for more items than
	// there is room for (Concurrency + ReadAhead held in all). Default
	// Concurrency.
	FetchBatch int
	// FetchWait is how long one fetch waits for items. Default 5s.
	FetchWait time.Duration
	// AckWait is how long JetStream waits for an ack (or InProgress) before
	// redelivering an item. Default 30s, minimum 100ms.
	AckWait time.Duration
	// MaxDeliver is how often JetStream delivers an item. The last delivery
	// is dead-lettered instead of applied. Default 10, minimum 2.
	MaxDeliver int
	// MaxAckPending bounds the items out at once across all processes.
	// Default 1000.
	MaxAckPending int
	// InProgressEvery is how often a working item is reported in progress.
	// Default AckWait/3.
	InProgressEvery time.Duration
	// ExtendEvery is how often a working item's slot lease is extended; keep
	// it well below the lease TTL. It also bounds the retries of a failing
	// release. Default 10s.
	ExtendEvery time.Duration
	// MaxAttempts bounds the attempts of records failing with unknown
	// errors. Default 5.
	MaxAttempts int
	// Backoff shapes retry delays.
	Backoff Backoff
	// MaxHold is how long a batch failing transiently is held once its
	// retry budget (Backoff.MaxElapsed) is spent: the destination is taken
	// to be down, the batch keeps its slot, and it is probed every
	// Backoff.Max until it applies; only then, or for permanent failures,
	// does it dead-letter. Negative: dead-letter when the budget is spent.
	// Default MaxHoldDefault (72h).
	MaxHold time.Duration
	// RetryAfterMax caps a destination's Retry-After. Default 5m.
	RetryAfterMax time.Duration
	// ShutdownGrace is how long items inside Apply may finish after Run's
	// context ends. Default 30s.
	ShutdownGrace time.Duration
	// LatencyTopK is how many tenants, those with the most events applied
	// in the last minute, get a series of their own in
	// fairway_sink_tenant_end_to_end_seconds; the rest share
	// tenant="other" (tenant_latency.go). Default status.TopKDefault
	// (20), at most status.TopKMax.
	LatencyTopK int
	// Logger receives one line per decision (dead letter, stale lease,
	// terminated item). Default: discard.
	Logger *slog.Logger
	// Now is the clock for failure times, latencies and the backoff's
	// elapsed time. Default time.Now.
	Now func() time.Time
}

// WithDefaults returns a copy of c with defaults filled in; dest is the
// sink's name.
func (c *Config) WithDefaults(dest string) *Config {
	if c == nil {
		c = &Config{}
	}
	out := *c
	out.Dest = cmp.Or(out.Dest, dest)
	out.Consumer = cmp.Or(out.Consumer, work.ConsumerName(out.Dest))
	out.WorkStream = cmp.Or(out.WorkStream, work.StreamName)
	out.ProductsStream = cmp.Or(out.ProductsStream, events.StreamName)
	out.DLQStream = cmp.Or(out.DLQStream, dlq.StreamName)
	out.Concurrency = cmp.Or(out.Concurrency, ConcurrencyDefault)
	out.ReadAhead = cmp.Or(out.ReadAhead, out.Concurrency)
	if out.ReadAhead < 0 {
		out.ReadAhead = 0
	}
	out.FetchBatch = cmp.Or(out.FetchBatch, out.Concurrency)
	out.FetchWait = cmp.Or(out.FetchWait, FetchWaitDefault)
	out.AckWait = cmp.Or(out.AckWait, AckWaitDefault)
	out.MaxDeliver = cmp.Or(out.MaxDeliver, MaxDeliverDefault)
	out.MaxAckPending = cmp.Or(out.MaxAckPending, MaxAckPendingDefault)
	out.InProgressEvery = cmp.Or(out.InProgressEvery, out.AckWait/3)
	out.ExtendEvery = cmp.Or(out.ExtendEvery, ExtendEveryDefault)
	out.MaxAttempts = cmp.Or(out.MaxAttempts, MaxAttemptsDefault)
	out.MaxHold = cmp.Or(out.MaxHold, MaxHoldDefault)
	out.Backoff.Initial = cmp.Or(out.Backoff.Initial, BackoffInitialDefault)
	out.Backoff.Max = cmp.Or(out.Backoff.Max, BackoffMaxDefault)
	out.Backoff.MaxElapsed = cmp.Or(out.Backoff.MaxElapsed, BackoffElapsedDefault)
	out.Backoff.Multiplier = cmp.Or(out.Backoff.Multiplier, BackoffMultiplierDefault)
	out.Backoff.Randomization = cmp.Or(out.Backoff.Randomization, BackoffRandomizationDefault)
	if out.Backoff.Randomization < 0 {
		out.Backoff.Randomization = 0
	}
	out.RetryAfterMax = cmp.Or(out.RetryAfterMax, RetryAfterMaxDefault)
	out.ShutdownGrace = cmp.Or(out.ShutdownGrace, ShutdownGraceDefault)
	out.LatencyTopK = cmp.Or(out.LatencyTopK, status.TopKDefault)
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	return &out
}

func (c *Config) validate() error {
	var errs []string
	if err := validDest(c.Dest); err != nil {
		errs = append(errs, err.Error())
	}
	if strings.ContainsAny(c.Consumer, ".*> \t\r\n/\\") {
		errs = append(errs, fmt.Sprintf("Consumer %q must not contain '.', '*', '>', '/', '\\' or whitespace", c.Consumer))
	}
	if c.Concurrency < 1 || c.FetchBatch < 1 || c.MaxAttempts < 1 || c.MaxAckPending < 1 {
		errs = append(errs, "Concurrency, FetchBatch, MaxAttempts and MaxAckPending must be ≥ 1")
	}
	if c.AckWait < AckWaitMin {
		errs = append(errs, fmt.Sprintf("AckWait %s below %s", c.AckWait, AckWaitMin))
	}
	if c.MaxDeliver < 2 {
		errs = append(errs, fmt.Sprintf("MaxDeliver %d: want ≥ 2 (unlimited redelivery is not allowed)", c.MaxDeliver))
	}
	if c.InProgressEvery <= 0 || c.InProgressEvery >= c.AckWait {
		errs = append(errs, fmt.Sprintf("InProgressEvery %s must be in (0, AckWait %s)", c.InProgressEvery, c.AckWait))
	}
	if c.FetchWait < 10*time.Millisecond || c.ExtendEvery <= 0 || c.ShutdownGrace <= 0 || c.RetryAfterMax <= 0 {
		errs = append(errs, "FetchWait (≥ 10ms), ExtendEvery, ShutdownGrace and RetryAfterMax must be positive")
	}
	if c.LatencyTopK < 1 || c.LatencyTopK > status.TopKMax {
		errs = append(errs, fmt.Sprintf("LatencyTopK %d: want 1..%d", c.LatencyTopK, status.TopKMax))
	}
	b := c.Backoff
	if b.Initial <= 0 || b.Max < b.Initial || b.MaxElapsed <= 0 || b.Multiplier < 1 || b.Randomization > 1 {
		errs = append(errs, fmt.Sprintf("Backoff %+v: want 0 < Initial ≤ Max, MaxElapsed > 0, Multiplier ≥ 1, Randomization ≤ 1", b))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrConfig, strings.Join(errs, "; "))
	}
	return nil
}

// validDest checks dest with the work item rules.
func validDest(dest string) error {
	it := work.Item{Tenant: "x", Dest: dest, FromSeq: 1, ToSeq: 1, Count: 1, LeaseID: "x"}
	if err := it.Validate(); err != nil {
		return fmt.Errorf("destination: %w", err)
	}
	return nil
}

// clock adapts Config.Now to backoff.Clock.
type clock func() time.Time

func (c clock) Now() time.Time { return c() }

func (c *Config) newBackOff() *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(c.Backoff.Initial),
		backoff.WithMaxInterval(c.Backoff.Max),
		backoff.WithMaxElapsedTime(c.Backoff.MaxElapsed),
		backoff.WithMultiplier(c.Backoff.Multiplier),
		backoff.WithRandomizationFactor(c.Backoff.Randomization),
		backoff.WithClockProvider(clock(c.Now)),
	)
}
