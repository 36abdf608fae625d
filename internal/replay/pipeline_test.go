package replay_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/fairwayhq/fairway/internal/demo"
	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/pipeline"
	"github.com/fairwayhq/fairway/internal/replay"
	"github.com/fairwayhq/fairway/internal/sink/runner"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/testenv/pipelinetest"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/b2b/b2btest"
)

// pipeWait bounds every wait for the pipeline to reach a state.
const pipeWait = 60 * time.Second

const pipePartner = "p1"

// pipe is the whole pipeline in one process (pipelinetest) with a
// partner p1 for every tenant, and the model of what it must hold.
type pipe struct {
	*pipelinetest.Pipeline
	t       *testing.T
	tracker *demo.Tracker
	svc     *replay.Service

	// model is what every destination must hold: per (tenant, product) the
	// newest published event. keys counts distinct (tenant, product,
	// version) per tenant, the ClickHouse event rows after dedup.
	mu    sync.Mutex
	model map[[2]string]events.Event
	keys  map[string]int
	seqs  map[string][]uint64
}

func startPipeline(t *testing.T, tenants []string) *pipe {
	t.Helper()
	tracker := demo.NewTracker()
	pp := pipelinetest.Start(t, pipelinetest.Config{
		Pipeline: pipeline.Config{
			Tenants: tenants,
			// Two slots per (tenant, destination): each slot counts its
			// own fencing tokens, so a replayed batch on another slot must
			// still get a new Nats-Msg-Id (work.Item.MsgID names the
			// slot).
			Tenancy: tenancy.Config{DefaultMaxSlots: 2},
			// Small batches and a short poll: a replay becomes several
			// work items, and the dispatcher notices a rewound cursor
			// quickly.
			Dispatcher: dispatch.Config{BatchSize: 25, PollInterval: 250 * time.Millisecond},
			// Default AckWait (30 s): a fetch that stops listening before
			// the server's expiry would stall a tenant that long.
			Runner:   runner.Config{FetchWait: 100 * time.Millisecond},
			WrapSink: tracker.Wrap,
		},
		Partners: []pipelinetest.Partner{{Name: pipePartner}},
	})
	return &pipe{Pipeline: pp, t: t, tracker: tracker,
		svc:   &replay.Service{Store: pp.Store, Pool: pp.Pool, JS: pp.JS, Reader: work.NewReader(pp.NC, "")},
		model: map[[2]string]events.Event{}, keys: map[string]int{}, seqs: map[string][]uint64{}}
}

// publish stores evs in PRODUCTS and records them in the model.
func (p *pipe) publish(evs []events.Event) {
	p.t.Helper()
	res := p.Publisher.Publish(context.Background(), evs)
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range res {
		if r.Err != nil {
			p.t.Fatalf("publish %s/%s v%d: %v", evs[i].Tenant, evs[i].ProductID, evs[i].Version, r.Err)
		}
		e := evs[i]
		p.seqs[e.Tenant] = append(p.seqs[e.Tenant], r.Seq)
		p.keys[e.Tenant]++
		k := [2]string{e.Tenant, e.ProductID}
		if cur, ok := p.model[k]; !ok || cur.Version < e.Version {
			p.model[k] = e
		}
	}
}

var occurred = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func productEvent(tenant, id string, v int64, del bool) events.Event {
	e := events.Event{Tenant: tenant, ProductID: id, Version: v, Op: events.OpUpsert,
		OccurredAt: occurred.Add(time.Duration(v) * time.Second),
		Payload:    json.RawMessage(fmt.Sprintf(`{"name":"%s-%s","v":%d}`, tenant, id, v))}
	if del {
		e.Op, e.Payload = events.OpDelete, nil
	}
	return e
}

// catalog builds, interleaved across tenants, versions 1..n of each
// product; every fifth product ends with a delete.
func catalog(tenants []string, products, versions int) []events.Event {
	var evs []events.Event
	for v := 1; v <= versions; v++ {
		for i := range products {
			for _, tn := range tenants {
				evs = append(evs, productEvent(tn, fmt.Sprintf("p%02d", i), int64(v), v == versions && i%5 == 0))
			}
		}
	}
	return evs
}

// pgRow is one row of catalog.products.
type pgRow struct {
	Version            int64
	Deleted            bool
	Payload            pgtype.Text
	UpdatedAt, Applied time.Time
}

// chRow is one product of products_latest FINAL, with its newest version in
// product_events FINAL.
type chRow struct {
	Version    int64
	Deleted    uint8
	Payload    string
	MaxEventV  int64
	EventsRows uint64
}

// snapshot is what the destinations hold for a set of tenants.
type snapshot struct {
	PG       map[[2]string]pgRow
	CH       map[[2]string]chRow
	CHEvents map[string]uint64 // tenant → count() of product_events FINAL
	CHLatest map[string]uint64 // tenant → count() of products_latest FINAL
	B2B      map[[2]string]b2btest.Stored
}

func (p *pipe) snapshot(ctx context.Context, tenants ...string) (snapshot, error) {
	s := snapshot{PG: map[[2]string]pgRow{}, CH: map[[2]string]chRow{}, CHEvents: map[string]uint64{},
		CHLatest: map[string]uint64{}, B2B: map[[2]string]b2btest.Stored{}}
	rows, err := p.Pool.Query(ctx, `SELECT tenant_id, product_id, version, deleted, payload::text, updated_at, applied_at
		FROM catalog.products WHERE tenant_id = ANY($1)`, tenants)
	if err != nil {
		return s, fmt.Errorf("read catalog.products: %w", err)
	}
	for rows.Next() {
		var tn, id string
		var r pgRow
		if err := rows.Scan(&tn, &id, &r.Version, &r.Deleted, &r.Payload, &r.UpdatedAt, &r.Applied); err != nil {
			rows.Close()
			return s, err
		}
		s.PG[[2]string{tn, id}] = r
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	for _, tn := range tenants {
		var n uint64
		q := fmt.Sprintf("SELECT count() FROM `%s`.product_events FINAL WHERE tenant_id = ?", p.ClickHouseDatabase)
		if err := p.ClickHouse.QueryRow(ctx, q, tn).Scan(&n); err != nil {
			return s, fmt.Errorf("count product_events: %w", err)
		}
		s.CHEvents[tn] = n
		q = fmt.Sprintf("SELECT count() FROM `%s`.products_latest FINAL WHERE tenant_id = ?", p.ClickHouseDatabase)
		if err := p.ClickHouse.QueryRow(ctx, q, tn).Scan(&n); err != nil {
			return s, fmt.Errorf("count products_latest: %w", err)
		}
		s.CHLatest[tn] = n
		q = fmt.Sprintf("SELECT product_id, version, deleted, payload FROM `%s`.products_latest FINAL WHERE tenant_id = ?", p.ClickHouseDatabase)
		crows, err := p.ClickHouse.Query(ctx, q, tn)
		if err != nil {
			return s, fmt.Errorf("read products_latest: %w", err)
		}
		for crows.Next() {
			var id string
			var r chRow
			if err := crows.Scan(&id, &r.Version, &r.Deleted, &r.Payload); err != nil {
				crows.Close()
				return s, err
			}
			s.CH[[2]string{tn, id}] = r
		}
		crows.Close()
		if err := crows.Err(); err != nil {
			return s, err
		}
		q = fmt.Sprintf("SELECT product_id, max(version), count() FROM `%s`.product_events FINAL WHERE tenant_id = ? GROUP BY product_id", p.ClickHouseDatabase)
		crows, err = p.ClickHouse.Query(ctx, q, tn)
		if err != nil {
			return s, fmt.Errorf("read product_events: %w", err)
		}
		for crows.Next() {
			var id string
			var v int64
			var n uint64
			if err := crows.Scan(&id, &v, &n); err != nil {
				crows.Close()
				return s, err
			}
			k := [2]string{tn, id}
			r := s.CH[k]
			r.MaxEventV, r.EventsRows = v, n
			s.CH[k] = r
		}
		crows.Close()
		if err := crows.Err(); err != nil {
			return s, err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.model {
		if !slices.Contains(tenants, k[0]) {
			continue
		}
		if st, ok := p.Receivers[pipePartner].Get(k[0], k[1]); ok {
			s.B2B[k] = st
		}
	}
	return s, nil
}

// converged says what, if anything, the snapshot still lacks of the model
// for tenants.
func (p *pipe) converged(s snapshot, tenants ...string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, tn := range tenants {
		if got, want := s.CHEvents[tn], uint64(p.keys[tn]); got != want {
			return fmt.Sprintf("ClickHouse holds %d events of %s after FINAL, want %d", got, tn, want)
		}
	}
	for k, e := range p.model {
		if !slices.Contains(tenants, k[0]) {
			continue
		}
		del := e.Op == events.OpDelete
		if r, ok := s.PG[k]; !ok || r.Version != e.Version || r.Deleted != del {
			return fmt.Sprintf("PostgreSQL %v: %+v, want version %d deleted %t", k, r, e.Version, del)
		}
		if r, ok := s.CH[k]; !ok || r.Version != e.Version || (r.Deleted == 1) != del || r.MaxEventV != e.Version {
			return fmt.Sprintf("ClickHouse %v: %+v, want version %d deleted %t", k, r, e.Version, del)
		}
		if r, ok := s.B2B[k]; !ok || r.Version != e.Version || r.Op != string(e.Op) {
			return fmt.Sprintf("receiver %v: %+v, want version %d op %s", k, r, e.Version, e.Op)
		}
	}
	return ""
}

func (p *pipe) waitConverged(what string, tenants ...string) snapshot {
	p.t.Helper()
	var s snapshot
	ctx, cancel := context.WithTimeout(context.Background(), pipeWait)
	defer cancel()
	testenv.Eventually(p.t, pipeWait, what, func() error {
		var err error
		if s, err = p.snapshot(ctx, tenants...); err != nil {
			return err
		}
		if left := p.converged(s, tenants...); left != "" {
			return errors.New(left)
		}
		return p.Quiet(ctx)
	})
	return s
}

func (p *pipe) applied(tenant string) map[string]int64 {
	out := map[string]int64{}
	for _, d := range p.Dests {
		out[d] = p.tracker.Applied(tenant, d)
	}
	return out
}

// replayAll replays tenant to every destination from its first event and
// waits until the replays are done, each destination applied the range
// again and the pipeline is quiet.
func (p *pipe) replayAll(tenant string, during func()) {
	p.t.Helper()
	ctx := context.Background()
	before := p.applied(tenant)
	rs, err := p.svc.Start(ctx, replay.Request{Tenant: tenant, Dest: "all", FromSeq: p.seqs[tenant][0]})
	if err != nil {
		p.t.Fatalf("replay %s: %v", tenant, err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, r.Dest)
		if r.Total != uint64(len(p.seqs[tenant])) {
			p.t.Errorf("replay %s/%s covers %d events, want %d", r.Tenant, r.Dest, r.Total, len(p.seqs[tenant]))
		}
	}
	if slices.Sort(got); !slices.Equal(got, slices.Sorted(slices.Values(p.Dests))) {
		p.t.Fatalf("replay all of %s started for %v, want %v", tenant, got, p.Dests)
	}
	if during != nil {
		during()
	}
	wctx, cancel := context.WithTimeout(ctx, pipeWait)
	defer cancel()
	testenv.Eventually(p.t, pipeWait, "replay of "+tenant, func() error {
		for _, r := range rs {
			cur, err := p.svc.Get(wctx, r.ID)
			if err != nil {
				return err
			}
			if cur.State != replay.StateDone {
				return fmt.Errorf("replay %d (%s) is %s, %d/%d", r.ID, r.Dest, cur.State, cur.Done, cur.Total)
			}
		}
		if err := p.Quiet(wctx); err != nil {
			return err
		}
		// Done and quiet: every re-dispatched batch was applied and its
		// slot released, so the counts are final.
		for _, r := range rs {
			if n := p.tracker.Applied(tenant, r.Dest) - before[r.Dest]; n < int64(r.Total) {
				p.t.Fatalf("replay %d of %s is done and the pipeline quiet, but %s applied only %d of the %d replayed events",
					r.ID, tenant, r.Dest, n, r.Total)
			}
		}
		return nil
	})
	after := p.applied(tenant)
	p.t.Logf("replay of %s: applied before %v, after %v", tenant, before, after)
}

// TestReplayTwiceIsIdempotent: replaying the same range twice leaves every
// destination exactly as after once (rows, versions, ClickHouse counts
// after dedup, the partner's products), while the replays really re-apply
// the events and another tenant's live traffic still gets through.
func TestReplayTwiceIsIdempotent(t *testing.T) {
	t.Parallel()
	tenants := []string{"acme", "globex", "initech"}
	p := startPipeline(t, tenants)
	// 3 tenants × 20 products × 5 versions = 300 events.
	p.publish(catalog(tenants, 20, 5))
	once := p.waitConverged("initial apply", tenants...)
	if len(once.PG) != 60 || len(once.CH) != 60 || len(once.B2B) != 60 {
		t.Fatalf("after the initial apply: %d PostgreSQL rows, %d ClickHouse products, %d partner products; want 60 each",
			len(once.PG), len(once.CH), len(once.B2B))
	}
	others := []string{"acme", "initech"} // unchanged by globex's live traffic

	// First replay of acme while globex publishes: new versions of some
	// products and new products.
	p.replayAll("acme", func() {
		var live []events.Event
		for i := range 4 {
			live = append(live, productEvent("globex", fmt.Sprintf("p%02d", i+1), 6, false))
			live = append(live, productEvent("globex", fmt.Sprintf("live%d", i), 1, false))
		}
		p.publish(live)
	})
	twice := p.waitConverged("after the first replay", tenants...)
	if len(twice.PG) != 64 {
		t.Errorf("after the first replay: %d PostgreSQL rows, want 64 (globex's 4 new products)", len(twice.PG))
	}
	compare(t, "first replay", filter(once, others), filter(twice, others))

	// Second replay of the same range, nothing else moving.
	p.replayAll("acme", nil)
	thrice := p.waitConverged("after the second replay", tenants...)
	compare(t, "second replay", twice, thrice)
	compare(t, "both replays", filter(once, others), filter(thrice, others))

	if n := p.tracker.Applied("acme", tenancy.DestPostgres); n < 3*100 {
		t.Errorf("postgres applied %d acme events in all, want ≥ 300 (100 published, replayed twice)", n)
	}
}

// filter keeps tenants' part of s.
func filter(s snapshot, tenants []string) snapshot {
	keep := func(k [2]string) bool { return slices.Contains(tenants, k[0]) }
	out := snapshot{PG: map[[2]string]pgRow{}, CH: map[[2]string]chRow{}, CHEvents: map[string]uint64{},
		CHLatest: map[string]uint64{}, B2B: map[[2]string]b2btest.Stored{}}
	for k, v := range s.PG {
		if keep(k) {
			out.PG[k] = v
		}
	}
	for k, v := range s.CH {
		if keep(k) {
			out.CH[k] = v
		}
	}
	for k, v := range s.B2B {
		if keep(k) {
			out.B2B[k] = v
		}
	}
	for _, tn := range tenants {
		out.CHEvents[tn], out.CHLatest[tn] = s.CHEvents[tn], s.CHLatest[tn]
	}
	return out
}

// compare reports every difference between two snapshots.
func compare(t *testing.T, what string, want, got snapshot) {
	t.Helper()
	const maxShown = 5
	shown := 0
	diff := func(dest string, a, b any) {
		if reflect.DeepEqual(a, b) {
			return
		}
		if shown++; shown <= maxShown {
			t.Errorf("%s changed %s:\nbefore %+v\nafter  %+v", what, dest, a, b)
		}
	}
	defer func() {
		if shown > maxShown {
			t.Errorf("%s: %d more differences not shown", what, shown-maxShown)
		}
	}()
	for _, k := range sortedKeys(want.PG) {
		diff(fmt.Sprintf("PostgreSQL row %v", k), want.PG[k], got.PG[k])
	}
	for _, k := range sortedKeys(want.CH) {
		diff(fmt.Sprintf("ClickHouse product %v", k), want.CH[k], got.CH[k])
	}
	for _, k := range sortedKeys(want.B2B) {
		diff(fmt.Sprintf("partner product %v", k), want.B2B[k], got.B2B[k])
	}
	if len(want.PG) != len(got.PG) || len(want.CH) != len(got.CH) || len(want.B2B) != len(got.B2B) {
		t.Errorf("%s changed the product counts: PostgreSQL %d→%d, ClickHouse %d→%d, partner %d→%d", what,
			len(want.PG), len(got.PG), len(want.CH), len(got.CH), len(want.B2B), len(got.B2B))
	}
	diff("ClickHouse product_events count after FINAL", want.CHEvents, got.CHEvents)
	diff("ClickHouse products_latest count after FINAL", want.CHLatest, got.CHLatest)
}

func sortedKeys[V any](m map[[2]string]V) [][2]string {
	return slices.SortedFunc(maps.Keys(m), func(a, b [2]string) int {
		return cmp.Or(strings.Compare(a[0], b[0]), strings.Compare(a[1], b[1]))
	})
}
