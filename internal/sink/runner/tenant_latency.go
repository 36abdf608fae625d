package runner

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairwayhq/fairway/internal/status"
)

// latencyRankWindow is how often the tenants with a latency series of
// their own are chosen again, by the events applied since.
const latencyRankWindow = time.Minute

// tenantLatency is fairway_sink_tenant_end_to_end_seconds of one
// destination with a bounded tenant label, in the way of status.Exporter's
// backlog gauges: at most Config.LatencyTopK tenants have a series of
// their own and the rest share tenant="other" (status.OtherTenant), so a
// destination never has more than LatencyTopK+1 series whatever the
// number of tenants. The tenants are those with the most events applied
// in the last latencyRankWindow; until the first window ends, and while
// there is room, a tenant gets its series when it first shows. A tenant
// that falls out of the top loses its series (deleted, as the exporter
// deletes its gauges); a real tenant named "other" is always counted in
// "other".
type tenantLatency struct {
	hist *prometheus.HistogramVec // {dest, tenant}
	dest string
	k    int
	now  func() time.Time

	mu     sync.Mutex
	listed map[string]prometheus.Observer // tenants with a series of their own
	other  prometheus.Observer
	volume map[string]int // events applied per tenant since since
	since  time.Time
}

func newTenantLatency(hist *prometheus.HistogramVec, dest string, k int, now func() time.Time) *tenantLatency {
	return &tenantLatency{hist: hist, dest: dest, k: k, now: now,
		listed: map[string]prometheus.Observer{}, other: hist.WithLabelValues(dest, status.OtherTenant),
		volume: map[string]int{}, since: now()}
}

// observer returns the histogram of tenant's latencies, and counts n
// events applied for it towards the next ranking.
func (l *tenantLatency) observer(tenant string, n int) prometheus.Observer {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := l.now(); now.Sub(l.since) >= latencyRankWindow || now.Before(l.since) {
		l.rerank(now)
	}
	l.volume[tenant] += n
	if o, ok := l.listed[tenant]; ok {
		return o
	}
	if tenant == status.OtherTenant || len(l.listed) >= l.k {
		return l.other
	}
	o := l.hist.WithLabelValues(l.dest, tenant)
	l.listed[tenant] = o
	return o
}

// rerank lists the k tenants with the most events since the last
// ranking (ties by name) and deletes the series of the others.
func (l *tenantLatency) rerank(now time.Time) {
	type load struct {
		tenant string
		n      int
	}
	ranked := make([]load, 0, len(l.volume))
	for t, n := range l.volume {
		if t != status.OtherTenant {
			ranked = append(ranked, load{t, n})
		}
	}
	slices.SortFunc(ranked, func(a, b load) int { return cmp.Or(cmp.Compare(b.n, a.n), strings.Compare(a.tenant, b.tenant)) })
	top := make(map[string]bool, l.k)
	for _, r := range ranked[:min(l.k, len(ranked))] {
		top[r.tenant] = true
	}
	for t := range l.listed {
		if !top[t] {
			l.hist.DeleteLabelValues(l.dest, t)
			delete(l.listed, t)
		}
	}
	for t := range top {
		if _, ok := l.listed[t]; !ok {
			l.listed[t] = l.hist.WithLabelValues(l.dest, t)
		}
	}
	clear(l.volume)
	l.since = now
}
