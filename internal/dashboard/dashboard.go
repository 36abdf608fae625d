package dashboard

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/fairwayhq/fairway/internal/status"
)

// Defaults and bounds for Config.
const (
	TopKDefault    = 50
	RefreshDefault = 2 * time.Second
	RefreshMin     = 200 * time.Millisecond
	TimeoutDefault = 10 * time.Second
)

// Path is where Dashboard serves the page; mount it with
// mux.Handle(dashboard.Path+"/", d) (and Path itself, which redirects).
const Path = "/ui"

// StatusSource gives the status of every (tenant, destination);
// *status.Source is one.
type StatusSource interface {
	Rows(ctx context.Context, tenant string) ([]status.Row, error)
}

// DestSource gives per-destination throughput and latency; *Sampler is one.
type DestSource interface {
	DestStats() []DestStats
}

// Deps are what the dashboard reads.
type Deps struct {
	// Status gives the tenant rows. Required.
	Status StatusSource
	// Dests gives throughput and latency per destination. Optional: without
	// it the page shows "no data" for them.
	Dests DestSource
}

// Config configures a Dashboard. The zero value is valid.
type Config struct {
	// TopK is how many tenants, those with the most backlog, are listed one
	// by one; the others are summed in one "other" row. Default 50.
	TopK int

	// Refresh is how often the page polls, and the shortest time between
	// two reads of the status source: concurrent viewers share one read.
	// Default 2s, at least 200ms.
	Refresh time.Duration

	// Timeout bounds one read of the status source. Default 10s.
	Timeout time.Duration

	// Logger logs failed status reads. Default: discard.
	Logger *slog.Logger

	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// WithDefaults returns a copy of c (nil is the zero Config) with defaults
// filled in.
func (c *Config) WithDefaults() *Config {
	out := Config{}
	if c != nil {
		out = *c
	}
	out.TopK = cmp.Or(out.TopK, TopKDefault)
	out.Refresh = cmp.Or(out.Refresh, RefreshDefault)
	out.Timeout = cmp.Or(out.Timeout, TimeoutDefault)
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	return &out
}

func (c *Config) validate() error {
	switch {
	case c.TopK < 1:
		return fmt.Errorf("%w: TopK %d, want at least 1", ErrConfig, c.TopK)
	case c.Refresh < RefreshMin:
		return fmt.Errorf("%w: Refresh %s, want at least %s", ErrConfig, c.Refresh, RefreshMin)
	case c.Timeout <= 0:
		return fmt.Errorf("%w: Timeout %s, want more than 0", ErrConfig, c.Timeout)
	}
	return nil
}

//go:embed static
var static embed.FS

// Dashboard is the http.Handler of the page and its JSON snapshot. Create
// it with New.
type Dashboard struct {
	cfg    *Config
	status StatusSource
	dests  DestSource
	mux    *http.ServeMux

	mu     sync.Mutex // serializes reads: viewers share one per Refresh
	last   Snapshot
	lastAt time.Time
	lastOK bool
}

// New returns a Dashboard reading deps.
func New(deps Deps, cfg *Config) (*Dashboard, error) {
	if deps.Status == nil {
		return nil, fmt.Errorf("%w: Deps.Status is required", ErrConfig)
	}
	c := cfg.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	d := &Dashboard{cfg: c, status: deps.Status, dests: deps.Dests, mux: http.NewServeMux()}
	files, err := fs.Sub(static, "static")
	if err != nil {
		return nil, err
	}
	d.mux.Handle("GET "+Path, http.RedirectHandler(Path+"/", http.StatusFound))
	d.mux.HandleFunc("GET "+Path+"/api/status", d.serveStatus)
	d.mux.Handle("GET "+Path+"/", http.StripPrefix(Path, noCache(http.FileServerFS(files))))
	return d, nil
}

// ServeHTTP serves /ui (the page and its files) and /ui/api/status.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; img-src 'self' data:")
	h.Set("Referrer-Policy", "no-referrer")
	d.mux.ServeHTTP(w, r)
}

func noCache(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		h.ServeHTTP(w, r)
	})
}

func (d *Dashboard) serveStatus(w http.ResponseWriter, r *http.Request) {
	snap, ok := d.Snapshot(r.Context())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(snap)
}

// Snapshot returns what the page shows, read at most once per Refresh. ok
// is false when the status source failed; Snapshot.Error says why.
func (d *Dashboard) Snapshot(ctx context.Context) (snap Snapshot, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.cfg.Now()
	if !d.lastAt.IsZero() && now.Sub(d.lastAt) < d.cfg.Refresh && now.Sub(d.lastAt) >= 0 {
		return d.last, d.lastOK
	}
	// Not the caller's cancellation: other viewers wait for this read.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.Timeout)
	defer cancel()
	rows, err := d.status.Rows(ctx, "")
	var dests []DestStats
	if d.dests != nil {
		dests = d.dests.DestStats()
	}
	snap = buildSnapshot(rows, dests, d.dests != nil, d.cfg.TopK)
	snap.GeneratedAt = now
	snap.RefreshMillis = d.cfg.Refresh.Milliseconds()
	if err != nil {
		d.cfg.Logger.Warn("dashboard: read status", "err", err)
		snap = Snapshot{GeneratedAt: now, RefreshMillis: snap.RefreshMillis, Error: "read status: " + err.Error()}
	}
	d.last, d.lastAt, d.lastOK = snap, now, err == nil
	return snap, err == nil
}
