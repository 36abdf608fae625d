package dispatch_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// run starts a dispatcher with deps (Store and NATS filled in) and returns
// it and Run's result; the test's end stops it.
func (e *env) run(deps dispatch.Deps, cfg *dispatch.Config) (*dispatch.Dispatcher, <-chan error) {
	e.t.Helper()
	deps.Store, deps.NATS = e.st, e.nc
	d, err := dispatch.New(deps, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	e.t.Cleanup(cancel)
	return d, done
}

// `fairway tenants set-weight` reaches a running dispatcher at once, for
// the tenant and for one destination, not at its next poll.
func TestWeightChangesReachTheDispatcherAtOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, 30*time.Second)
	e.tenant("acme", 1, 2, tenancy.DestPostgres, tenancy.DestClickHouse)
	sink := e.startSink(tenancy.DestPostgres, 1, nil, func() time.Duration { return 0 })
	e.startSink(tenancy.DestClickHouse, 1, nil, func() time.Duration { return 0 })
	e.publish("acme", 3)
	d := e.start(&dispatch.Config{Dests: []string{tenancy.DestPostgres, tenancy.DestClickHouse}, PollInterval: time.Hour}, nil)
	e.waitFor("acme's events", func() bool { return sink.events("acme") == 3 })
	if w := d.Weight(tenancy.DestPostgres, "acme"); w != 1 {
		t.Fatalf("weight %d before the change, want 1", w)
	}
	if err := e.st.SetWeight(e.ctx, "acme", 5); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the tenant's new weight", func() bool {
		return d.Weight(tenancy.DestPostgres, "acme") == 5 && d.Weight(tenancy.DestClickHouse, "acme") == 5
	})
	if err := e.st.SetDestWeight(e.ctx, "acme", tenancy.DestClickHouse, 8); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the destination's new weight", func() bool { return d.Weight(tenancy.DestClickHouse, "acme") == 8 })
	if w := d.Weight(tenancy.DestPostgres, "acme"); w != 5 {
		t.Fatalf("postgres weight %d after a clickhouse change, want 5", w)
	}
	if d.Wakeups("weight") < 3 {
		t.Fatalf("%v weight wake-ups, want 3", d.Wakeups("weight"))
	}
}

// partnerMap is a PartnerSource an operator changes while it runs.
type partnerMap struct {
	mu sync.Mutex
	m  map[string][]string
}

func (p *partnerMap) Partners(_ context.Context, tenant string) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.m[tenant]), nil
}

func (p *partnerMap) set(tenant string, partners ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m[tenant] = partners
}

// A partner added to a tenant whose destinations the dispatcher already
// knows becomes a destination at once (tenancy.NotifyPartner), with the
// tenant's events in the stream, not at the next poll.
func TestPartnerChangesReachTheDispatcherAtOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, 30*time.Second)
	e.tenant("acme", 1, 2, tenancy.DestPostgres)
	pg := e.startSink(tenancy.DestPostgres, 1, nil, func() time.Duration { return 0 })
	erp := e.startSink("b2b:erp", 1, nil, func() time.Duration { return 0 })
	seqs := e.publish("acme", 2)
	partners := &partnerMap{m: map[string][]string{}}
	d, _ := e.run(dispatch.Deps{Partners: partners}, &dispatch.Config{Dests: []string{tenancy.DestPostgres}, PollInterval: time.Hour})
	e.waitFor("acme's events in postgres", func() bool { return pg.events("acme") == 2 })

	partners.set("acme", "erp")
	if err := tenancy.NotifyPartner(e.ctx, e.pool, "acme", "erp", tenancy.PartnerAdded); err != nil {
		t.Fatal(err)
	}
	e.waitFor("acme's events at the new partner", func() bool { return erp.events("acme") == 2 })
	seqs = append(seqs, e.publish("acme", 1)...)
	e.waitFor("a new event at the partner", func() bool { return erp.events("acme") == 3 })
	checkExactlyOnce(t, erp.snapshot(), map[string][]uint64{"acme": seqs}, false)
	if d.Wakeups("partner") != 1 || d.Wakeups("poll") != 0 {
		t.Fatalf("wake-ups: partner %v, poll %v", d.Wakeups("partner"), d.Wakeups("poll"))
	}
}
