package dispatch_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// productN makes every published event unique (the publisher deduplicates
// on tenant, product and version).
var productN atomic.Int64

type env struct {
	t    *testing.T
	ctx  context.Context
	dsn  string
	pool *pgxpool.Pool
	st   *tenancy.Store
	nc   *nats.Conn
	url  string
	js   jetstream.JetStream
	pub  *events.Publisher
}

func setup(t *testing.T, ttl time.Duration) *env {
	t.Helper()
	return setupWithin(t, ttl, 90*time.Second)
}

// setupWithin is setup for a test that may take up to deadline, not 90 s:
// one that keeps a deliberately slow sink busy, which a loaded machine
// (the whole suite at once) makes several times slower.
func setupWithin(t *testing.T, ttl, deadline time.Duration) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	t.Cleanup(cancel)
	dsn := testenv.NewDatabase(t)
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st, err := tenancy.New(pool, &tenancy.Config{LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	srv, nc, js := testenv.JetStream(t)
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := work.EnsureStream(ctx, js, work.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	pub, err := events.NewPublisher(js)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: ctx, dsn: dsn, pool: pool, st: st, nc: nc, url: srv.ClientURL(), js: js, pub: pub}
}

// unpartitioned replaces PRODUCTS with a stream created before
// partitions (no subject transform); call it before publishing.
func (e *env) unpartitioned() {
	e.t.Helper()
	if err := e.js.DeleteStream(e.ctx, events.StreamName); err != nil {
		e.t.Fatal(err)
	}
	cfg := events.StreamConfig{}.JetStreamConfig()
	cfg.SubjectTransform = nil
	if _, err := e.js.CreateStream(e.ctx, cfg); err != nil {
		e.t.Fatal(err)
	}
}

// tenant creates a tenant with a weight and a limit in dests.
func (e *env) tenant(id string, weight, limit int, dests ...string) {
	e.t.Helper()
	if _, err := e.st.EnsureTenant(e.ctx, id); err != nil {
		e.t.Fatal(err)
	}
	if err := e.st.SetWeight(e.ctx, id, weight); err != nil {
		e.t.Fatal(err)
	}
	for _, d := range dests {
		if err := e.st.SetLimit(e.ctx, id, d, limit); err != nil {
			e.t.Fatal(err)
		}
	}
}

// publish stores n events of tenant and returns their sequences.
// numbered adds n tenants t00, t01, … of weight 1 with limit slots at
// postgres and returns their ids.
func (e *env) numbered(n, limit int) []string {
	e.t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("t%02d", i)
		e.tenant(ids[i], 1, limit, pg)
	}
	return ids
}

func (e *env) publish(tenant string, n int) []uint64 {
	e.t.Helper()
	tenants := make([]string, n)
	for i := range tenants {
		tenants[i] = tenant
	}
	return e.publishAll(tenants)[tenant]
}

// publishAll stores one event per entry of tenants, in that order, and
// returns each tenant's sequences.
func (e *env) publishAll(tenants []string) map[string][]uint64 {
	e.t.Helper()
	return e.publishAllOf(tenants, "")
}

// publishOf stores n events of tenant of priority p and returns their
// sequences.
func (e *env) publishOf(tenant string, p events.Priority, n int) []uint64 {
	e.t.Helper()
	tenants := make([]string, n)
	for i := range tenants {
		tenants[i] = tenant
	}
	return e.publishAllOf(tenants, p)[tenant]
}

// publishAllOf is publishAll of events of priority p.
func (e *env) publishAllOf(tenants []string, p events.Priority) map[string][]uint64 {
	e.t.Helper()
	seqs := map[string][]uint64{}
	const chunk = 5000
	for off := 0; off < len(tenants); off += chunk {
		part := tenants[off:min(len(tenants), off+chunk)]
		evs := make([]events.Event, 0, len(part))
		for _, tenant := range part {
			evs = append(evs, events.Event{Tenant: tenant, ProductID: fmt.Sprintf("p%d", productN.Add(1)), Version: 1,
				Op: events.OpUpsert, OccurredAt: time.Unix(1_700_000_000, 0), Payload: []byte(`{}`), Priority: p})
		}
		for i, r := range e.pub.Publish(e.ctx, evs) {
			if r.Err != nil {
				e.t.Fatalf("publish: %v", r.Err)
			}
			seqs[part[i]] = append(seqs[part[i]], r.Seq)
		}
	}
	return seqs
}

// interleave publishes rounds times, in each round runs[i] events of
// tenants[i] in turn (backlogs that interleave in the stream), and returns
// each tenant's sequences.
func (e *env) interleave(rounds int, tenants []string, runs ...int) map[string][]uint64 {
	e.t.Helper()
	var order []string
	for range rounds {
		for i, tenant := range tenants {
			for range runs[i] {
				order = append(order, tenant)
			}
		}
	}
	return e.publishAll(order)
}

// start runs a dispatcher until the test ends.
func (e *env) start(cfg *dispatch.Config, prepare func(*dispatch.Dispatcher)) *dispatch.Dispatcher {
	e.t.Helper()
	d, _ := e.startStoppable(cfg, prepare)
	return d
}

// startStoppable is start for a dispatcher the test stops: stop ends its
// Run and returns Run's error (at the test's end too, reported there).
func (e *env) startStoppable(cfg *dispatch.Config, prepare func(*dispatch.Dispatcher)) (d *dispatch.Dispatcher, stop func() error) {
	e.t.Helper()
	d, err := dispatch.New(dispatch.Deps{Store: e.st, NATS: e.nc}, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if prepare != nil {
		prepare(d)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	stop = sync.OnceValue(func() error { cancel(); return <-done })
	e.t.Cleanup(func() {
		if err := stop(); err != nil {
			e.t.Errorf("run: %v", err)
		}
	})
	return d, stop
}

// workCount is the number of messages stream WORK has stored so far.
func (e *env) workLastSeq() uint64 {
	e.t.Helper()
	s, err := e.js.Stream(e.ctx, work.StreamName)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.LastSeq
}

// waitFor polls cond (a condition on real servers, not a clock) until it
// holds or the test's deadline passes.
func (e *env) waitFor(what string, cond func() bool) {
	e.t.Helper()
	for !cond() {
		select {
		case <-e.ctx.Done():
			e.dump()
			e.t.Fatalf("timed out waiting for %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// workItems reads WORK messages first..last (not consumed: no sink runs).
func (e *env) workItems(first, last uint64) []work.Item {
	e.t.Helper()
	s, err := e.js.Stream(e.ctx, work.StreamName)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []work.Item
	for seq := first; seq <= last; seq++ {
		m, err := s.GetMsg(e.ctx, seq)
		if err != nil {
			e.t.Fatalf("get WORK %d: %v", seq, err)
		}
		it, err := work.Decode(m.Data)
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, it)
	}
	return out
}

// sink is a fake destination: workers consume WORK, hold each item for
// hold(), release the lease and ack. It records every item and checks that
// no tenant ever has more items held at once than its limit.
type sink struct {
	e      *env
	mu     sync.Mutex
	items  []work.Item
	held   map[string]int // tenant/dest -> items held now
	peak   map[string]int
	limits map[string]int // tenant/dest -> limit
	errs   []string
}

func (e *env) startSink(dest string, workers int, limits map[string]int, hold func() time.Duration) *sink {
	e.t.Helper()
	s := &sink{e: e, held: map[string]int{}, peak: map[string]int{}, limits: limits}
	cons, err := e.js.CreateOrUpdateConsumer(e.ctx, work.StreamName, jetstream.ConsumerConfig{
		Durable: "sink-" + sanitize(dest), FilterSubject: work.FilterSubject(dest),
		AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 10_000, AckWait: time.Minute,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				batch, err := cons.Fetch(1, jetstream.FetchMaxWait(200*time.Millisecond))
				if err != nil {
					continue
				}
				for m := range batch.Messages() {
					s.apply(ctx, m, hold)
				}
			}
		})
	}
	e.t.Cleanup(func() { cancel(); wg.Wait() })
	return s
}

func sanitize(d string) string {
	out := []byte(d)
	for i, c := range out {
		if c == ':' {
			out[i] = '_'
		}
	}
	return string(out)
}

func (s *sink) apply(ctx context.Context, m jetstream.Msg, hold func() time.Duration) {
	it, err := work.Decode(m.Data())
	if err != nil {
		s.fail("decode: %v", err)
		_ = m.Term()
		return
	}
	k := it.Tenant + "/" + it.Dest
	s.mu.Lock()
	s.items = append(s.items, it)
	s.held[k]++
	if s.held[k] > s.peak[k] {
		s.peak[k] = s.held[k]
	}
	if lim, ok := s.limits[k]; ok && s.held[k] > lim {
		s.errs = append(s.errs, fmt.Sprintf("%s: %d items held at once, limit %d", k, s.held[k], lim))
	}
	s.mu.Unlock()
	if d := hold(); d > 0 {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	s.mu.Lock()
	s.held[k]--
	s.mu.Unlock()
	// Release before ack; ErrStaleLease means someone re-dispatched it.
	if err := s.e.st.Release(context.WithoutCancel(ctx), it.LeaseID, it.Token); err != nil && !isStale(err) {
		s.fail("release %s: %v", it.LeaseID, err)
	}
	_ = m.Ack()
}

func (s *sink) fail(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, fmt.Sprintf(format, args...))
}

func (s *sink) snapshot() []work.Item {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]work.Item(nil), s.items...)
}

// events counts the events the sink's items cover for a tenant, every
// application counted (a replay's applies them again).
func (s *sink) events(tenant string) int { return s.count(tenant, false) }

// distinct is events counting a range applied again under a new token
// (an orphan re-dispatched) once, so that a wait for every event is not
// ended early by duplicates.
func (s *sink) distinct(tenant string) int { return s.count(tenant, true) }

// total counts the events of every item, every application counted.
func (s *sink) total() int {
	n := 0
	for _, it := range s.snapshot() {
		n += it.Count
	}
	return n
}

// count counts the events of tenant's items, each range once if once.
func (s *sink) count(tenant string, once bool) int {
	type rng struct {
		dest     string
		from, to uint64
	}
	n := 0
	seen := map[rng]bool{}
	for _, it := range s.snapshot() {
		r := rng{it.Dest, it.FromSeq, it.ToSeq}
		if it.Tenant != tenant || once && seen[r] {
			continue
		}
		seen[r] = true
		n += it.Count
	}
	return n
}

// checkExactlyOnce checks that items cover each tenant's sequences exactly
// once, except re-dispatches of an identical range under a new token
// (allowDup), and returns how many such re-dispatches there were.
func checkExactlyOnce(t testing.TB, items []work.Item, seqs map[string][]uint64, allowDup bool) int {
	t.Helper()
	type rng struct {
		from, to uint64
		count    int
	}
	byTenant := map[string][]rng{} // by tenant/dest
	dests := map[string]bool{}
	seen := map[string]bool{}
	dups := 0
	for _, it := range items {
		id := fmt.Sprintf("%s/%s/%d-%d", it.Tenant, it.Dest, it.FromSeq, it.ToSeq)
		if seen[id] {
			if !allowDup {
				t.Errorf("range %s dispatched twice", id)
			}
			dups++
			continue
		}
		seen[id] = true
		dests[it.Dest] = true
		byTenant[it.Tenant+"/"+it.Dest] = append(byTenant[it.Tenant+"/"+it.Dest], rng{it.FromSeq, it.ToSeq, it.Count})
	}
	for key, rs := range byTenant {
		tenant, _, _ := strings.Cut(key, "/")
		sort.Slice(rs, func(i, j int) bool { return rs[i].from < rs[j].from })
		want := seqs[tenant]
		i := 0
		for _, r := range rs {
			for ; i < len(want) && want[i] < r.from; i++ {
				t.Errorf("%s: sequence %d never dispatched (next range %d..%d)", key, want[i], r.from, r.to)
			}
			n := 0
			for ; i < len(want) && want[i] <= r.to; i++ {
				n++
			}
			if n != r.count {
				t.Errorf("%s: range %d..%d says %d events, holds %d (overlap?)", key, r.from, r.to, r.count, n)
			}
		}
		if i != len(want) {
			t.Errorf("%s: %d of %d sequences never dispatched", key, len(want)-i, len(want))
		}
	}
	if len(dests) == 0 {
		dests[tenancy.DestPostgres] = true
	}
	for tenant := range seqs {
		for dest := range dests {
			if _, ok := byTenant[tenant+"/"+dest]; !ok {
				t.Errorf("%s: nothing dispatched to %s", tenant, dest)
			}
		}
	}
	return dups
}

func isStale(err error) bool { return err != nil && errorsIs(err, tenancy.ErrStaleLease) }

var errorsIs = errors.Is

// dump logs cursors, live leases and orphans, for a test that timed out.
func (e *env) dump() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := e.pool.Query(ctx, `SELECT c.tenant, c.dest, c.next_seq,
			(SELECT count(*) FROM fairway.slots s WHERE s.tenant = c.tenant AND s.dest = c.dest AND s.expires_at >= now()),
			(SELECT count(*) FROM fairway.orphans o WHERE o.tenant = c.tenant AND o.dest = c.dest)
		FROM fairway.cursors c ORDER BY 1, 2`)
	if err != nil {
		e.t.Logf("dump: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var t, d string
		var next, live, orphans int64
		_ = rows.Scan(&t, &d, &next, &live, &orphans)
		e.t.Logf("dump: %s/%s cursor %d live leases %d orphans %d", t, d, next, live, orphans)
	}
}

// checkCarried checks that the bodies item it carries are its events as
// PRODUCTS stores them (stored, read with headers): sequence, store time
// to the millisecond, data, and the op of the subject.
func checkCarried(t testing.TB, it work.Item, stored []work.Stored) {
	t.Helper()
	if len(it.Bodies) != len(stored) {
		t.Fatalf("item %s/%d-%d carries %d bodies, %d events stored", it.Tenant, it.FromSeq, it.ToSeq, len(it.Bodies), len(stored))
	}
	for i, m := range stored {
		b := it.Bodies[i]
		if b.Seq != m.Seq || b.StoredMs != m.Time.UnixMilli() || !bytes.Equal(b.Data, m.Data) || m.Subject != events.LayoutDefault.StoredSubject("products."+it.Tenant+"."+string(b.Op)) {
			t.Fatalf("item %s/%d-%d body %d: seq %d at %d op %s, stored seq %d at %v on %s", it.Tenant, it.FromSeq, it.ToSeq, i, b.Seq, b.StoredMs, b.Op, m.Seq, m.Time, m.Subject)
		}
	}
}
