package dashboard

import (
	"cmp"
	"slices"
	"time"

	"github.com/fairwayhq/fairway/internal/status"
)

// Snapshot is what GET /ui/api/status returns and the page shows: one page
// of tenants and every destination.
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
	// Filter is the Query.Filter the tenants were filtered by, "" for
	// none; Matched is how many tenants it keeps.
	Filter  string `json:"filter,omitempty"`
	Matched int    `json:"matched"`
	// Page is the page served, from 1; Pages is how many there are (at
	// least 1); PageSize is the most tenants a page has.
	Page     int `json:"page"`
	Pages    int `json:"pages"`
	PageSize int `json:"page_size"`
	// Rows are the (tenant, destination) rows of the page's tenants: the
	// matching tenants ranked by backlog (then dead letters, slots in use,
	// name), PageSize of them from the (Page-1)*PageSize-th, each tenant's
	// rows by destination.
	Rows []TenantRow `json:"rows"`
	// Partitions are PRODUCTS' partitions, the dispatcher reading each
	// and their backlog (status.Source.Partitions), in an admin's view
	// when the status source tells them.
	Partitions []status.Partition `json:"partitions,omitempty"`
	// MaxBacklog is the largest backlog of one (tenant, destination) among
	// every tenant of the view: the page scales its backlog bars to it,
	// the same on every page and with any filter.
	MaxBacklog uint64 `json:"max_backlog"`

	// Dests has one entry per destination seen in the rows or the metrics,
	// by name.
	Dests []DestRow `json:"dests"`
	// Throughput is false when no DestSource is wired: every destination's
	// throughput and latency are "no data".
	Throughput bool `json:"throughput"`
	// Partners is true when the dashboard has a PartnerSource: the page
	// offers a tenant's partners (GET /ui/api/partners).
	Partners bool `json:"partners"`
	// MetricsSources says how the last read of each sink metrics source
	// went; an admin's view only (it names internal addresses).
	MetricsSources []SourceState `json:"metrics_sources,omitempty"`
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
	// Expiring: the oldest waiting event leaves PRODUCTS (MaxAge) in
	// ExpiresInSeconds (status.Row.Expiring).
	Expiring         bool    `json:"expiring,omitempty"`
	ExpiresInSeconds float64 `json:"expires_in_seconds,omitempty"`
	// Replaying: a replay runs in the pair's replay lane, with ReplayLeft
	// events left and ReplayInUse of its ReplaySlots slots held.
	Replaying   bool   `json:"replaying,omitempty"`
	ReplayLeft  uint64 `json:"replay_left,omitempty"`
	ReplayInUse int    `json:"replay_in_use,omitempty"`
	ReplaySlots int    `json:"replay_slots,omitempty"`
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

// ranking is one read's rows by tenant, the tenants ranked by backlog,
// with the destination totals: what every page of that read is cut from.
type ranking struct {
	tenants    []rankedTenant
	dests      map[string]*DestRow
	maxBacklog uint64
}

type rankedTenant struct {
	name          string
	backlog, dead uint64
	inUse         int
	rows          []status.Row // by destination
}

// rank groups rows by tenant and ranks the tenants by total backlog, then
// dead letters, slots in use and name.
func rank(rows []status.Row) ranking {
	r := ranking{dests: map[string]*DestRow{}}
	byTenant := map[string]int{}
	// Rows arrive ordered by tenant; do not rely on it.
	for _, row := range rows {
		i, ok := byTenant[row.Tenant]
		if !ok {
			i = len(r.tenants)
			byTenant[row.Tenant] = i
			r.tenants = append(r.tenants, rankedTenant{name: row.Tenant})
		}
		t := &r.tenants[i]
		t.backlog += row.Backlog
		t.dead += row.DeadLetters
		t.inUse += row.InUse
		t.rows = append(t.rows, row)
		r.maxBacklog = max(r.maxBacklog, row.Backlog)

		d := r.dests[row.Dest]
		if d == nil {
			d = &DestRow{Dest: row.Dest}
			r.dests[row.Dest] = d
		}
		d.Tenants++
		d.Backlog += row.Backlog
		d.InUse += row.InUse
		d.Limit += row.Limit
		d.DeadLetters += row.DeadLetters
	}
	slices.SortFunc(r.tenants, func(a, b rankedTenant) int {
		return cmp.Or(cmp.Compare(b.backlog, a.backlog), cmp.Compare(b.dead, a.dead),
			cmp.Compare(b.inUse, a.inUse), cmp.Compare(a.name, b.name))
	})
	for _, t := range r.tenants {
		slices.SortFunc(t.rows, func(a, b status.Row) int { return cmp.Compare(a.Dest, b.Dest) })
	}
	return r
}

// destRows returns the destination totals with their throughput and
// latency from stats, by name.
func (r ranking) destRows(stats []DestStats) []DestRow {
	byName := make(map[string]DestRow, len(r.dests)+len(stats))
	for name, d := range r.dests {
		byName[name] = *d
	}
	for _, s := range stats {
		d := byName[s.Dest]
		d.Dest, d.Stats = s.Dest, &s
		byName[s.Dest] = d
	}
	out := make([]DestRow, 0, len(byName))
	for _, d := range byName {
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b DestRow) int { return cmp.Compare(a.Dest, b.Dest) })
	return out
}

// page fills snap's tenant fields with the page q asks for.
func (r ranking) page(snap *Snapshot, q Query, pageSize int) {
	matched := r.tenants
	if q.Filter != "" {
		matched = make([]rankedTenant, 0, len(r.tenants))
		for _, t := range r.tenants {
			if q.matches(t.name) {
				matched = append(matched, t)
			}
		}
	}
	pages := max(1, (len(matched)+pageSize-1)/pageSize)
	page := min(max(q.Page, 1), pages)
	from := min((page-1)*pageSize, len(matched))
	to := min(from+pageSize, len(matched))

	snap.Tenants, snap.Filter, snap.Matched = len(r.tenants), q.Filter, len(matched)
	snap.Page, snap.Pages, snap.PageSize = page, pages, pageSize
	snap.MaxBacklog = r.maxBacklog
	snap.Rows = []TenantRow{}
	for _, t := range matched[from:to] {
		for _, row := range t.rows {
			snap.Rows = append(snap.Rows, tenantRow(row))
		}
	}
}

func tenantRow(r status.Row) TenantRow {
	return TenantRow{
		Tenant: r.Tenant, Dest: r.Dest, Backlog: r.Backlog, OldestAgeSeconds: r.OldestAge.Seconds(),
		InUse: r.InUse, Limit: r.Limit, Weight: r.Weight, Paused: r.Paused,
		DeadLetters: r.DeadLetters, Reason: r.Reason,
		Expiring: r.Expiring, ExpiresInSeconds: r.ExpiresIn.Seconds(),
		Replaying: r.Replaying, ReplayLeft: r.ReplayLeft, ReplayInUse: r.ReplayInUse, ReplaySlots: r.ReplaySlots,
	}
}
