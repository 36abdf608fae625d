package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Leases is the part of tenancy.Store the runner uses.
type Leases interface {
	Extend(ctx context.Context, l tenancy.Lease) (tenancy.Lease, error)
	Release(ctx context.Context, leaseID string, token int64) error
	SetLeaseWait(ctx context.Context, leaseID string, token int64, kind, detail string) error
}

var _ Leases = (*tenancy.Store)(nil)

// Deps are the runner's collaborators.
type Deps struct {
	// JetStream reaches WORK, PRODUCTS and DLQ. Required.
	JetStream jetstream.JetStream
	// Sink applies the batches. Required.
	Sink sink.Sink
	// Leases extends and releases slot leases. Required.
	Leases Leases
	// Registry receives the metrics. Required.
	Registry prometheus.Registerer
	// Tracer, when set, traces every work item's apply (tracing.go;
	// bootstrap.StartTracing). Default nil: tracing off.
	Tracer trace.Tracer
}

// Runner consumes one destination's work items. Create it with New, run it
// with Run.
type Runner struct {
	cfg    *Config
	js     jetstream.JetStream
	sink   sink.Sink
	leases Leases
	reader *work.Reader
	dlq    *dlq.Queue
	cons   jetstream.Consumer
	// applying holds a token per Apply in flight (Concurrency).
	applying chan struct{}
	m        *metrics
	latency  *tenantLatency
	tracer   trace.Tracer // nil: tracing off
	log      *slog.Logger
}

// New validates cfg and creates (or updates) the destination's durable
// consumer on WORK. The WORK and DLQ streams must exist (work.EnsureStream,
// dlq.EnsureStream).
func New(ctx context.Context, d Deps, cfg *Config) (*Runner, error) {
	if d.JetStream == nil || d.Sink == nil || d.Leases == nil || d.Registry == nil {
		return nil, fmt.Errorf("%w: JetStream, Sink, Leases and Registry are required", ErrConfig)
	}
	c := cfg.WithDefaults(d.Sink.Name())
	if err := c.validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(d.Registry, c.Dest)
	if err != nil {
		return nil, fmt.Errorf("sink runner: metrics: %w", err)
	}
	q, err := dlq.Open(ctx, d.JetStream, c.DLQStream)
	if err != nil {
		return nil, err
	}
	cons, err := EnsureConsumer(ctx, d.JetStream, c)
	if err != nil {
		return nil, err
	}
	return &Runner{
		cfg: c, js: d.JetStream, sink: d.Sink, leases: d.Leases,
		reader: work.NewReader(d.JetStream.Conn(), c.ProductsStream),
		dlq:    q, cons: cons, m: m, applying: make(chan struct{}, c.Concurrency),
		latency: newTenantLatency(m.tenantEndToEnd, c.Dest, c.LatencyTopK, c.Now),
		tracer:  d.Tracer,
		log:     c.Logger.With("dest", c.Dest),
	}, nil
}

// EnsureConsumer creates or updates the durable pull consumer of c.Dest on
// WORK. c must have its defaults.
func EnsureConsumer(ctx context.Context, js jetstream.JetStream, c *Config) (jetstream.Consumer, error) {
	cons, err := js.CreateOrUpdateConsumer(ctx, c.WorkStream, jetstream.ConsumerConfig{
		Durable:       c.Consumer,
		Description:   "fairway sink " + c.Dest,
		FilterSubject: work.FilterSubject(c.Dest),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    c.MaxDeliver,
		MaxAckPending: c.MaxAckPending,
	})
	if err != nil {
		return nil, fmt.Errorf("sink runner: consumer %s on %s: %w", c.Consumer, c.WorkStream, err)
	}
	return cons, nil
}

// Run fetches and applies work items until ctx ends, then shuts down in two
// phases (see the package doc) and returns nil. It returns early only if the
// consumer cannot be used at all.
func (r *Runner) Run(ctx context.Context) error {
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	free := make(chan struct{}, r.cfg.Concurrency+r.cfg.ReadAhead) // a token per item held
	var wg sync.WaitGroup
	r.log.Info("sink runner started", "consumer", r.cfg.Consumer, "concurrency", r.cfg.Concurrency, "read_ahead", r.cfg.ReadAhead)
	pause := r.cfg.newBackOff()
	pause.MaxElapsedTime = 0
	for {
		// Wait for one free worker, then take every other free one up to
		// FetchBatch: a fetch never asks for an item nobody can start.
		select {
		case free <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		n := 1
		for n < r.cfg.FetchBatch {
			select {
			case free <- struct{}{}:
				n++
				continue
			default:
			}
			break
		}
		got, err := r.fetch(ctx, hard, n, free, &wg)
		for range n - got {
			<-free
		}
		if err != nil {
			r.log.Warn("fetch work items", "err", err)
			// A consumer created again has items waiting as soon as WORK
			// has them: the next fetch comes after the first delay, not
			// after the one the failures while it was gone grew to (up
			// to Backoff.Max).
			if consumerGone(err) && r.ensureConsumer(ctx) {
				pause.Reset()
			}
			select {
			case <-time.After(pause.NextBackOff()):
			case <-ctx.Done():
			}
			continue
		}
		pause.Reset()
	}
	// Phase two: in-flight items finish or are handed back.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(r.cfg.ShutdownGrace):
		r.log.Warn("shutdown grace over; cancelling items in flight", "grace", r.cfg.ShutdownGrace)
		cancelHard()
		<-done
	}
	r.log.Info("sink runner stopped")
	return nil
}

// fetch asks for up to n items and starts a worker for each; it returns how
// many it started. Every started worker gives its token back to free.
//
// The fetch is bounded by FetchMaxWait, not by a context: with a context the
// client stops listening when it ends, and an item the server sent just
// before its own expiry is then delivered to nobody and waits out AckWait.
// FetchMaxWait listens until the server's
// end-of-request status. Shutdown therefore waits for at most one
// FetchWait; items arriving after ctx ended are handed back by handle.
func (r *Runner) fetch(ctx, hard context.Context, n int, free chan struct{}, wg *sync.WaitGroup) (int, error) {
	batch, err := r.cons.Fetch(n, jetstream.FetchMaxWait(r.cfg.FetchWait))
	if err != nil {
		return 0, err
	}
	got := 0
	for msg := range batch.Messages() {
		got++
		wg.Go(func() {
			defer func() { <-free }()
			r.handle(ctx, hard, msg)
		})
	}
	if err := batch.Error(); err != nil && ctx.Err() == nil &&
		!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats408) {
		return got, err
	}
	return got, nil
}

// consumerGone says whether a fetch failed because the destination's
// consumer is not on the server: deleted, or WORK itself gone with a
// server replaced by one with an empty store.
func consumerGone(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
		errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, nats.ErrNoResponders)
}

// ensureConsumer creates the destination's consumer again and says
// whether it did. While WORK is missing (its owner, the dispatcher,
// creates it) that fails, and the next failed fetch tries again.
func (r *Runner) ensureConsumer(ctx context.Context) bool {
	cons, err := EnsureConsumer(ctx, r.js, r.cfg)
	if err != nil {
		r.log.Warn("creating the work consumer again failed; retrying", "err", err)
		return false
	}
	r.cons = cons
	r.log.Info("work consumer created again", "consumer", r.cfg.Consumer)
	return true
}

// nats408 is the request-expired status a fetch ends with when no item came.
var nats408 = jetstream.ErrNoMessages
