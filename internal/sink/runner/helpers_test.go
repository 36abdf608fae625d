package runner_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/runner"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/postgres"
)

// env is one test's world: embedded JetStream with PRODUCTS, WORK and DLQ,
// a fresh PostgreSQL database with the tenancy schema and the catalog.
type env struct {
	t     testing.TB
	nc    *nats.Conn
	js    jetstream.JetStream
	pool  *pgxpool.Pool
	dsn   string
	store *tenancy.Store
	pub   *events.Publisher
	pg    *postgres.Sink
	dlq   *dlq.Queue
	work  jetstream.Stream
	logs  *logBuffer
	log   *slog.Logger
	// timed: dispatched items carry their events' store times, as the
	// dispatcher's items cut from its doorbell do, so the runner reads the
	// events without headers.
	timed bool
	// carried: dispatched items carry their events' bodies, as the
	// dispatcher's items cut from its doorbell do, so the runner reads
	// nothing from PRODUCTS to apply them.
	carried bool
}

func setup(t testing.TB) *env {
	t.Helper()
	_, nc := testenv.NATS(t)
	return setupConn(t, nc)
}

// setupBench is setup with the JetStream server of a benchmark
// (testenv.BenchNATS: in a process of its own, as in production, unless
// FAIRWAY_BENCH_NATS=embedded).
func setupBench(b *testing.B) *env {
	b.Helper()
	url, _, _ := testenv.BenchNATS(b)
	nc, err := nats.Connect(url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	return setupConn(b, nc)
}

func setupConn(t testing.TB, nc *nats.Conn) *env {
	t.Helper()
	ctx := context.Background()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	pool, dsn := testenv.NewPool(t)
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	store, err := tenancy.New(pool, &tenancy.Config{DefaultMaxSlots: 64})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	ws, err := work.EnsureStream(ctx, js, work.StreamConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dlq.EnsureStream(ctx, js, dlq.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	q, err := dlq.Open(ctx, js, "")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := events.NewPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := postgres.New(ctx, &postgres.Config{Pool: pool})
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	return &env{t: t, nc: nc, js: js, pool: pool, dsn: dsn, store: store, pub: pub, pg: pg, dlq: q, work: ws,
		logs: logs, log: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
}

// logBuffer is a concurrency-safe log sink the tests read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

var base = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func upsert(tenant, id string, v int64) events.Event {
	return events.Event{Tenant: tenant, ProductID: id, Version: v, Op: events.OpUpsert, OccurredAt: base,
		Payload: json.RawMessage(fmt.Sprintf(`{"id":%q,"v":%d}`, id, v))}
}

// publish stores evs in PRODUCTS and returns their sequences.
func (e *env) publish(evs ...events.Event) []uint64 {
	e.t.Helper()
	seqs := make([]uint64, len(evs))
	for i, r := range e.pub.Publish(context.Background(), evs) {
		if r.Err != nil {
			e.t.Fatalf("publish %d: %v", i, r.Err)
		}
		seqs[i] = r.Seq
	}
	return seqs
}

// dispatch does what the dispatcher does for tenant: takes a lease on
// cursor..last sequence of PRODUCTS and hands the range to dest as a work
// item with count events.
func (e *env) dispatch(tenant, dest string, count int) work.Item {
	e.t.Helper()
	from, err := e.store.Cursor(context.Background(), tenant, dest)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.dispatchFrom(tenant, dest, from, count, false)
}

// dispatchFrom is dispatch from sequence from on (a replay's rewind: the
// cursor is set there first), flagging the item as a replay when replay is
// set.
func (e *env) dispatchFrom(tenant, dest string, from uint64, count int, replay bool) work.Item {
	e.t.Helper()
	ctx := context.Background()
	if err := e.store.SetCursor(ctx, tenant, dest, from); err != nil {
		e.t.Fatal(err)
	}
	s, err := e.js.Stream(ctx, events.StreamName)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	to := info.State.LastSeq
	l, err := e.store.Dispatch(ctx, tenant, dest, "test", from, to)
	if err != nil {
		e.t.Fatalf("dispatch %s %d..%d: %v", tenant, from, to, err)
	}
	it := work.Item{Tenant: tenant, Dest: dest, FromSeq: from, ToSeq: to, Count: count, LeaseID: l.ID, Token: l.Token,
		DispatchedAt: time.Now(), Replay: replay}
	switch {
	case e.carried:
		it.Bodies = e.bodies(tenant, from, to)
		if len(it.Bodies) != count {
			e.t.Fatalf("dispatch %s %d..%d: PRODUCTS holds %d of the tenant's events, the test says %d", tenant, from, to, len(it.Bodies), count)
		}
		it.FromSeq, it.ToSeq = it.Bodies[0].Seq, it.Bodies[count-1].Seq
	case e.timed:
		it.Times = &work.Times{BaseMs: time.Now().UnixMilli(), OffsetsMs: make([]uint32, count)}
	}
	e.send(it)
	return it
}

// bodies returns tenant's events in PRODUCTS from..to as an item carries
// them: each event's sequence, store time, the op of its subject and its
// data.
func (e *env) bodies(tenant string, from, to uint64) []work.Body {
	e.t.Helper()
	all := work.Item{Tenant: tenant, FromSeq: from, ToSeq: to, Count: int(to - from + 1)}
	stored, err := work.NewReader(e.nc, "").ReadItemHeaders(context.Background(), all)
	if err != nil {
		e.t.Fatal(err)
	}
	out := make([]work.Body, len(stored))
	for i, s := range stored {
		_, op, _, err := events.ParseSubject(s.Subject)
		if err != nil {
			e.t.Fatal(err)
		}
		out[i] = work.Body{Seq: s.Seq, StoredMs: s.Time.UnixMilli(), Op: op, Data: s.Data}
	}
	return out
}

// productsReads counts the requests that read PRODUCTS (direct gets and
// the stream's message gets) made on e's connection from now on, until
// the test ends.
func (e *env) productsReads() *atomic.Int64 {
	e.t.Helper()
	n := &atomic.Int64{}
	for _, subj := range []string{"$JS.API.DIRECT.GET." + events.StreamName, "$JS.API.DIRECT.GET." + events.StreamName + ".>",
		"$JS.API.STREAM.MSG.GET." + events.StreamName} {
		sub, err := e.nc.Subscribe(subj, func(*nats.Msg) { n.Add(1) })
		if err != nil {
			e.t.Fatal(err)
		}
		e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := e.nc.Flush(); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) send(it work.Item) {
	e.t.Helper()
	m, err := it.Msg()
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
		e.t.Fatal(err)
	}
}

// fastConfig has tiny intervals so that retries take milliseconds.
func (e *env) fastConfig() *runner.Config {
	return &runner.Config{
		AckWait:     5 * time.Second,
		FetchWait:   200 * time.Millisecond,
		ExtendEvery: time.Second,
		MaxAttempts: 3,
		Backoff:     runner.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond, MaxElapsed: time.Minute},
		Logger:      e.log,
	}
}

// start runs a runner until the test ends.
func (e *env) start(s sink.Sink, cfg *runner.Config) (*runner.Runner, *prometheus.Registry) {
	e.t.Helper()
	r, reg, stop := e.launch(s, cfg)
	e.t.Cleanup(func() {
		if err := stop(); err != nil {
			e.t.Errorf("Run: %v", err)
		}
	})
	return r, reg
}

// launch runs a runner until stop, which returns what Run returned.
func (e *env) launch(s sink.Sink, cfg *runner.Config) (r *runner.Runner, reg *prometheus.Registry, stop func() error) {
	e.t.Helper()
	reg = prometheus.NewRegistry()
	r, err := runner.New(context.Background(), runner.Deps{JetStream: e.js, Sink: s, Leases: e.store, Registry: reg}, cfg)
	if err != nil {
		e.t.Fatalf("runner.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return r, reg, func() error {
		cancel()
		return <-done
	}
}

// waitMax bounds every wait of these tests for a state of the servers:
// generous, a slow machine is not a failure.
const waitMax = 60 * time.Second

// drained waits until WORK is empty and nothing is pending on consumer.
func (e *env) drained(consumer string) {
	e.t.Helper()
	testenv.Eventually(e.t, waitMax, "WORK drained and acked", func() error {
		ctx := context.Background()
		info, err := e.work.Info(ctx)
		if err != nil {
			return err
		}
		ci, err := e.js.Consumer(ctx, work.StreamName, consumer)
		if err != nil {
			return err
		}
		cinfo, err := ci.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 0 || cinfo.NumAckPending != 0 || cinfo.NumPending != 0 {
			return fmt.Errorf("WORK holds %d, consumer pending %d ack pending %d", info.State.Msgs, cinfo.NumPending, cinfo.NumAckPending)
		}
		return nil
	})
}

func (e *env) version(tenant, id string) int64 {
	e.t.Helper()
	var v int64
	err := e.pool.QueryRow(context.Background(), `SELECT version FROM catalog.products WHERE tenant_id = $1 AND product_id = $2`, tenant, id).Scan(&v)
	if err != nil {
		e.t.Fatalf("version of %s/%s: %v", tenant, id, err)
	}
	return v
}

func (e *env) rows(tenant string) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM catalog.products WHERE tenant_id = $1`, tenant).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) inUse(tenant, dest string) int {
	e.t.Helper()
	n, err := e.store.InUse(context.Background(), tenant, dest)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) letters(f dlq.Filter) []dlq.Letter {
	e.t.Helper()
	ls, err := e.dlq.List(context.Background(), f)
	if err != nil {
		e.t.Fatal(err)
	}
	return ls
}

func counter(t testing.TB, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue metric
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}

// wrapSink wraps a sink with a hook that runs before every Apply and may
// fail it.
type wrapSink struct {
	inner  sink.Sink
	before func(ctx context.Context, call int, batch []sink.Record) error
	calls  atomic.Int64
	events atomic.Int64 // records applied by inner
}

func (w *wrapSink) Name() string { return w.inner.Name() }

func (w *wrapSink) Apply(ctx context.Context, batch []sink.Record) ([]error, error) {
	n := int(w.calls.Add(1))
	if w.before != nil {
		if err := w.before(ctx, n, batch); err != nil {
			return nil, err
		}
	}
	errs, err := w.inner.Apply(ctx, batch)
	if err == nil {
		w.events.Add(int64(len(batch)))
	}
	return errs, err
}

var errMystery = errors.New("mystery failure")

// runnerBackoffSlow makes a retry wait far longer than any test.
var runnerBackoffSlow = runner.Backoff{Initial: time.Hour, Max: time.Hour, MaxElapsed: 2 * time.Hour}
