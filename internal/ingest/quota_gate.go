package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Quotas holds tenants' ingest quotas and their token buckets, shared by
// every ingest replica. *tenancy.Store implements it.
type Quotas interface {
	Quotas(ctx context.Context) ([]tenancy.Quota, error)
	TakeQuota(ctx context.Context, tenant string, events, bytes int64, clamp bool) (tenancy.QuotaTake, error)
	FirstUndispatched(ctx context.Context, tenant string) (map[events.Priority]uint64, error)
}

// StreamCounter counts a tenant's events of a priority in PRODUCTS from a
// sequence on. *work.Reader implements it.
type StreamCounter interface {
	PendingOf(ctx context.Context, tenant string, p events.Priority, from uint64) (uint64, error)
}

// quotaWaitMin is the shortest pause of an import waiting for its
// tenant's quota.
const quotaWaitMin = 10 * time.Millisecond

// quotaGate decides whether a tenant's events may go in now
// (docs/quotas.md). It keeps every quota in memory, reloaded each
// Config.QuotaRefresh, so a tenant without a quota costs a map read. Rate
// quotas take from the token buckets in PostgreSQL, one statement per
// request or import round, so replicas share them exactly. The backlog
// of a tenant with max_backlog is counted at most once per
// Config.BacklogTTL (a cursor read and a direct get per priority) and grows between
// counts by what this replica stored. A nil *quotaGate lets everything in.
type quotaGate struct {
	store   Quotas
	stream  StreamCounter
	cfg     *Config
	log     *slog.Logger
	metrics *Metrics

	mu       sync.RWMutex
	quotas   map[string]tenancy.Quota
	backlogs map[string]*backlogCount // tenants with a max_backlog

	cancel context.CancelFunc
	done   chan struct{}
}

// backlogCount is one tenant's counted backlog; its mutex makes the
// tenant's concurrent requests share one count.
type backlogCount struct {
	mu sync.Mutex
	n  uint64
	at time.Time // when n was counted; zero: not yet
}

// quotaRefusal says which quota refused events and why.
type quotaRefusal struct {
	kind         tenancy.QuotaKind
	value, burst int64
	backlog      uint64        // max_backlog: the events waiting
	wait         time.Duration // until the events may fit
	never        bool          // larger than the burst: they never fit
}

func newQuotaGate(store Quotas, stream StreamCounter, cfg *Config, m *Metrics) *quotaGate {
	return &quotaGate{store: store, stream: stream, cfg: cfg, log: cfg.Logger, metrics: m,
		quotas: map[string]tenancy.Quota{}, backlogs: map[string]*backlogCount{}}
}

// start loads the quotas and reloads them every QuotaRefresh until close.
func (g *quotaGate) start(ctx context.Context) error {
	if g == nil {
		return nil
	}
	if err := g.load(ctx); err != nil {
		return err
	}
	ctx, g.cancel = context.WithCancel(context.WithoutCancel(ctx))
	g.done = make(chan struct{})
	go g.refresh(ctx)
	return nil
}

func (g *quotaGate) close() {
	if g == nil || g.cancel == nil {
		return
	}
	g.cancel()
	<-g.done
}

func (g *quotaGate) refresh(ctx context.Context) {
	defer close(g.done)
	t := time.NewTicker(g.cfg.QuotaRefresh)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := g.load(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			g.log.Warn("reload quotas; the last ones loaded stay in force", "err", err)
			failing = true
		case err == nil && failing:
			g.log.Info("quotas reloaded")
			failing = false
		}
	}
}

func (g *quotaGate) load(ctx context.Context) error {
	qs, err := g.store.Quotas(ctx)
	if err != nil {
		return fmt.Errorf("load quotas: %w", err)
	}
	m := make(map[string]tenancy.Quota, len(qs))
	for _, q := range qs {
		m[q.Tenant] = q
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.quotas = m
	for t := range g.backlogs {
		if m[t].MaxBacklog == 0 {
			delete(g.backlogs, t)
		}
	}
	return nil
}

func (g *quotaGate) quota(tenant string) tenancy.Quota {
	if g == nil {
		return tenancy.Quota{}
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.quotas[tenant]
}

// admit decides whether events events of bytes payload bytes of tenant
// may be stored now, and takes them from its rate quotas if so: nil when
// they may. The backlog is checked first, so a refusal for it takes
// nothing. clamp caps a take at the bursts (imports).
func (g *quotaGate) admit(ctx context.Context, tenant string, events, bytes int64, clamp bool) (*quotaRefusal, error) {
	q := g.quota(tenant)
	if q.Off() {
		return nil, nil
	}
	if q.MaxBacklog > 0 {
		n, err := g.backlog(ctx, tenant)
		if err != nil {
			return nil, err
		}
		if n >= uint64(q.MaxBacklog) {
			return &quotaRefusal{kind: tenancy.QuotaMaxBacklog, value: q.MaxBacklog, backlog: n, wait: g.cfg.BacklogTTL}, nil
		}
	}
	if q.Rated() {
		tk, err := g.store.TakeQuota(ctx, tenant, events, bytes, clamp)
		if err != nil {
			return nil, err
		}
		if tk.Refused != "" {
			return &quotaRefusal{kind: tk.Refused, value: tk.Limit, burst: tk.Burst, wait: tk.Wait, never: tk.Never}, nil
		}
	}
	return nil, nil
}

// stored adds n events this replica stored for tenant to its counted
// backlog, so that requests before the next count see them.
func (g *quotaGate) stored(tenant string, n int) {
	if g == nil || n <= 0 {
		return
	}
	g.mu.RLock()
	b := g.backlogs[tenant]
	g.mu.RUnlock()
	if b != nil {
		b.mu.Lock()
		b.n += uint64(n)
		b.mu.Unlock()
	}
}

// backlog returns tenant's events waiting for its slowest destination,
// counted at most BacklogTTL ago.
func (g *quotaGate) backlog(ctx context.Context, tenant string) (uint64, error) {
	g.mu.RLock()
	b := g.backlogs[tenant]
	g.mu.RUnlock()
	if b == nil {
		g.mu.Lock()
		if b = g.backlogs[tenant]; b == nil {
			b = &backlogCount{}
			g.backlogs[tenant] = b
		}
		g.mu.Unlock()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := g.cfg.Clock()
	if !b.at.IsZero() && now.Sub(b.at) < g.cfg.BacklogTTL {
		return b.n, nil
	}
	firsts, err := g.store.FirstUndispatched(ctx, tenant)
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, p := range events.Priorities {
		m, err := g.stream.PendingOf(ctx, tenant, p, firsts[p])
		if err != nil {
			return 0, fmt.Errorf("backlog of %s: %w", tenant, err)
		}
		n += m
	}
	b.n, b.at = n, now
	return n, nil
}

// chunkLimits bounds an import round of tenant by its bursts, so that a
// round fits its token buckets.
func (g *quotaGate) chunkLimits(tenant string, rows, bytes int) (int, int) {
	q := g.quota(tenant)
	if q.EventsPerSec > 0 && q.EventsBurst < int64(rows) {
		rows = int(max(q.EventsBurst, 1))
	}
	if q.BytesPerSec > 0 && q.BytesBurst < int64(bytes) {
		bytes = int(max(q.BytesBurst, 1))
	}
	return rows, bytes
}

// wait blocks an import round until tenant's quotas let it in, and takes
// it. One wait lasts at most UploadTimeout: a quota that stays shut that
// long (a backlog that does not drain) fails the import with
// ErrQuotaWait.
func (g *quotaGate) wait(ctx context.Context, tenant string, events, bytes int64) error {
	if g == nil {
		return nil
	}
	start := g.cfg.Clock()
	for {
		ref, err := g.admit(ctx, tenant, events, bytes, true)
		if err != nil {
			return err
		}
		waited := g.cfg.Clock().Sub(start)
		if ref == nil {
			g.metrics.ImportQuotaWait.Add(waited.Seconds())
			return nil
		}
		if waited >= g.cfg.UploadTimeout {
			g.metrics.ImportQuotaWait.Add(waited.Seconds())
			return fmt.Errorf("%w: waited %s for tenant %s's %s quota (%s)", ErrQuotaWait, g.cfg.UploadTimeout, tenant, ref.kind, ref.describe())
		}
		t := time.NewTimer(min(max(ref.wait, quotaWaitMin), g.cfg.UploadTimeout-waited))
		select {
		case <-ctx.Done():
			t.Stop()
			g.metrics.ImportQuotaWait.Add(g.cfg.Clock().Sub(start).Seconds())
			return ctx.Err()
		case <-t.C:
		}
	}
}

// describe says the refusing quota's setting.
func (r *quotaRefusal) describe() string {
	switch r.kind {
	case tenancy.QuotaEventsPerSec:
		return fmt.Sprintf("%d events/s, burst %d", r.value, r.burst)
	case tenancy.QuotaBytesPerSec:
		return fmt.Sprintf("%d bytes/s, burst %d", r.value, r.burst)
	default:
		return fmt.Sprintf("%d events waiting, cap %d", r.backlog, r.value)
	}
}
