package ingest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairwayhq/fairway/internal/bearer"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Tenants verifies bearer tokens and creates tenants on first sight.
// *tenancy.Store implements it.
type Tenants interface {
	bearer.Verifier
	EnsureTenant(ctx context.Context, id string) (tenancy.Tenant, error)
}

// Publisher publishes events and reports one result per event, in order,
// after JetStream acknowledged them. *events.Publisher implements it.
type Publisher interface {
	Publish(ctx context.Context, evs []events.Event) []events.Result
}

// Check reports whether a dependency is usable; /readyz runs them all.
type Check func(ctx context.Context) error

// Deps are the ingest server's collaborators.
type Deps struct {
	Publisher Publisher
	Tenants   Tenants
	// Pool holds the imports table (fairway.imports).
	Pool *pgxpool.Pool
	// Registry receives the ingest metrics; Gatherer serves /metrics.
	Registry prometheus.Registerer
	Gatherer prometheus.Gatherer
	// Ready are the checks behind /readyz, by name ("jetstream", "postgres").
	Ready map[string]Check
	// Quotas holds tenants' ingest quotas and token buckets; Backlog
	// counts a tenant's events in PRODUCTS for the max_backlog quota.
	// Both or neither: without them no quota is enforced.
	Quotas  Quotas
	Backlog StreamCounter
	// Tracer, when set, traces every API request and every publish
	// (tracing.go; bootstrap.StartTracing). Default nil: tracing off.
	Tracer trace.Tracer
}

// Server is the ingest HTTP service.
type Server struct {
	cfg     Config
	deps    Deps
	log     *slog.Logger
	metrics *Metrics
	imports *importStore
	runner  *importRunner
	quotas  *quotaGate // nil: no quotas
	mux     *http.ServeMux

	startOnce sync.Once
}

// New builds a Server. Call Start to run background imports and Close to
// stop them.
func New(deps Deps, cfg *Config) (*Server, error) {
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	c = c.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	if deps.Publisher == nil || deps.Tenants == nil || deps.Pool == nil {
		return nil, errors.New("ingest: Publisher, Tenants and Pool are required")
	}
	if (deps.Quotas == nil) != (deps.Backlog == nil) {
		return nil, errors.New("ingest: Quotas and Backlog go together")
	}
	if deps.Registry == nil {
		reg := prometheus.NewRegistry()
		deps.Registry, deps.Gatherer = reg, reg
	}
	m, err := NewMetrics(deps.Registry)
	if err != nil {
		return nil, fmt.Errorf("ingest metrics: %w", err)
	}
	s := &Server{cfg: c, deps: deps, log: c.Logger, metrics: m, imports: &importStore{pool: deps.Pool}}
	if deps.Quotas != nil {
		s.quotas = newQuotaGate(deps.Quotas, deps.Backlog, &s.cfg, m)
	}
	s.runner = newImportRunner(s)
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	mux := http.NewServeMux()
	mux.Handle("POST /v1/tenants/{tenant}/events", s.instrument("events", s.handleEvents))
	mux.Handle("POST /v1/tenants/{tenant}/imports", s.instrument("imports_create", s.handleCreateImport))
	mux.Handle("GET /v1/imports/{id}", s.instrument("imports_get", s.handleGetImport))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", s.handleReady)
	if s.deps.Gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.deps.Gatherer, promhttp.HandlerOpts{}))
	}
	s.mux = mux
}

// Handler returns the HTTP handler of the service.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The mux would answer /v1/tenants//events with a redirect to
		// the cleaned path; an empty tenant id is a bad request.
		if strings.HasPrefix(r.URL.Path, "/v1/tenants//") {
			writeError(w, http.StatusBadRequest, "invalid_tenant", events.ValidateTenant("").Error())
			return
		}
		s.mux.ServeHTTP(w, r)
	})
}

// Start loads the tenants' quotas (and keeps reloading them), resumes this
// node's unfinished imports and starts the import workers. It returns at
// once.
func (s *Server) Start(ctx context.Context) error {
	var err error
	s.startOnce.Do(func() {
		if err = s.quotas.start(ctx); err == nil {
			err = s.runner.start(ctx)
		}
	})
	return err
}

// Close stops the import workers at their next chunk boundary, and then
// the quota reloads; unfinished imports stay "running" and resume on the
// next Start of this node.
func (s *Server) Close(ctx context.Context) error {
	err := s.runner.stop(ctx)
	s.quotas.close()
	return err
}

type ctxKey int

const requestIDKey ctxKey = 1

// RequestIDHeader carries a request id from the client (if it sent a sane
// one) or from ingest, back in the response and into the logs.
const RequestIDHeader = "X-Request-Id"

func (s *Server) instrument(route string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := s.cfg.Clock()
		rid := r.Header.Get(RequestIDHeader)
		if !saneRequestID(rid) {
			rid = newID()
		}
		w.Header().Set(RequestIDHeader, rid)
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		ctx := context.WithValue(r.Context(), requestIDKey, rid)
		var span trace.Span
		if s.deps.Tracer != nil {
			ctx, span = s.startRequest(ctx, r, route, rid)
		}
		h(sw, r.WithContext(ctx))
		if span != nil {
			endRequest(span, sw.code)
		}
		s.metrics.Requests.WithLabelValues(route, strconv.Itoa(sw.code)).Inc()
		s.metrics.RequestLatency.WithLabelValues(route).Observe(s.cfg.Clock().Sub(start).Seconds())
	})
}

func requestID(ctx context.Context) string {
	v, _ := ctx.Value(requestIDKey).(string)
	return v
}

func saneRequestID(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

func newID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

// Unwrap lets http.ResponseController reach the real writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// authorize checks the bearer token against the tenant in the path. It
// writes the error response and returns false when the caller may not act
// for tenant. Admin tokens may act for any tenant.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, tenant string) (tenancy.Principal, bool) {
	p, fail := bearer.Authenticate(w, r, s.deps.Tenants)
	switch {
	case fail != nil:
		if fail.Err != nil {
			s.log.ErrorContext(r.Context(), "verify token", "err", fail.Err, "request_id", requestID(r.Context()))
		}
		writeError(w, fail.Status, fail.Code, fail.Message)
		return tenancy.Principal{}, false
	case tenant != "" && !p.Admin && p.Tenant != tenant:
		writeError(w, http.StatusForbidden, "forbidden", "this token may not act for tenant "+strconv.Quote(tenant))
		return tenancy.Principal{}, false
	}
	return p, true
}

// pathTenant validates the {tenant} path value; it writes a 400 and returns
// false when the id is not a valid tenant id.
func pathTenant(w http.ResponseWriter, r *http.Request) (string, bool) {
	t := r.PathValue("tenant")
	if err := events.ValidateTenant(t); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_tenant", err.Error())
		return "", false
	}
	return t, true
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	out := map[string]string{}
	code := http.StatusOK
	for name, check := range s.deps.Ready {
		if err := check(ctx); err != nil {
			out[name] = err.Error()
			code = http.StatusServiceUnavailable
		} else {
			out[name] = "ok"
		}
	}
	writeJSON(w, code, out)
}

type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, errorBody{Error: msg, Code: code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}
