package dashboard

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The sink runner metrics the Sampler reads (internal/sink/runner).
const (
	AppliedMetric  = "fairway_sink_applied_events_total" // counter{dest}
	EndToEndMetric = "fairway_sink_end_to_end_seconds"   // histogram{dest}
	destLabel      = "dest"
)

// Defaults and bounds for SamplerConfig.
const (
	SampleIntervalDefault = 2 * time.Second
	SampleIntervalMin     = 100 * time.Millisecond
	WindowDefault         = 10 * time.Minute
	SummaryDefault        = time.Minute
)

// SamplerConfig configures a Sampler. The zero value is valid.
type SamplerConfig struct {
	// Interval is the time between two samples (Run). Default 2s, at least
	// 100ms.
	Interval time.Duration

	// Window is how far back samples are kept: the span of the series the
	// page draws. Default 10m.
	Window time.Duration

	// Summary is the span of the events/s and p95 figures. Default 1m, at
	// most Window.
	Summary time.Duration

	// Logger logs failed gathers. Default: discard.
	Logger *slog.Logger

	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// WithDefaults returns a copy of c (nil is the zero SamplerConfig) with
// defaults filled in.
func (c *SamplerConfig) WithDefaults() *SamplerConfig {
	out := SamplerConfig{}
	if c != nil {
		out = *c
	}
	out.Interval = cmp.Or(out.Interval, SampleIntervalDefault)
	out.Window = cmp.Or(out.Window, WindowDefault)
	out.Summary = cmp.Or(out.Summary, min(SummaryDefault, out.Window))
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	return &out
}

func (c *SamplerConfig) validate() error {
	switch {
	case c.Interval < SampleIntervalMin:
		return fmt.Errorf("%w: sampler Interval %s, want at least %s", ErrConfig, c.Interval, SampleIntervalMin)
	case c.Window < 2*c.Interval:
		return fmt.Errorf("%w: sampler Window %s, want at least two intervals (%s)", ErrConfig, c.Window, 2*c.Interval)
	case c.Summary <= 0 || c.Summary > c.Window:
		return fmt.Errorf("%w: sampler Summary %s, want more than 0 and at most Window %s", ErrConfig, c.Summary, c.Window)
	}
	return nil
}

// DestStats are one destination's throughput and end-to-end latency.
type DestStats struct {
	Dest string `json:"dest"`
	// EventsPerSecond is the rate of applied events over the last Summary.
	EventsPerSecond float64 `json:"events_per_second"`
	// P95Seconds is the 95th percentile of end-to-end latency (event stored
	// in PRODUCTS → applied) over the last Summary, interpolated within
	// histogram buckets; nil when nothing was applied then.
	P95Seconds *float64 `json:"p95_seconds"`
	// Applied is the events applied over the whole window.
	Applied float64 `json:"applied"`
	// SummarySeconds and WindowSeconds are the spans actually covered,
	// shorter than configured while the sampler is young.
	SummarySeconds float64 `json:"summary_seconds"`
	WindowSeconds  float64 `json:"window_seconds"`
	// Series has one point per sample interval over the window, oldest
	// first.
	Series []Point `json:"series"`
}

// Point is one sample interval of a destination.
type Point struct {
	At              time.Time `json:"at"`
	EventsPerSecond float64   `json:"events_per_second"`
	P95Seconds      *float64  `json:"p95_seconds"` // nil: nothing applied
}

// Sampler keeps a ring of samples of the sink metrics in a Gatherer and
// turns their differences into per-destination rates and latency
// percentiles. Create it with NewSampler; Run samples every Interval, or
// call Sample. It is safe for concurrent use.
type Sampler struct {
	cfg *SamplerConfig
	g   prometheus.Gatherer

	mu      sync.Mutex
	samples []sample // oldest first, spanning at most Window
}

var _ DestSource = (*Sampler)(nil)

type sample struct {
	at    time.Time
	dests map[string]destSample
}

// destSample is one destination's cumulative values at a sample.
type destSample struct {
	applied float64
	bounds  []float64 // histogram upper bounds, ascending, without +Inf
	cum     []float64 // cumulative counts per bound, then the total (+Inf)
}

// NewSampler returns a Sampler reading g (the registry the sink runners
// register on).
func NewSampler(g prometheus.Gatherer, cfg *SamplerConfig) (*Sampler, error) {
	if g == nil {
		return nil, fmt.Errorf("%w: sampler needs a Gatherer", ErrConfig)
	}
	c := cfg.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Sampler{cfg: c, g: g}, nil
}

// Run samples at once and then every Interval until ctx ends; it returns
// nil then. A failed gather is logged and skipped.
func (s *Sampler) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		if err := s.Sample(); err != nil {
			s.cfg.Logger.Warn("dashboard sampler", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sample gathers the metrics once and records them at Now.
func (s *Sampler) Sample() error {
	mfs, err := s.g.Gather()
	// Gather returns what it could alongside an error; use it.
	cur := sample{at: s.cfg.Now(), dests: map[string]destSample{}}
	for _, mf := range mfs {
		name := mf.GetName()
		if name != AppliedMetric && name != EndToEndMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			dest := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == destLabel {
					dest = l.GetValue()
				}
			}
			if dest == "" {
				continue
			}
			ds := cur.dests[dest]
			if name == AppliedMetric {
				ds.applied += m.GetCounter().GetValue()
			} else if h := m.GetHistogram(); h != nil && ds.cum == nil {
				for _, b := range h.GetBucket() {
					if math.IsInf(b.GetUpperBound(), +1) {
						continue
					}
					ds.bounds = append(ds.bounds, b.GetUpperBound())
					ds.cum = append(ds.cum, float64(b.GetCumulativeCount()))
				}
				ds.cum = append(ds.cum, float64(h.GetSampleCount()))
			}
			cur.dests[dest] = ds
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Keep Window plus one sample before it, so a full Window of
	// differences remains. Samples from a clock that went back are dropped.
	s.samples = slices.DeleteFunc(s.samples, func(x sample) bool { return !x.at.Before(cur.at) })
	s.samples = append(s.samples, cur)
	cut := 0
	for cut < len(s.samples)-2 && cur.at.Sub(s.samples[cut+1].at) >= s.cfg.Window {
		cut++
	}
	s.samples = slices.Delete(s.samples, 0, cut)
	if err != nil {
		return fmt.Errorf("gather metrics: %w", err)
	}
	return nil
}

// DestStats returns each destination's figures, by name. A destination
// appears once it has a metric; before two samples exist there are no
// figures at all.
func (s *Sampler) DestStats() []DestStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.samples)
	if n < 2 {
		return nil
	}
	newest, oldest := s.samples[n-1], s.samples[0]
	// The summary base: the oldest sample within Summary of the newest, or
	// the one before the newest.
	base := n - 2
	for base > 0 && newest.at.Sub(s.samples[base-1].at) <= s.cfg.Summary {
		base--
	}
	names := map[string]bool{}
	for _, x := range s.samples {
		for d := range x.dests {
			names[d] = true
		}
	}
	out := make([]DestStats, 0, len(names))
	for dest := range names {
		st := DestStats{
			Dest:           dest,
			SummarySeconds: newest.at.Sub(s.samples[base].at).Seconds(),
			WindowSeconds:  newest.at.Sub(oldest.at).Seconds(),
			Series:         make([]Point, 0, n-1),
		}
		applied, p95 := diff(s.samples[base], newest, dest)
		st.EventsPerSecond = applied / st.SummarySeconds
		st.P95Seconds = p95
		for i := 1; i < n; i++ {
			a, p := diff(s.samples[i-1], s.samples[i], dest)
			st.Applied += a
			st.Series = append(st.Series, Point{At: s.samples[i].at,
				EventsPerSecond: a / s.samples[i].at.Sub(s.samples[i-1].at).Seconds(), P95Seconds: p})
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b DestStats) int { return cmp.Compare(a.Dest, b.Dest) })
	return out
}

// diff returns dest's events applied between samples a and b and the p95
// of their end-to-end latency (nil if none). A destination missing from a
// counts from zero; a counter that went down (a restarted registry) counts
// from zero too.
func diff(a, b sample, dest string) (applied float64, p95 *float64) {
	x, y := a.dests[dest], b.dests[dest]
	applied = y.applied - x.applied
	if applied < 0 {
		applied = y.applied
	}
	if y.cum == nil {
		return applied, nil
	}
	delta := slices.Clone(y.cum)
	if slices.Equal(x.bounds, y.bounds) && len(x.cum) == len(y.cum) && x.cum[len(x.cum)-1] <= y.cum[len(y.cum)-1] {
		for i := range delta {
			delta[i] -= x.cum[i]
		}
	}
	if q, ok := quantile(0.95, y.bounds, delta); ok {
		return applied, &q
	}
	return applied, nil
}

// quantile estimates the q-quantile of a histogram as Prometheus's
// histogram_quantile does: linear interpolation inside the bucket holding
// the rank, the first bucket starting at 0, and the highest finite bound
// when the rank falls in the +Inf bucket. cum holds the cumulative count at
// each bound and then the total. ok is false for an empty histogram.
func quantile(q float64, bounds, cum []float64) (v float64, ok bool) {
	if len(cum) != len(bounds)+1 || len(bounds) == 0 {
		return 0, false
	}
	total := cum[len(cum)-1]
	if total <= 0 {
		return 0, false
	}
	rank := q * total
	i, _ := slices.BinarySearch(cum, rank) // first with cum[i] >= rank
	if i >= len(bounds) {
		return bounds[len(bounds)-1], true
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = bounds[i-1], cum[i-1]
	} else if bounds[0] <= 0 {
		return bounds[0], true
	}
	in := cum[i] - below
	if in <= 0 {
		return bounds[i], true
	}
	return lower + (bounds[i]-lower)*(rank-below)/in, true
}
