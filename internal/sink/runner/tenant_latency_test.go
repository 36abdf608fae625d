package runner

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairwayhq/fairway/internal/status"
)

// series returns the tenant labels of dest's series in h, sorted, and
// their samples in all.
func series(t *testing.T, h *prometheus.HistogramVec, dest string) (tenants []string, samples uint64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(h)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["dest"] == dest {
				tenants = append(tenants, labels["tenant"])
				samples += m.GetHistogram().GetSampleCount()
			}
		}
	}
	slices.Sort(tenants)
	return tenants, samples
}

// However many tenants apply events, a destination has at most K+1
// tenant series: the first K to show while there is room, then, each
// minute, the K with the most events in the last one, and "other" for the
// rest. No sample is lost on the way.
func TestTenantLatencyLabelsAreBounded(t *testing.T) {
	t.Parallel()
	const k = 5
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "lat", Buckets: endToEndBuckets}, []string{"dest", "tenant"})
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	l := newTenantLatency(h, "postgres", k, func() time.Time { return now })
	var observed uint64
	observe := func(tenant string, events int) {
		o := l.observer(tenant, events)
		for range events {
			o.Observe(0.1)
			observed++
		}
	}
	// A real tenant named "other" never gets a series of its own.
	observe(status.OtherTenant, 1)
	// 1,000 tenants; tenant i applies i%50+1 events.
	for i := range 1000 {
		observe(fmt.Sprintf("t%03d", i), i%50+1)
	}
	tenants, samples := series(t, h, "postgres")
	if want := []string{"other", "t000", "t001", "t002", "t003", "t004"}; !slices.Equal(tenants, want) {
		t.Errorf("first minute: series %v, want the first %d to show and other: %v", tenants, k, want)
	}
	if samples != observed {
		t.Errorf("%d samples in the series, %d observed", samples, observed)
	}

	// The next minute's first observation ranks the last minute: the
	// busiest are t049, t099, … (50 events each), ties by name.
	now = now.Add(latencyRankWindow)
	observe("t500", 1)
	tenants, _ = series(t, h, "postgres")
	if want := []string{"other", "t049", "t099", "t149", "t199", "t249"}; !slices.Equal(tenants, want) {
		t.Errorf("after a minute: series %v, want the %d busiest and other: %v", tenants, k, want)
	}
	// A quiet minute for everyone but two: they stay, the rest make room
	// for the first tenants to show.
	observe("t049", 3)
	observe("t099", 2)
	now = now.Add(latencyRankWindow)
	for _, tenant := range []string{"t700", "t701", "t702", "t703"} {
		observe(tenant, 1)
	}
	tenants, _ = series(t, h, "postgres")
	if want := []string{"other", "t049", "t099", "t500", "t700", "t701"}; !slices.Equal(tenants, want) {
		t.Errorf("after a quiet minute: series %v, want %v", tenants, want)
	}
	if len(tenants) > k+1 {
		t.Errorf("%d series, want at most %d", len(tenants), k+1)
	}
}
