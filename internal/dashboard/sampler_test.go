package dashboard

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestQuantile(t *testing.T) {
	t.Parallel()
	bounds := []float64{0.1, 0.5, 1}
	for _, tc := range []struct {
		name   string
		cum    []float64
		q      float64
		want   float64
		wantOK bool
	}{
		{"empty", []float64{0, 0, 0, 0}, 0.95, 0, false},
		{"all in first bucket interpolates from 0", []float64{100, 100, 100, 100}, 0.95, 0.095, true},
		{"rank in second bucket", []float64{50, 100, 100, 100}, 0.95, 0.1 + 0.4*(95-50)/50.0, true},
		{"rank in +Inf bucket gives highest bound", []float64{0, 0, 0, 10}, 0.95, 1, true},
		{"median at a bucket edge", []float64{5, 10, 10, 10}, 0.5, 0.1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := quantile(tc.q, bounds, tc.cum)
			if ok != tc.wantOK || math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("quantile(%v, %v) = %v, %v; want %v, %v", tc.q, tc.cum, got, ok, tc.want, tc.wantOK)
			}
		})
	}
	if _, ok := quantile(0.95, nil, []float64{3}); ok {
		t.Error("no bounds must be no data")
	}
}

// sinkMetrics registers the two series the sink runner exports, with its
// names, labels and buckets.
func sinkMetrics(t *testing.T) (*prometheus.Registry, *prometheus.CounterVec, *prometheus.HistogramVec) {
	t.Helper()
	reg := prometheus.NewRegistry()
	applied := prometheus.NewCounterVec(prometheus.CounterOpts{Name: AppliedMetric}, []string{"dest"})
	e2e := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: EndToEndMetric,
		Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 14)}, []string{"dest"})
	reg.MustRegister(applied, e2e, prometheus.NewCounter(prometheus.CounterOpts{Name: "unrelated_total"}))
	return reg, applied, e2e
}

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func TestSamplerRatesAndP95(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg, applied, e2e := sinkMetrics(t)
	clock := &fakeClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	s, err := NewSampler(&SamplerConfig{Interval: 2 * time.Second, Window: 10 * time.Second, Summary: 4 * time.Second, Now: clock.now},
		Registry("in-process", reg))
	if err != nil {
		t.Fatal(err)
	}
	// Events applied before the sampler started are no throughput.
	applied.WithLabelValues("postgres").Add(1000)
	e2e.WithLabelValues("postgres").Observe(30)
	if err := s.Sample(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.DestStats(); got != nil {
		t.Fatalf("one sample gave figures: %+v", got)
	}

	step := func(pg, ch int, lat float64) {
		t.Helper()
		clock.advance(2 * time.Second)
		applied.WithLabelValues("postgres").Add(float64(pg))
		for range pg {
			e2e.WithLabelValues("postgres").Observe(lat)
		}
		if ch > 0 { // clickhouse appears only now: it counts from zero
			applied.WithLabelValues("clickhouse").Add(float64(ch))
		}
		if err := s.Sample(ctx); err != nil {
			t.Fatal(err)
		}
	}
	step(20, 0, 0.1)
	step(40, 6, 0.1)
	stats := s.DestStats()
	if len(stats) != 2 || stats[0].Dest != "clickhouse" || stats[1].Dest != "postgres" {
		t.Fatalf("stats %+v", stats)
	}
	pg, ch := stats[1], stats[0]
	if pg.EventsPerSecond != 15 || pg.Applied != 60 || pg.SummarySeconds != 4 || pg.WindowSeconds != 4 {
		t.Errorf("postgres %+v, want 15 events/s over 4 s, 60 applied", pg)
	}
	// 0.1 s is in the bucket (0.078125, 0.1953125]: p95 interpolates in it,
	// and the 30 s observation from before the start does not count.
	if pg.P95Seconds == nil || *pg.P95Seconds < 0.078 || *pg.P95Seconds > 0.196 {
		t.Errorf("postgres p95 %v, want within (0.078, 0.196]", pg.P95Seconds)
	}
	if len(pg.Series) != 2 || pg.Series[0].EventsPerSecond != 10 || pg.Series[1].EventsPerSecond != 20 {
		t.Errorf("postgres series %+v", pg.Series)
	}
	if ch.EventsPerSecond != 1.5 || ch.P95Seconds != nil || ch.Series[0].EventsPerSecond != 0 {
		t.Errorf("clickhouse %+v, want 1.5 events/s and no latency", ch)
	}

	// The window slides: after 10 s more of idle time, nothing recent.
	for range 5 {
		step(0, 0, 0)
	}
	pg = s.DestStats()[1]
	if pg.EventsPerSecond != 0 || pg.P95Seconds != nil || pg.Applied != 0 || pg.WindowSeconds != 10 || len(pg.Series) != 5 {
		t.Errorf("after the window: %+v", pg)
	}
}

// failing is a collector whose collection fails.
type failing struct{ desc *prometheus.Desc }

func (f failing) Describe(ch chan<- *prometheus.Desc) { ch <- f.desc }
func (f failing) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(f.desc, errors.New("boom"))
}

func TestSamplerConfig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := NewSampler(nil); !errors.Is(err, ErrConfig) {
		t.Errorf("no source: %v", err)
	}
	if _, err := NewSampler(nil, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("nil source: %v", err)
	}
	for _, c := range []SamplerConfig{
		{Interval: time.Millisecond},
		{Interval: time.Second, Window: time.Second},
		{Summary: time.Hour},
		{Timeout: -time.Second},
	} {
		if _, err := NewSampler(&c, Registry("r", prometheus.NewRegistry())); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	reg, applied, _ := sinkMetrics(t)
	reg.MustRegister(failing{prometheus.NewDesc("failing", "", nil, nil)})
	applied.WithLabelValues("postgres").Add(3)
	s, err := NewSampler(nil, Registry("r", reg))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Sample(ctx); err == nil {
		t.Error("a failed gather must be reported")
	}
	s.samples[0].at = s.samples[0].at.Add(-time.Second)
	applied.WithLabelValues("postgres").Add(3)
	_ = s.Sample(ctx)
	if st := s.DestStats(); len(st) != 1 || st[0].Applied != 3 {
		t.Errorf("what a partly failed gather returned must still count: %+v", st)
	}
}
