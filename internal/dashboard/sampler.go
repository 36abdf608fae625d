package dashboard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
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
	SampleTimeoutMax      = 5 * time.Second // the longest default Timeout
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

	// Timeout bounds the read of one source. Default Interval, at most 5s.
	Timeout time.Duration

	// Logger logs sources that fail and answer again. Default: discard.
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
	out.Timeout = cmp.Or(out.Timeout, min(out.Interval, SampleTimeoutMax))
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
	case c.Timeout <= 0:
		return fmt.Errorf("%w: sampler Timeout %s, want more than 0", ErrConfig, c.Timeout)
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

// Sampler keeps a ring of samples of the sink runners' metrics, read from
// one or more MetricsSources, and turns their differences into
// per-destination rates and latency percentiles: several sinks processes
// of one destination add up. Create it with NewSampler; Run samples every
// Interval, or call Sample. It is safe for concurrent use.
type Sampler struct {
	cfg     *SamplerConfig
	sources []MetricsSource

	mu      sync.Mutex
	samples []sample      // oldest first, spanning at most Window
	states  []SourceState // per source, how its last read went
}

var _ DestSource = (*Sampler)(nil)

// SourceState is how the last read of one metrics source went.
type SourceState struct {
	Source string `json:"source"`
	// Error is the last read's failure; "" when it answered.
	Error string `json:"error,omitempty"`
	// LastOK is when it last answered; zero if never.
	LastOK time.Time `json:"last_ok,omitzero"`
}

type sample struct {
	at      time.Time
	sources []sourceSample // as Sampler.sources
}

// sourceSample is one source's cumulative values at a sample.
type sourceSample struct {
	// read is false until the source first answered; such a sample is no
	// base for a difference. A failed read carries the previous values.
	read  bool
	dests map[string]destSample
}

// destSample is one destination's cumulative values at a sample.
type destSample struct {
	applied float64
	bounds  []float64 // histogram upper bounds, ascending, without +Inf
	cum     []float64 // cumulative counts per bound, then the total (+Inf)
}

// NewSampler returns a Sampler reading sources.
func NewSampler(cfg *SamplerConfig, sources ...MetricsSource) (*Sampler, error) {
	if len(sources) == 0 {
		return nil, fmt.Errorf("%w: sampler needs a metrics source", ErrConfig)
	}
	for _, src := range sources {
		if src == nil {
			return nil, fmt.Errorf("%w: nil metrics source", ErrConfig)
		}
	}
	c := cfg.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	states := make([]SourceState, len(sources))
	for i, src := range sources {
		states[i] = SourceState{Source: src.Name(), Error: "not read yet"}
	}
	return &Sampler{cfg: c, sources: slices.Clone(sources), states: states}, nil
}

// Run samples at once and then every Interval until ctx ends; it returns
// nil then. A failed read is logged when a source starts or stops
// failing, and skipped.
func (s *Sampler) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	failing := make([]string, len(s.sources))
	for {
		_ = s.Sample(ctx)
		if ctx.Err() != nil {
			return nil
		}
		for i, st := range s.Sources() {
			switch {
			case st.Error != "" && failing[i] == "":
				s.cfg.Logger.Warn("dashboard: read sink metrics", "source", st.Source, "err", st.Error)
			case st.Error == "" && failing[i] != "":
				s.cfg.Logger.Info("dashboard: sink metrics answer again", "source", st.Source)
			}
			failing[i] = st.Error
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sample reads every source once, each bounded by Timeout, and records
// them at Now. A source that fails keeps its previous values; the error
// names every source that failed.
func (s *Sampler) Sample(ctx context.Context) error {
	type read struct {
		mfs []*dto.MetricFamily
		err error
	}
	reads := make([]read, len(s.sources))
	var wg sync.WaitGroup
	for i, src := range s.sources {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
			defer cancel()
			reads[i].mfs, reads[i].err = src.Gather(ctx)
		})
	}
	wg.Wait()
	now := s.cfg.Now()

	s.mu.Lock()
	defer s.mu.Unlock()
	var prev *sample
	if n := len(s.samples); n > 0 {
		prev = &s.samples[n-1]
	}
	cur := sample{at: now, sources: make([]sourceSample, len(s.sources))}
	var errs []error
	for i, rd := range reads {
		if rd.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.sources[i].Name(), rd.err))
			s.states[i].Error = rd.err.Error()
		} else {
			s.states[i].Error = ""
			s.states[i].LastOK = now
		}
		// A registry returns what it could alongside an error; use it.
		// Nothing at all: keep the previous values.
		if rd.err != nil && len(rd.mfs) == 0 {
			if prev != nil {
				cur.sources[i] = prev.sources[i]
			}
			continue
		}
		cur.sources[i] = sourceSample{read: true, dests: destSamples(rd.mfs)}
	}
	// Keep Window plus one sample before it, so a full Window of
	// differences remains. Samples from a clock that went back are dropped.
	s.samples = slices.DeleteFunc(s.samples, func(x sample) bool { return !x.at.Before(cur.at) })
	s.samples = append(s.samples, cur)
	cut := 0
	for cut < len(s.samples)-2 && cur.at.Sub(s.samples[cut+1].at) >= s.cfg.Window {
		cut++
	}
	s.samples = slices.Delete(s.samples, 0, cut)
	if len(errs) > 0 {
		return fmt.Errorf("read sink metrics: %w", errors.Join(errs...))
	}
	return nil
}

// destSamples picks the sink runner series out of mfs, by destination.
func destSamples(mfs []*dto.MetricFamily) map[string]destSample {
	out := map[string]destSample{}
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
			ds := out[dest]
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
			out[dest] = ds
		}
	}
	return out
}

// Sources returns how the last read of each source went, in the order
// given to NewSampler.
func (s *Sampler) Sources() []SourceState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.states)
}

// DestStats returns each destination's figures, by name. A destination
// appears once a source exports it; before two samples exist there are no
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
		for _, src := range x.sources {
			for d := range src.dests {
				names[d] = true
			}
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

// diff returns dest's events applied between samples a and b, summed over
// the sources, and the p95 of their end-to-end latency (nil if none).
func diff(a, b sample, dest string) (applied float64, p95 *float64) {
	var bounds, cum []float64
	for i := range b.sources {
		ap, bo, c := sourceDiff(a.sources[i], b.sources[i], dest)
		applied += ap
		switch {
		case c == nil:
		case cum == nil:
			bounds, cum = bo, c
		case slices.Equal(bounds, bo):
			for j := range cum {
				cum[j] += c[j]
			}
		}
	}
	if q, ok := quantile(0.95, bounds, cum); ok {
		return applied, &q
	}
	return applied, nil
}

// sourceDiff returns what one source says about dest between samples a
// and b: events applied and the end-to-end histogram's bounds and
// cumulative counts of the events in between (nil if it has none). A
// source not read by a has nothing to compare with. A destination missing
// from a counts from zero; a counter that went down (a restarted process)
// counts from zero too.
func sourceDiff(a, b sourceSample, dest string) (applied float64, bounds, cum []float64) {
	if !a.read || !b.read {
		return 0, nil, nil
	}
	x, y := a.dests[dest], b.dests[dest]
	applied = y.applied - x.applied
	if applied < 0 {
		applied = y.applied
	}
	if y.cum == nil {
		return applied, nil, nil
	}
	delta := slices.Clone(y.cum)
	if slices.Equal(x.bounds, y.bounds) && len(x.cum) == len(y.cum) && x.cum[len(x.cum)-1] <= y.cum[len(y.cum)-1] {
		for i := range delta {
			delta[i] -= x.cum[i]
		}
	}
	return applied, y.bounds, delta
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
