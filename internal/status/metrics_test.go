package status_test

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairwayhq/fairway/internal/status"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

func TestTopTenants(t *testing.T) {
	t.Parallel()
	row := func(tenant, dest string, backlog uint64, inUse int) status.Row {
		return status.Row{Tenant: tenant, Dest: dest, Backlog: backlog, InUse: inUse}
	}
	load := func(tenant string, backlog uint64, inFlight int) status.TenantLoad {
		return status.TenantLoad{Tenant: tenant, Backlog: backlog, InFlight: inFlight}
	}
	other := func(backlog uint64, inFlight int) status.TenantLoad {
		return load(status.OtherTenant, backlog, inFlight)
	}
	for _, tc := range []struct {
		name string
		rows []status.Row
		k    int
		want map[string]status.DestTop
	}{
		{"nothing", nil, 3, map[string]status.DestTop{}},
		{"fewer than k", []status.Row{row("a", "pg", 5, 1), row("b", "pg", 7, 0)}, 3, map[string]status.DestTop{
			"pg": {Top: []status.TenantLoad{load("b", 7, 0), load("a", 5, 1)}, Other: other(0, 0), Depth: 12, Waiting: 2}}},
		{"rest summed in other", []status.Row{row("a", "pg", 5, 1), row("b", "pg", 7, 0), row("c", "pg", 1, 1), row("d", "pg", 2, 0)}, 2,
			map[string]status.DestTop{"pg": {Top: []status.TenantLoad{load("b", 7, 0), load("a", 5, 1)}, Other: other(3, 1), Depth: 15, Waiting: 4}}},
		{"ties: more slots in use, then by name", []status.Row{row("z", "pg", 4, 0), row("y", "pg", 4, 2), row("x", "pg", 4, 0)}, 2,
			map[string]status.DestTop{"pg": {Top: []status.TenantLoad{load("y", 4, 2), load("x", 4, 0)}, Other: other(4, 0), Depth: 12, Waiting: 3}}},
		{"idle tenants are never listed", []status.Row{row("a", "pg", 0, 0), row("b", "pg", 0, 1), row("c", "pg", 0, 0)}, 5,
			map[string]status.DestTop{"pg": {Top: []status.TenantLoad{load("b", 0, 1)}, Other: other(0, 0), Depth: 0, Waiting: 0}}},
		{"a tenant named other is summed, not listed", []status.Row{row("other", "pg", 9, 1), row("a", "pg", 1, 0)}, 5,
			map[string]status.DestTop{"pg": {Top: []status.TenantLoad{load("a", 1, 0)}, Other: other(9, 1), Depth: 10, Waiting: 2}}},
		{"each destination its own top", []status.Row{row("a", "pg", 1, 0), row("b", "pg", 2, 0), row("a", "ch", 3, 0), row("b", "ch", 1, 0)}, 1,
			map[string]status.DestTop{
				"pg": {Top: []status.TenantLoad{load("b", 2, 0)}, Other: other(1, 0), Depth: 3, Waiting: 2},
				"ch": {Top: []status.TenantLoad{load("a", 3, 0)}, Other: other(1, 0), Depth: 4, Waiting: 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := status.TopTenants(tc.rows, tc.k); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("TopTenants(k=%d) =\n%+v\nwant\n%+v", tc.k, got, tc.want)
			}
		})
	}
}

// series reads one metric from reg: labels "dest/tenant" (or "dest") →
// value.
func series(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var dest, tenant string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "dest":
					dest = l.GetValue()
				case "tenant":
					tenant = l.GetValue()
				}
			}
			key := dest
			if tenant != "" {
				key += "/" + tenant
			}
			out[key] = m.GetGauge().GetValue()
		}
	}
	return out
}

// TestExporterBoundsTenantSeries: 300 tenants with backlog in real
// JetStream and PostgreSQL; per destination at most K+1 tenant series, and
// they add up to the totals; tenants leaving the top K lose their series.
func TestExporterBoundsTenantSeries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, nc, js := setupServers(t, events.StreamConfig{})
	const n, k = 300, 20
	dests := []string{tenancy.DestPostgres, tenancy.DestClickHouse}
	tenants := make([]string, n)
	var evs []events.Event
	for i := range tenants {
		tenants[i] = fmt.Sprintf("t%03d", i)
		for j := range i%40 + 1 { // tenant i has i%40+1 events
			evs = append(evs, events.Event{Tenant: tenants[i], ProductID: fmt.Sprint(j), Version: 1, Op: events.OpUpsert,
				OccurredAt: time.Now(), Payload: []byte(`{}`)})
		}
	}
	pub, _ := events.NewPublisher(js)
	last := map[string]uint64{}
	for i, r := range pub.Publish(ctx, evs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		last[evs[i].Tenant] = r.Seq
	}
	var wg sync.WaitGroup
	work8 := make(chan string)
	for range 8 {
		wg.Go(func() {
			for tn := range work8 {
				for _, d := range dests {
					if _, err := st.Cursor(ctx, tn, d); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	for _, tn := range tenants {
		work8 <- tn
	}
	close(work8)
	wg.Wait()
	// Some load in flight, on tenants that will not be in the top K.
	for _, tn := range tenants[:5] {
		if _, err := st.Acquire(ctx, tn, tenancy.DestPostgres, "h"); err != nil {
			t.Fatal(err)
		}
	}
	// clickhouse: even tenants are caught up.
	for i, tn := range tenants {
		if i%2 == 0 {
			if err := st.SetCursor(ctx, tn, tenancy.DestClickHouse, last[tn]+1); err != nil {
				t.Fatal(err)
			}
		}
	}

	now := time.Unix(1_800_000_000, 0)
	reg := prometheus.NewRegistry()
	src := &status.Source{Pairs: st, Reader: work.NewReader(nc, "")}
	ex, err := status.NewExporter(src, reg, &status.ExporterConfig{TopK: k, Interval: time.Second, GrowthWindow: time.Minute,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	check := func(when string, wantDepth, wantInFlight map[string]float64) map[string]float64 {
		t.Helper()
		if err := ex.Sample(ctx); err != nil {
			t.Fatal(err)
		}
		backlog := series(t, reg, "fairway_tenant_backlog_events")
		inFlight := series(t, reg, "fairway_tenant_in_flight")
		depth := series(t, reg, "fairway_backlog_events")
		for _, d := range dests {
			count, sum, flights := 0, 0.0, 0.0
			for key, v := range backlog {
				if len(key) > len(d) && key[:len(d)+1] == d+"/" {
					count++
					sum += v
					flights += inFlight[key]
				}
			}
			if _, ok := backlog[d+"/other"]; !ok {
				t.Errorf("%s: %s has no tenant=other series", when, d)
			}
			if count > k+1 {
				t.Errorf("%s: %s has %d tenant series, want at most %d", when, d, count, k+1)
			}
			if len(inFlight) != len(backlog) {
				t.Errorf("%s: %d in-flight series, %d backlog series", when, len(inFlight), len(backlog))
			}
			if sum != wantDepth[d] || depth[d] != wantDepth[d] {
				t.Errorf("%s: %s tenant series sum to %v, depth gauge %v, want %v", when, d, sum, depth[d], wantDepth[d])
			}
			if flights != wantInFlight[d] {
				t.Errorf("%s: %s in flight sums to %v, want %v", when, d, flights, wantInFlight[d])
			}
		}
		return backlog
	}
	total := func(skip func(i int) bool) float64 {
		s := 0.0
		for i := range n {
			if !skip(i) {
				s += float64(i%40 + 1)
			}
		}
		return s
	}
	pgDepth := total(func(int) bool { return false })
	chDepth := total(func(i int) bool { return i%2 == 0 })
	first := check("first sample", map[string]float64{"postgres": pgDepth, "clickhouse": chDepth}, map[string]float64{"postgres": 5})
	// The 20 with most backlog have 40 events each (i%40 == 39): t039, t079, ...
	if v, ok := first["postgres/t039"]; !ok || v != 40 {
		t.Errorf("t039 not listed with 40: %v %v", v, ok)
	}
	if _, ok := first["postgres/t000"]; ok {
		t.Error("t000 (1 event) listed by name")
	}

	// The leaders catch up on postgres: they must leave the top K and lose
	// their series; the backlog drops, so the growth rate is negative.
	drained := 0.0
	for i, tn := range tenants {
		if i%40 >= 35 {
			if err := st.SetCursor(ctx, tn, tenancy.DestPostgres, last[tn]+1); err != nil {
				t.Fatal(err)
			}
			drained += float64(i%40 + 1)
		}
	}
	now = now.Add(10 * time.Second)
	second := check("after the leaders drained", map[string]float64{"postgres": pgDepth - drained, "clickhouse": chDepth}, map[string]float64{"postgres": 5})
	if _, ok := second["postgres/t039"]; ok {
		t.Error("t039 drained but its series is still there")
	}
	if v, ok := second["postgres/t034"]; !ok || v != 35 {
		t.Errorf("t034 (35 events) not listed: %v %v", v, ok)
	}
	growth := series(t, reg, "fairway_backlog_growth_events_per_second")
	if g := growth["postgres"]; g != -drained/10 {
		t.Errorf("postgres growth %v/s, want %v", g, -drained/10)
	}
	if g, ok := growth["clickhouse"]; !ok || g != 0 {
		t.Errorf("clickhouse growth %v (%v), want 0", g, ok)
	}
	if w := series(t, reg, "fairway_backlog_tenants")["postgres"]; w != float64(n-n/40*5) {
		t.Errorf("postgres tenants with backlog %v, want %d", w, n-n/40*5)
	}
}
