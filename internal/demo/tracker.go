package demo

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/fairwayhq/fairway/internal/sink"
)

// Tracker counts what the sinks applied, per tenant and destination, and
// the end-to-end latency (event stored in PRODUCTS → applied) per tenant.
type Tracker struct {
	mu      sync.Mutex
	now     func() time.Time
	applied map[[2]string]int64 // (tenant, dest) → events applied
	total   map[string]int64    // dest → events applied
	lat     map[string]*reservoir
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker {
	return &Tracker{now: time.Now, applied: map[[2]string]int64{}, total: map[string]int64{}, lat: map[string]*reservoir{}}
}

// Wrap returns s reporting every applied record to t.
func (t *Tracker) Wrap(s sink.Sink) sink.Sink { return &trackedSink{Sink: s, t: t} }

type trackedSink struct {
	sink.Sink
	t *Tracker
}

// Unwrap lets the runner classify with the tracked sink's own rows
// (sink.Wrapper).
func (s *trackedSink) Unwrap() sink.Sink { return s.Sink }

func (s *trackedSink) Apply(ctx context.Context, batch []sink.Record) ([]error, error) {
	errs, err := s.Sink.Apply(ctx, batch)
	if err != nil {
		return errs, err
	}
	now := s.t.now()
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	for i, r := range batch {
		if errs != nil && errs[i] != nil {
			continue
		}
		s.t.applied[[2]string{r.Event.Tenant, s.Name()}]++
		s.t.total[s.Name()]++
		res := s.t.lat[r.Event.Tenant]
		if res == nil {
			res = &reservoir{}
			s.t.lat[r.Event.Tenant] = res
		}
		res.add(now.Sub(r.PublishedAt))
	}
	return errs, nil
}

// Applied returns the events applied for tenant in dest.
func (t *Tracker) Applied(tenant, dest string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.applied[[2]string{tenant, dest}]
}

// Total returns the events applied in dest, all tenants together. Like
// Applied, it counts an event applied twice (a redelivered work item)
// twice.
func (t *Tracker) Total(dest string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total[dest]
}

// Latency returns p50 and p99 of tenant's recent end-to-end latencies
// (the last reservoirSize applied events) and how many were applied in all.
func (t *Tracker) Latency(tenants ...string) (p50, p99 time.Duration, n int64) {
	t.mu.Lock()
	var all []time.Duration
	for _, tn := range tenants {
		if r := t.lat[tn]; r != nil {
			all = append(all, r.recent()...)
			n += r.n
		}
	}
	t.mu.Unlock()
	if len(all) == 0 {
		return 0, 0, n
	}
	slices.Sort(all)
	return all[len(all)*50/100], all[min(len(all)-1, len(all)*99/100)], n
}

const reservoirSize = 4096

// reservoir keeps the last reservoirSize samples.
type reservoir struct {
	buf [reservoirSize]time.Duration
	n   int64
}

func (r *reservoir) add(d time.Duration) {
	r.buf[r.n%reservoirSize] = d
	r.n++
}

func (r *reservoir) recent() []time.Duration {
	return slices.Clone(r.buf[:min(r.n, reservoirSize)])
}
