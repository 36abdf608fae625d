package runner_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/runner"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/postgres"
)

const (
	childEnv     = "FAIRWAY_RUNNER_TEST_CHILD"
	childApplied = "test.child.applied"
	killAckWait  = time.Second
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// childMain runs a runner whose sink applies the batch for real, says so on
// childApplied, and then blocks inside Apply until the process is killed.
func childMain() int {
	ctx := context.Background()
	nc, err := nats.Connect(os.Getenv("NATS_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	js, _ := jetstream.New(nc)
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	store, _ := tenancy.New(pool, nil)
	pg, err := postgres.New(ctx, &postgres.Config{Pool: pool})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	w := &wrapSink{inner: blockAfter{pg, nc}}
	r, err := runner.New(ctx, runner.Deps{JetStream: js, Sink: w, Leases: store, Registry: prometheus.NewRegistry()},
		&runner.Config{AckWait: killAckWait, FetchWait: 200 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = r.Run(ctx)
	return 0
}

// blockAfter applies, reports, and never returns.
type blockAfter struct {
	inner sink.Sink
	nc    *nats.Conn
}

func (b blockAfter) Name() string { return b.inner.Name() }

func (b blockAfter) Apply(ctx context.Context, batch []sink.Record) ([]error, error) {
	if _, err := b.inner.Apply(ctx, batch); err != nil {
		return nil, err
	}
	_ = b.nc.Publish(childApplied, nil)
	_ = b.nc.Flush()
	select {}
}

// kill -9 of a sink process inside Apply (after its writes committed, before
// release and ack): the item is redelivered after AckWait and applied
// again, which changes nothing — each product once, at its newest version.
func TestKill9MidBatchRedelivered(t *testing.T) {
	t.Parallel()
	e := setup(t)
	applied, err := e.nc.SubscribeSync(childApplied)
	if err != nil {
		t.Fatal(err)
	}
	var evs []events.Event
	for i := range 20 {
		evs = append(evs, upsert("acme", fmt.Sprintf("p%02d", i%10), int64(1+i/10)))
	}
	e.publish(evs...)
	it := e.dispatch("acme", "postgres", len(evs))

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"=1", "NATS_URL="+e.nc.ConnectedUrl(), "DATABASE_URL="+e.dsn)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := applied.NextMsg(60 * time.Second); err != nil {
		_ = child.Process.Kill()
		t.Fatalf("child never reached Apply: %v", err)
	}
	if err := child.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = child.Wait()
	if e.inUse("acme", "postgres") != 1 {
		t.Fatal("the killed process must not have released the lease")
	}

	var mu sync.Mutex
	var deliveries []int
	w := &wrapSink{inner: e.pg, before: func(ctx context.Context, _ int, b []sink.Record) error {
		mu.Lock()
		deliveries = append(deliveries, len(b))
		mu.Unlock()
		return nil
	}}
	cfg := e.fastConfig()
	cfg.AckWait = killAckWait
	r, _ := e.start(w, cfg)
	e.drained(r.Config().Consumer)
	mu.Lock()
	defer mu.Unlock()
	if len(deliveries) != 1 || deliveries[0] != len(evs) {
		t.Fatalf("the survivor applied %v, want the whole item once", deliveries)
	}
	if n := e.rows("acme"); n != 10 {
		t.Fatalf("%d rows, want 10", n)
	}
	for i := range 10 {
		if v := e.version("acme", fmt.Sprintf("p%02d", i)); v != 2 {
			t.Errorf("p%02d at version %d, want 2", i, v)
		}
	}
	if e.inUse("acme", "postgres") != 0 {
		t.Errorf("lease %s not released after redelivery", it.LeaseID)
	}
}

// Two runners share the consumer: every item is applied exactly once.
func TestTwoReplicasShareConsumer(t *testing.T) {
	t.Parallel()
	e := setup(t)
	a := &wrapSink{inner: e.pg}
	b := &wrapSink{inner: e.pg}
	cfg := e.fastConfig()
	ra, _ := e.start(a, cfg)
	e.start(b, cfg)
	const tenants, perTenant = 12, 25
	for i := range tenants {
		tenant := fmt.Sprintf("t%02d", i)
		var evs []events.Event
		for j := range perTenant {
			evs = append(evs, upsert(tenant, fmt.Sprintf("p%d", j), 1))
		}
		e.publish(evs...)
		e.dispatch(tenant, "postgres", perTenant)
	}
	e.drained(ra.Config().Consumer)
	if got := a.events.Load() + b.events.Load(); got != tenants*perTenant {
		t.Fatalf("replicas applied %d + %d events, want %d in total (each item once)", a.events.Load(), b.events.Load(), tenants*perTenant)
	}
	if a.calls.Load()+b.calls.Load() != tenants {
		t.Fatalf("Apply called %d + %d times, want %d", a.calls.Load(), b.calls.Load(), tenants)
	}
	for i := range tenants {
		tenant := fmt.Sprintf("t%02d", i)
		if e.rows(tenant) != perTenant || e.inUse(tenant, "postgres") != 0 {
			t.Errorf("%s: %d rows, %d in use", tenant, e.rows(tenant), e.inUse(tenant, "postgres"))
		}
	}
	t.Logf("replica a applied %d items, b %d", a.calls.Load(), b.calls.Load())
}
