package dashboard

import (
	"cmp"
	"slices"
	"time"

	"github.com/fairwayhq/fairway/internal/status"
)

// Snapshot is what GET /ui/api/status returns and the page shows.
type Snapshot struct {
	GeneratedAt time.Time `json:"generated_at"`
	// RefreshMillis is how often the page polls.
	RefreshMillis int64 `json:"refresh_ms"`
	// Error is set when the status source failed; the page keeps showing
	// what it had.
	Error string `json:"error,omitempty"`
	// Tenant is set in a tenant's view (TenantSnapshot): every figure is
	// that tenant's alone and Throughput is false.
	Tenant string `json:"tenant,omitempty"`

	// Tenants is how many distinct tenants there are in all.
	Tenants int `json:"tenants"`
	// Rows are the (tenant, destination) rows of the TopK tenants with the
	// most backlog, the tenant with the most first.
	Rows []TenantRow `json:"rows"`
	// Other sums the tenants beyond TopK; nil when there are none.
	Other *OtherRow `json:"other,omitempty"`

	// Dests has one entry per destination seen in the rows or the metrics,
	// by name.
	Dests []DestRow `json:"dests"`
	// Throughput is false when no DestSource is wired: every destination's
	// throughput and latency are "no data".
	Throughput bool `json:"throughput"`
}

// TenantRow is one (tenant, destination), from status.Row.
type TenantRow struct {
	Tenant           string  `json:"tenant"`
	Dest             string  `json:"dest"`
	Backlog          uint64  `json:"backlog"`
	OldestAgeSeconds float64 `json:"oldest_age_seconds"`
	InUse            int     `json:"in_use"`
	Limit            int     `json:"limit"`
	Weight           int     `json:"weight"`
	Paused           bool    `json:"paused"`
	DeadLetters      uint64  `json:"dead_letters"`
	Reason           string  `json:"reason"`
}

// OtherRow sums the rows of the tenants not listed.
type OtherRow struct {
	Tenants          int     `json:"tenants"`
	Pairs            int     `json:"pairs"`
	Backlog          uint64  `json:"backlog"`
	OldestAgeSeconds float64 `json:"oldest_age_seconds"` // the oldest of them
	InUse            int     `json:"in_use"`
	Limit            int     `json:"limit"`
	DeadLetters      uint64  `json:"dead_letters"`
}

// DestRow is one destination: totals over every tenant, and its
// throughput and latency when known.
type DestRow struct {
	Dest        string `json:"dest"`
	Tenants     int    `json:"tenants"`
	Backlog     uint64 `json:"backlog"`
	InUse       int    `json:"in_use"`
	Limit       int    `json:"limit"`
	DeadLetters uint64 `json:"dead_letters"`
	// Stats are the throughput and latency; nil when unknown ("no data").
	Stats *DestStats `json:"stats"`
}

// buildSnapshot ranks tenants by total backlog (then dead letters, slots in
// use, name), keeps the rows of the first topK and sums the rest.
func buildSnapshot(rows []status.Row, dests []DestStats, throughput bool, topK int) Snapshot {
	type tenantSum struct {
		name          string
		backlog, dead uint64
		inUse         int
	}
	// Rows arrive ordered by tenant; do not rely on it.
	byTenant := map[string]*tenantSum{}
	var order []*tenantSum
	destRows := map[string]*DestRow{}
	for _, r := range rows {
		t := byTenant[r.Tenant]
		if t == nil {
			t = &tenantSum{name: r.Tenant}
			byTenant[r.Tenant] = t
			order = append(order, t)
		}
		t.backlog += r.Backlog
		t.dead += r.DeadLetters
		t.inUse += r.InUse

		d := destRows[r.Dest]
		if d == nil {
			d = &DestRow{Dest: r.Dest}
			destRows[r.Dest] = d
		}
		d.Tenants++
		d.Backlog += r.Backlog
		d.InUse += r.InUse
		d.Limit += r.Limit
		d.DeadLetters += r.DeadLetters
	}
	slices.SortFunc(order, func(a, b *tenantSum) int {
		return cmp.Or(cmp.Compare(b.backlog, a.backlog), cmp.Compare(b.dead, a.dead),
			cmp.Compare(b.inUse, a.inUse), cmp.Compare(a.name, b.name))
	})
	rank := make(map[string]int, len(order))
	for i, t := range order {
		rank[t.name] = i
	}

	snap := Snapshot{Tenants: len(order), Rows: []TenantRow{}, Throughput: throughput}
	for _, r := range rows {
		if rank[r.Tenant] < topK {
			snap.Rows = append(snap.Rows, tenantRow(r))
			continue
		}
		if snap.Other == nil {
			snap.Other = &OtherRow{Tenants: len(order) - topK}
		}
		o := snap.Other
		o.Pairs++
		o.Backlog += r.Backlog
		o.OldestAgeSeconds = max(o.OldestAgeSeconds, r.OldestAge.Seconds())
		o.InUse += r.InUse
		o.Limit += r.Limit
		o.DeadLetters += r.DeadLetters
	}
	slices.SortStableFunc(snap.Rows, func(a, b TenantRow) int {
		return cmp.Or(cmp.Compare(rank[a.Tenant], rank[b.Tenant]), cmp.Compare(a.Dest, b.Dest))
	})

	for _, s := range dests {
		d := destRows[s.Dest]
		if d == nil {
			d = &DestRow{Dest: s.Dest}
			destRows[s.Dest] = d
		}
		d.Stats = &s
	}
	snap.Dests = []DestRow{}
	for _, d := range destRows {
		snap.Dests = append(snap.Dests, *d)
	}
	slices.SortFunc(snap.Dests, func(a, b DestRow) int { return cmp.Compare(a.Dest, b.Dest) })
	return snap
}

func tenantRow(r status.Row) TenantRow {
	return TenantRow{
		Tenant: r.Tenant, Dest: r.Dest, Backlog: r.Backlog, OldestAgeSeconds: r.OldestAge.Seconds(),
		InUse: r.InUse, Limit: r.Limit, Weight: r.Weight, Paused: r.Paused,
		DeadLetters: r.DeadLetters, Reason: r.Reason,
	}
}
