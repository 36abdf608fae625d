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

	"github.com/fairwayhq/fairway/internal/bearer"
	"github.com/fairwayhq/fairway/internal/status"
	"github.com/fairwayhq/fairway/pkg/events"
)

// Defaults and bounds for Config.
const (
	PageSizeDefault = 50
	PageSizeMax     = 1000
	RefreshDefault  = 2 * time.Second
	RefreshMin      = 200 * time.Millisecond
	TimeoutDefault  = 10 * time.Second
)

// Path is where Dashboard serves the page; mount it with
// mux.Handle(dashboard.Path+"/", d) (and Path itself, which redirects).
const Path = "/ui"

// StatusSource gives the status of every (tenant, destination);
// *status.Source is one.
type StatusSource interface {
	Rows(ctx context.Context, tenant string) ([]status.Row, error)
}

// PartitionSource gives the partitions of PRODUCTS from the status rows;
// *status.Source is one. A StatusSource that is one has its partitions
// shown to admins.
type PartitionSource interface {
	Partitions(ctx context.Context, rows []status.Row) (events.Layout, []status.Partition, error)
}

// DestSource gives per-destination throughput and latency; *Sampler is one.
type DestSource interface {
	DestStats() []DestStats
	// Sources says how the last read of each place the figures come from
	// went.
	Sources() []SourceState
}

// Deps are what the dashboard reads.
type Deps struct {
	// Status gives the tenant rows. Required.
	Status StatusSource
	// Dests gives throughput and latency per destination. Optional: without
	// it the page shows "no data" for them.
	Dests DestSource
	// Partners gives the delivery log summary of each B2B partner of a
	// tenant, served at GET /ui/api/partners; *b2b.Registry is one.
	// Optional: without it the page shows no partners.
	Partners PartnerSource
	// Tokens, when set, makes the JSON API (GET /ui/api/status and
	// /ui/api/partners) require a bearer token that it verifies on every
	// request: an admin token sees every tenant; a tenant token sees a view
	// of that tenant alone (TenantSnapshot, its own partners). Without it
	// the API answers anyone with every tenant. The page and its files are
	// served to anyone either way: they hold no data.
	Tokens bearer.Verifier
}

// Config configures a Dashboard. The zero value is valid.
type Config struct {
	// PageSize is the most tenants one page lists (GET /ui/api/status
	// answers one page at a time). Default 50, at most 1000.
	PageSize int

	// Refresh is how often the page polls, and the shortest time from the
	// end of one read of the status source to the start of the next:
	// concurrent viewers, and every page and filter, share one read.
	// Default 2s, at least 200ms.
	Refresh time.Duration

	// Timeout bounds one read of the status source, and of the partner
	// source. Default 10s.
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
	out.PageSize = cmp.Or(out.PageSize, PageSizeDefault)
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
	case c.PageSize < 1 || c.PageSize > PageSizeMax:
		return fmt.Errorf("%w: PageSize %d, want 1..%d", ErrConfig, c.PageSize, PageSizeMax)
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
	cfg      *Config
	status   StatusSource
	dests    DestSource
	partners PartnerSource
	tokens   bearer.Verifier
	mux      *http.ServeMux

	mu   sync.Mutex // serializes reads: viewers share one per Refresh
	last statusRead
}

// statusRead is one read of the sources, shared by the viewers of one
// Refresh: the rows, ranked, and what every admin's Snapshot of it has
// whatever the page (base).
type statusRead struct {
	at      time.Time
	rows    []status.Row
	ranking ranking
	err     error
	base    Snapshot
	valid   bool
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
	d := &Dashboard{cfg: c, status: deps.Status, dests: deps.Dests, partners: deps.Partners, tokens: deps.Tokens, mux: http.NewServeMux()}
	files, err := fs.Sub(static, "static")
	if err != nil {
		return nil, err
	}
	d.mux.Handle("GET "+Path, http.RedirectHandler(Path+"/", http.StatusFound))
	d.mux.HandleFunc("GET "+Path+"/api/status", d.serveStatus)
	d.mux.HandleFunc("GET "+Path+"/api/partners", d.servePartners)
	d.mux.Handle("GET "+Path+"/", http.StripPrefix(Path, noCache(http.FileServerFS(files))))
	return d, nil
}

// ServeHTTP serves /ui (the page and its files), /ui/api/status and
// /ui/api/partners (which ask for a token when Deps.Tokens is set).
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

// viewer authenticates r when Deps.Tokens is set and returns the tenant
// its token is limited to: "" for an admin token, or for anyone without
// Deps.Tokens. When it fails it has answered r and returns false.
func (d *Dashboard) viewer(w http.ResponseWriter, r *http.Request) (tenant string, ok bool) {
	if d.tokens == nil {
		return "", true
	}
	p, fail := bearer.Authenticate(w, r, d.tokens)
	if fail != nil {
		if fail.Err != nil {
			d.cfg.Logger.Warn("dashboard: verify token", "err", fail.Err)
		}
		writeJSON(w, fail.Status, apiError{Error: fail.Message, Code: fail.Code})
		return "", false
	}
	if p.Admin {
		return "", true
	}
	return p.Tenant, true
}

func (d *Dashboard) serveStatus(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	tenant, ok := d.viewer(w, r)
	if !ok {
		return
	}
	q, err := ParseQuery(r.URL.Query())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: err.Error(), Code: "invalid_query"})
		return
	}
	var snap Snapshot
	if tenant == "" {
		snap, ok = d.Snapshot(r.Context(), q)
	} else {
		snap, ok = d.TenantSnapshot(r.Context(), tenant, q)
	}
	status := http.StatusOK
	if !ok {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, snap)
}

// apiError is the body of a refused request to the JSON API.
type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Snapshot returns what the page shows an admin: every destination and
// the page of tenants q asks for, from a read of the sources made at most
// once per Refresh. ok is false when the status source failed;
// Snapshot.Error says why.
func (d *Dashboard) Snapshot(ctx context.Context, q Query) (snap Snapshot, ok bool) {
	rd := d.read(ctx)
	snap = rd.base
	if rd.err != nil {
		return snap, false
	}
	rd.ranking.page(&snap, q, d.cfg.PageSize)
	return snap, true
}

// TenantSnapshot returns what the page shows tenant's token: the tenant's
// rows alone, with Snapshot.Tenant set. Its counts and destination totals
// are the tenant's own; throughput and latency, which sum every tenant's
// events, are left out, and a failed read says only that it failed (the
// cause may name other tenants; the server logs it). It shares the read of
// the sources with every other viewer.
func (d *Dashboard) TenantSnapshot(ctx context.Context, tenant string, q Query) (snap Snapshot, ok bool) {
	rd := d.read(ctx)
	snap = Snapshot{GeneratedAt: rd.base.GeneratedAt, RefreshMillis: rd.base.RefreshMillis, Tenant: tenant, Partners: rd.base.Partners}
	if rd.err != nil {
		snap.Error = "status unavailable; the server's log says why"
		return snap, false
	}
	var own []status.Row
	for _, r := range rd.rows {
		if r.Tenant == tenant {
			own = append(own, r)
		}
	}
	rk := rank(own)
	snap.Dests = rk.destRows(nil)
	rk.page(&snap, q, d.cfg.PageSize)
	return snap, true
}

// read returns the sources' state, read at most once per Refresh.
func (d *Dashboard) read(ctx context.Context) statusRead {
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.cfg.Now()
	if last := d.last; last.valid && now.Sub(last.at) < d.cfg.Refresh && now.Sub(last.at) >= 0 {
		return last
	}
	// Not the caller's cancellation: other viewers wait for this read.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.Timeout)
	defer cancel()
	rows, err := d.status.Rows(ctx, "")
	// Refresh counts from the end of the read: with many tenants a read
	// takes a while, and pages and filters asked for meanwhile use it.
	rd := statusRead{at: d.cfg.Now(), err: err, valid: true,
		base: Snapshot{GeneratedAt: now, RefreshMillis: d.cfg.Refresh.Milliseconds(), Throughput: d.dests != nil, Partners: d.partners != nil}}
	if err != nil {
		d.cfg.Logger.Warn("dashboard: read status", "err", err)
		rd.base.Error = "read status: " + err.Error()
		d.last = rd
		return rd
	}
	rd.rows, rd.ranking = rows, rank(rows)
	if ps, ok := d.status.(PartitionSource); ok {
		if _, parts, err := ps.Partitions(ctx, rows); err != nil {
			d.cfg.Logger.Warn("dashboard: read partitions", "err", err)
		} else {
			rd.base.Partitions = parts
		}
	}
	var stats []DestStats
	if d.dests != nil {
		stats = d.dests.DestStats()
		rd.base.MetricsSources = d.dests.Sources()
	}
	rd.base.Dests = rd.ranking.destRows(stats)
	d.last = rd
	return rd
}
