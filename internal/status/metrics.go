package status

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults and bounds for ExporterConfig.
const (
	TopKDefault         = 20
	TopKMax             = 1000
	IntervalDefault     = 15 * time.Second
	IntervalMin         = time.Second
	GrowthWindowDefault = time.Minute
	SampleTimeoutMin    = time.Second
)

// OtherTenant is the tenant label of the series that sums every tenant
// outside the top K of a destination. A real tenant named "other" is
// always counted there, never listed by name, so the label stays
// unambiguous.
const OtherTenant = "other"

// ErrConfig is wrapped by NewExporter's errors for an invalid config.
var ErrConfig = errors.New("status: invalid config")

// RowSource gives the status of every (tenant, destination); *Source is
// one.
type RowSource interface {
	Rows(ctx context.Context, tenant string) ([]Row, error)
}

// ExporterConfig configures an Exporter. The zero value is valid.
type ExporterConfig struct {
	// TopK is how many tenants per destination, those with the most
	// backlog, get their own series; the rest are summed under
	// tenant="other". Default 20, at most 1000.
	TopK int
	// Interval is the time between two samples (Run). Each sample reads
	// every (tenant, destination)'s backlog: one PostgreSQL query plus one
	// JetStream direct get per pair. Default 15s, at least 1s.
	Interval time.Duration
	// GrowthWindow is the span over which the backlog growth rate is
	// computed. Default 1m, at least Interval.
	GrowthWindow time.Duration
	// Logger logs failed samples. Default: discard.
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// WithDefaults returns a copy of c (nil is the zero config) with defaults
// filled in.
func (c *ExporterConfig) WithDefaults() *ExporterConfig {
	out := ExporterConfig{}
	if c != nil {
		out = *c
	}
	out.TopK = cmp.Or(out.TopK, TopKDefault)
	out.Interval = cmp.Or(out.Interval, IntervalDefault)
	out.GrowthWindow = cmp.Or(out.GrowthWindow, max(GrowthWindowDefault, out.Interval))
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	return &out
}

func (c *ExporterConfig) validate() error {
	switch {
	case c.TopK < 1 || c.TopK > TopKMax:
		return fmt.Errorf("%w: TopK %d, want 1..%d", ErrConfig, c.TopK, TopKMax)
	case c.Interval < IntervalMin:
		return fmt.Errorf("%w: Interval %s, want at least %s", ErrConfig, c.Interval, IntervalMin)
	case c.GrowthWindow < c.Interval:
		return fmt.Errorf("%w: GrowthWindow %s, want at least Interval %s", ErrConfig, c.GrowthWindow, c.Interval)
	}
	return nil
}

// Exporter turns status rows into Prometheus gauges with bounded
// cardinality: per destination, the TopK tenants by backlog get their own
// series and one tenant="other" series sums the rest, so a destination
// never has more than TopK+1 per-tenant series however many tenants exist.
// Each sample recomputes the top K; the series of a tenant that left it
// are deleted. See docs/metrics.md. Create it with NewExporter.
type Exporter struct {
	cfg *ExporterConfig
	src RowSource

	backlog, inFlight *prometheus.GaugeVec // {dest, tenant}
	depth, growth     *prometheus.GaugeVec // {dest}
	tenants           *prometheus.GaugeVec // {dest}
	errors            prometheus.Counter
	seconds           prometheus.Histogram

	mu     sync.Mutex
	listed map[string]map[string]bool // dest → tenants with series, "other" included
	hist   []depthSample              // oldest first, spanning at most GrowthWindow
}

type depthSample struct {
	at    time.Time
	depth map[string]uint64
}

// NewExporter registers the gauges on reg.
func NewExporter(src RowSource, reg prometheus.Registerer, cfg *ExporterConfig) (*Exporter, error) {
	if src == nil || reg == nil {
		return nil, fmt.Errorf("%w: a RowSource and a Registerer are required", ErrConfig)
	}
	c := cfg.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	e := &Exporter{
		cfg: c, src: src, listed: map[string]map[string]bool{},
		backlog: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fairway_tenant_backlog_events",
			Help: "Events behind the dispatch cursor, for the top-K tenants by backlog of a destination; tenant=\"other\" sums the rest."},
			[]string{"dest", "tenant"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fairway_tenant_in_flight",
			Help: "Slots in use (batches dispatched, not yet released), same tenants as fairway_tenant_backlog_events."},
			[]string{"dest", "tenant"}),
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fairway_backlog_events",
			Help: "Queue depth: events behind the dispatch cursors of every tenant of a destination."}, []string{"dest"}),
		growth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fairway_backlog_growth_events_per_second",
			Help: "Change of fairway_backlog_events per second over the growth window (negative: draining)."}, []string{"dest"}),
		tenants: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fairway_backlog_tenants",
			Help: "Tenants with backlog in a destination."}, []string{"dest"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "fairway_status_sample_errors_total",
			Help: "Status samples that failed (the gauges keep their last values)."}),
		seconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fairway_status_sample_seconds",
			Help: "Duration of one status sample.", Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 10)}),
	}
	for _, col := range []prometheus.Collector{e.backlog, e.inFlight, e.depth, e.growth, e.tenants, e.errors, e.seconds} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("status exporter: %w", err)
		}
	}
	return e, nil
}

// Run samples at once and then every Interval until ctx ends; it returns
// nil then. A failed sample is logged and counted.
func (e *Exporter) Run(ctx context.Context) error {
	t := time.NewTicker(e.cfg.Interval)
	defer t.Stop()
	for {
		sctx, cancel := context.WithTimeout(ctx, max(e.cfg.Interval, SampleTimeoutMin))
		err := e.Sample(sctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			e.cfg.Logger.Warn("status metrics sample", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sample reads the rows once and updates every gauge.
func (e *Exporter) Sample(ctx context.Context) error {
	start := time.Now()
	rows, err := e.src.Rows(ctx, "")
	e.seconds.Observe(time.Since(start).Seconds())
	if err != nil {
		e.errors.Inc()
		return fmt.Errorf("status metrics: %w", err)
	}
	now := e.cfg.Now()
	tops := TopTenants(rows, e.cfg.TopK)
	e.mu.Lock()
	defer e.mu.Unlock()
	depth := make(map[string]uint64, len(tops))
	for dest, top := range tops {
		keep := make(map[string]bool, len(top.Top)+1)
		for _, t := range append(slices.Clip(top.Top), top.Other) {
			keep[t.Tenant] = true
			e.backlog.WithLabelValues(dest, t.Tenant).Set(float64(t.Backlog))
			e.inFlight.WithLabelValues(dest, t.Tenant).Set(float64(t.InFlight))
		}
		for tenant := range e.listed[dest] {
			if !keep[tenant] {
				e.backlog.DeleteLabelValues(dest, tenant)
				e.inFlight.DeleteLabelValues(dest, tenant)
			}
		}
		e.listed[dest] = keep
		e.depth.WithLabelValues(dest).Set(float64(top.Depth))
		e.tenants.WithLabelValues(dest).Set(float64(top.Waiting))
		depth[dest] = top.Depth
	}
	for dest := range e.listed {
		if _, ok := tops[dest]; !ok { // no tenant has this destination any more
			e.backlog.DeletePartialMatch(prometheus.Labels{"dest": dest})
			e.inFlight.DeletePartialMatch(prometheus.Labels{"dest": dest})
			e.depth.DeleteLabelValues(dest)
			e.growth.DeleteLabelValues(dest)
			e.tenants.DeleteLabelValues(dest)
			delete(e.listed, dest)
		}
	}
	e.recordGrowth(now, depth)
	return nil
}

// recordGrowth keeps depth samples over GrowthWindow and sets each
// destination's growth rate from the oldest one that has it. A clock that
// went back drops the newer samples.
func (e *Exporter) recordGrowth(now time.Time, depth map[string]uint64) {
	e.hist = slices.DeleteFunc(e.hist, func(s depthSample) bool { return !s.at.Before(now) })
	e.hist = append(e.hist, depthSample{at: now, depth: depth})
	cut := 0
	for cut < len(e.hist)-1 && now.Sub(e.hist[cut].at) > e.cfg.GrowthWindow {
		cut++
	}
	e.hist = slices.Delete(e.hist, 0, cut)
	for dest, d := range depth {
		for _, old := range e.hist[:len(e.hist)-1] {
			if prev, ok := old.depth[dest]; ok {
				e.growth.WithLabelValues(dest).Set((float64(d) - float64(prev)) / now.Sub(old.at).Seconds())
				break
			}
		}
	}
}

// TenantLoad is one tenant's (or the "other" sum's) load in a destination.
type TenantLoad struct {
	Tenant   string
	Backlog  uint64
	InFlight int
}

// DestTop is one destination's top tenants and the sum of the rest.
type DestTop struct {
	// Top are at most k tenants with backlog or slots in use, the most
	// backlog first (then the most slots in use, then by name).
	Top []TenantLoad
	// Other sums every other tenant (Tenant is OtherTenant); zero when
	// there is none.
	Other TenantLoad
	// Depth is the backlog of every tenant; Waiting counts tenants with
	// backlog.
	Depth   uint64
	Waiting int
}

// TopTenants ranks each destination's tenants by backlog and keeps the
// first k with backlog or slots in use; a tenant named OtherTenant is
// always summed into Other. Top + Other add up to the destination's totals.
func TopTenants(rows []Row, k int) map[string]DestTop {
	byDest := map[string][]TenantLoad{}
	out := map[string]DestTop{}
	for _, r := range rows {
		byDest[r.Dest] = append(byDest[r.Dest], TenantLoad{Tenant: r.Tenant, Backlog: r.Backlog, InFlight: r.InUse + r.ReplayInUse})
	}
	for dest, loads := range byDest {
		slices.SortFunc(loads, func(a, b TenantLoad) int {
			return cmp.Or(cmp.Compare(b.Backlog, a.Backlog), cmp.Compare(b.InFlight, a.InFlight), cmp.Compare(a.Tenant, b.Tenant))
		})
		top := DestTop{Top: []TenantLoad{}, Other: TenantLoad{Tenant: OtherTenant}}
		for _, l := range loads {
			top.Depth += l.Backlog
			if l.Backlog > 0 {
				top.Waiting++
			}
			if len(top.Top) < k && l.Tenant != OtherTenant && (l.Backlog > 0 || l.InFlight > 0) {
				top.Top = append(top.Top, l)
				continue
			}
			top.Other.Backlog += l.Backlog
			top.Other.InFlight += l.InFlight
		}
		out[dest] = top
	}
	return out
}
