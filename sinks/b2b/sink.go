package b2b

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Defaults for Config.
const (
	FailureThresholdDefault    = 5
	CoolDownDefault            = 30 * time.Second
	PartnerCacheTTLDefault     = 5 * time.Second
	MaxResponseBytesDefault    = 64 << 10
	MaxIdleConnsPerHostDefault = 64
)

// Config configures a Sink.
type Config struct {
	// Registry holds the partner settings per tenant. Required.
	Registry *Registry
	// Partner is the partner this sink delivers to (destination
	// "b2b:<Partner>"). Required.
	Partner string
	// Logger receives circuit breaker transitions. Default: discard.
	Logger *slog.Logger
	// Clock returns the current time: signature timestamps, breaker
	// cool-downs, Retry-After, the partner cache. Default time.Now.
	Clock func() time.Time
	// UserAgent is sent with every request. Default "fairway/<module
	// version>" ("fairway/dev" in a development build).
	UserAgent string
	// FailureThreshold is how many consecutive failures (no answer, or an
	// answer other than a permanent refusal) open an endpoint's circuit
	// breaker. Default 5.
	FailureThreshold int
	// CoolDown is how long an open breaker refuses calls before it lets
	// one probe through. Default 30s.
	CoolDown time.Duration
	// MaxRetryAfter caps a partner's Retry-After. Default 1h.
	MaxRetryAfter time.Duration
	// PartnerCacheTTL is how long a partner's settings (and their absence)
	// are cached per tenant: a change made with `fairway partners` takes
	// effect within this long, or at once while FollowChanges runs.
	// Default 5s.
	PartnerCacheTTL time.Duration
	// MaxResponseBytes bounds how much of a response body is read.
	// Default 64 KiB.
	MaxResponseBytes int64
	// MaxIdleConnsPerHost is how many keep-alive connections to one
	// partner host are kept. Default 64.
	MaxIdleConnsPerHost int
	// TLSConfig is the TLS client configuration (certificates are always
	// verified; set RootCAs for a private CA). Default: system roots, TLS
	// 1.2 or later.
	TLSConfig *tls.Config
	// Registerer, when set, gets the sink's metrics (docs/metrics.md).
	// Default: none.
	Registerer prometheus.Registerer
	// DeliveryLogKeep is how many of the newest request attempts the
	// delivery log (fairway.partner_deliveries, Registry.Deliveries) keeps
	// per tenant and partner; negative turns the log off. Default
	// DeliveryLogKeepDefault (1000).
	DeliveryLogKeep int
	// DeliveryLogBuffer is how many attempts wait, at most, to be written
	// to the delivery log; an attempt that finds it full is not logged
	// (fairway_sink_b2b_delivery_log_dropped_total), so that a slow
	// database never holds a delivery. Default DeliveryLogBufferDefault
	// (4096).
	DeliveryLogBuffer int
}

// WithDefaults returns a copy of c with defaults filled in.
func (c *Config) WithDefaults() *Config {
	out := *c
	out.Logger = cmp.Or(out.Logger, slog.New(slog.DiscardHandler))
	if out.Clock == nil {
		out.Clock = time.Now
	}
	out.UserAgent = cmp.Or(out.UserAgent, UserAgentDefault())
	out.FailureThreshold = cmp.Or(out.FailureThreshold, FailureThresholdDefault)
	out.CoolDown = cmp.Or(out.CoolDown, CoolDownDefault)
	out.MaxRetryAfter = cmp.Or(out.MaxRetryAfter, MaxRetryAfterDefault)
	out.PartnerCacheTTL = cmp.Or(out.PartnerCacheTTL, PartnerCacheTTLDefault)
	out.MaxResponseBytes = cmp.Or(out.MaxResponseBytes, MaxResponseBytesDefault)
	out.MaxIdleConnsPerHost = cmp.Or(out.MaxIdleConnsPerHost, MaxIdleConnsPerHostDefault)
	out.DeliveryLogKeep = cmp.Or(out.DeliveryLogKeep, DeliveryLogKeepDefault)
	out.DeliveryLogBuffer = cmp.Or(out.DeliveryLogBuffer, DeliveryLogBufferDefault)
	return &out
}

func (c *Config) validate() error {
	switch {
	case c.Registry == nil:
		return fmt.Errorf("%w: Registry is required", ErrConfig)
	case ValidPartnerName(c.Partner) != nil:
		return fmt.Errorf("%w: Partner %q is not a valid partner name", ErrConfig, c.Partner)
	case c.FailureThreshold < 1:
		return fmt.Errorf("%w: FailureThreshold %d below 1", ErrConfig, c.FailureThreshold)
	case c.CoolDown < 0, c.MaxRetryAfter < 0, c.PartnerCacheTTL < 0:
		return fmt.Errorf("%w: negative duration", ErrConfig)
	case c.MaxResponseBytes < MaxErrorBody:
		return fmt.Errorf("%w: MaxResponseBytes %d below %d", ErrConfig, c.MaxResponseBytes, MaxErrorBody)
	case c.DeliveryLogBuffer < 1:
		return fmt.Errorf("%w: DeliveryLogBuffer %d below 1", ErrConfig, c.DeliveryLogBuffer)
	}
	return nil
}

// UserAgentDefault returns "fairway/<version>" from the build information.
func UserAgentDefault() string {
	v := "dev"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	return "fairway/" + v
}

// Sink delivers batches to one B2B partner (destination "b2b:<partner>")
// for every tenant that registered it. It is safe for concurrent use.
type Sink struct {
	cfg     *Config
	partner string
	log     *slog.Logger
	client  *http.Client
	tr      *http.Transport
	m       metrics
	dlog    *deliveryLog // nil when the delivery log is off

	mu       sync.Mutex
	partners map[string]cachedPartner // by tenant
	breakers map[string]*breaker      // by endpoint
}

type cachedPartner struct {
	p       Partner
	tr      *transformer // p.Transform compiled; nil for none
	err     error        // ErrUnknownPartner, cached like a hit
	expires time.Time
}

var _ sink.Sink = (*Sink)(nil)

// New returns a Sink for cfg.Partner.
func New(cfg *Config) (*Sink, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.TLSConfig != nil {
		tlsCfg = cfg.TLSConfig.Clone()
		tlsCfg.MinVersion = max(tlsCfg.MinVersion, tls.VersionTLS12)
	}
	tlsCfg.InsecureSkipVerify = false
	tr.TLSClientConfig = tlsCfg
	tr.MaxIdleConnsPerHost = cfg.MaxIdleConnsPerHost
	tr.MaxIdleConns = max(tr.MaxIdleConns, cfg.MaxIdleConnsPerHost)
	dest := tenancy.DestB2BPrefix + cfg.Partner
	m := newMetrics(dest)
	if cfg.Registerer != nil {
		if err := m.register(cfg.Registerer); err != nil {
			return nil, fmt.Errorf("b2b sink: metrics: %w", err)
		}
	}
	log := cfg.Logger.With("dest", dest)
	var dlog *deliveryLog
	if cfg.DeliveryLogKeep > 0 {
		dlog = newDeliveryLog(cfg.Registry.pool, cfg.DeliveryLogKeep, cfg.DeliveryLogBuffer, log, m.logDropped)
	}
	return &Sink{
		cfg:     cfg,
		partner: cfg.Partner,
		log:     log,
		tr:      tr,
		m:       m,
		dlog:    dlog,
		client: &http.Client{
			Transport: tr,
			// A redirect is answered as it is (classified transient):
			// following it would turn the POST into a GET.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		partners: map[string]cachedPartner{},
		breakers: map[string]*breaker{},
	}, nil
}

// Name returns the destination, "b2b:<partner>".
func (s *Sink) Name() string { return tenancy.DestB2BPrefix + s.partner }

// Close writes the delivery log rows still queued (waiting at most
// deliveryLogWriteTimeout) and closes idle connections. Call it once,
// after the last Apply.
func (s *Sink) Close() {
	if s.dlog != nil {
		ctx, cancel := context.WithTimeout(context.Background(), deliveryLogWriteTimeout)
		s.dlog.close(ctx)
		cancel()
	}
	s.tr.CloseIdleConnections()
}

// Breakers returns the state of every endpoint's breaker this sink has
// called, ordered by endpoint.
func (s *Sink) Breakers() []BreakerStatus {
	s.mu.Lock()
	eps := make([]string, 0, len(s.breakers))
	for ep := range s.breakers {
		eps = append(eps, ep)
	}
	bs := make([]*breaker, len(eps))
	slices.Sort(eps)
	for i, ep := range eps {
		bs[i] = s.breakers[ep]
	}
	s.mu.Unlock()
	now := s.cfg.Clock()
	out := make([]BreakerStatus, len(eps))
	for i, b := range bs {
		out[i] = b.status(eps[i], now)
	}
	return out
}

// State returns the worst breaker state over the partner's endpoints (open
// before half-open before closed); closed when none has been called.
func (s *Sink) State() BreakerState {
	st := BreakerClosed
	for _, b := range s.Breakers() {
		st = max(st, b.State)
	}
	return st
}

func (s *Sink) breaker(ep string) *breaker {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.breakers[ep]
	if b == nil {
		b = &breaker{threshold: s.cfg.FailureThreshold, coolDown: s.cfg.CoolDown}
		s.breakers[ep] = b
	}
	return b
}

// lookup returns the tenant's settings for the partner and its compiled
// transform, cached for PartnerCacheTTL. The transform is compiled again
// only when its expressions changed.
func (s *Sink) lookup(ctx context.Context, tenant string) (Partner, *transformer, error) {
	now := s.cfg.Clock()
	s.mu.Lock()
	c, ok := s.partners[tenant]
	s.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.p, c.tr, c.err
	}
	p, err := s.cfg.Registry.Get(ctx, tenant, s.partner)
	if err != nil && !errors.Is(err, ErrUnknownPartner) {
		return Partner{}, nil, err
	}
	tr := c.tr
	if err == nil && tr.source() != p.Transform {
		// Checked when it was set: failing here (a stored expression that
		// this version of CEL refuses) holds the tenant's batches until the
		// transform is set again, rather than dropping them.
		var cerr error
		if tr, cerr = p.Transform.compile(); cerr != nil {
			return Partner{}, nil, cerr
		}
	}
	s.mu.Lock()
	s.partners[tenant] = cachedPartner{p: p, tr: tr, err: err, expires: now.Add(s.cfg.PartnerCacheTTL)}
	s.mu.Unlock()
	return p, tr, err
}

// Apply implements sink.Sink: per tenant in the batch, one POST (split to
// fit the partner's max request size) of the newest version of each
// product the partner takes. See the package documentation.
func (s *Sink) Apply(ctx context.Context, batch []sink.Record) ([]error, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("b2b %s: %w", s.partner, err)
	}
	errs := make([]error, len(batch))
	byTenant := map[string][]int{}
	for i := range batch {
		t := batch[i].Event.Tenant
		byTenant[t] = append(byTenant[t], i)
	}
	tenants := make([]string, 0, len(byTenant))
	for t := range byTenant {
		tenants = append(tenants, t)
	}
	slices.Sort(tenants)
	for _, tenant := range tenants {
		idx := byTenant[tenant]
		p, tr, err := s.lookup(ctx, tenant)
		switch {
		case errors.Is(err, ErrUnknownPartner):
			for _, i := range idx {
				errs[i] = sink.Permanent(fmt.Sprintf("tenant %s has no partner %s", tenant, s.partner), err)
			}
			continue
		case err != nil:
			return nil, fmt.Errorf("b2b %s: tenant %s: %w", s.partner, tenant, err)
		case !p.Enabled:
			// Wait for it to be enabled: check again when the cache expires.
			return nil, fmt.Errorf("b2b %s: tenant %s: %w", s.partner, tenant,
				&RetryAfterError{Wait: s.cfg.PartnerCacheTTL, Endpoint: endpoint(p.URL), Err: ErrPartnerDisabled})
		}
		if err := s.applyTenant(ctx, &p, tr, batch, idx, errs); err != nil {
			return nil, fmt.Errorf("b2b %s: tenant %s: %w", s.partner, tenant, err)
		}
	}
	return errs, nil
}

// applyTenant delivers batch[idx] (one tenant) to p through its
// transform tr (nil: none), filling errs.
func (s *Sink) applyTenant(ctx context.Context, p *Partner, tr *transformer, batch []sink.Record, idx []int, errs []error) error {
	env := newEnvelope(p.Tenant, p.Name)
	e := encodeEvents(p, tr, env, batch, idx)
	s.m.filtered.Add(float64(e.filtered))
	s.m.transformErrors.Add(float64(e.failed))
	recs, at, enc, recErrs := e.recs, e.at, e.enc, e.errs
	var buf []byte
	err := sink.ApplyLatest(recs, recErrs, func(sub []int) error {
		for _, chunk := range env.chunks(sub, enc, p.MaxRequestBytes, p.MaxEvents) {
			buf = env.build(buf, chunk, enc)
			if err := s.post(ctx, p, buf, idempotencyKey(p.Tenant, p.Name, recs, chunk), len(chunk)); err != nil {
				return err
			}
		}
		return nil
	}, rejectedEvents)
	if err != nil {
		return err
	}
	for j, i := range at {
		errs[i] = recErrs[j]
	}
	return nil
}

// rejectedEvents tells sink.Isolate which errors the events caused: the
// partner refused the request's content (400, 413, 422), so bisection can
// find the events it refuses.
func rejectedEvents(err error) (reason string, data bool) {
	var he *HTTPError
	if errors.As(err, &he) {
		switch he.Status {
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
			return "partner rejected the event: " + he.Error(), true
		}
	}
	return "", false
}

// post sends one signed request, guarded by the endpoint's breaker.
func (s *Sink) post(ctx context.Context, p *Partner, body []byte, key string, n int) error {
	ep := endpoint(p.URL)
	br := s.breaker(ep)
	if wait, cause := br.allow(s.cfg.Clock(), p.Timeout); cause != nil {
		return &RetryAfterError{Wait: wait, Endpoint: ep, Err: cause}
	}
	if err := s.pace(ctx, p); err != nil {
		return err
	}
	sent, start := s.cfg.Clock(), time.Now()
	status, err := s.send(ctx, p, body, key)
	s.logAttempt(p, sent, time.Since(start), key, n, status, err)
	o, retryAfter := outcomeSuccess, time.Duration(0)
	var he *HTTPError
	switch {
	case err == nil:
	case ctx.Err() != nil:
		o = outcomeAbandoned
	case errors.As(err, &he) && sink.Classify(s, he).Class == sink.ClassPermanent:
		// The partner is up; the request was refused.
	default:
		o = outcomeFailure
		if he != nil {
			retryAfter = he.Wait
		}
	}
	s.observe(br, ep, o, retryAfter)
	if err != nil {
		return fmt.Errorf("POST %s (%d events, %d bytes): %w", redactURL(p.URL), n, len(body), err)
	}
	return nil
}

// pace waits until the partner's declared request rate lets a request go
// (Registry.TakeRequest), holding the batch's slot meanwhile.
func (s *Sink) pace(ctx context.Context, p *Partner) error {
	if p.RequestsPerSec <= 0 {
		return nil
	}
	for {
		wait, err := s.cfg.Registry.TakeRequest(ctx, p.Tenant, p.Name)
		if err != nil {
			return err
		}
		if wait <= 0 {
			return nil
		}
		s.m.paced.Add(wait.Seconds())
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// observe records an outcome and logs breaker transitions.
func (s *Sink) observe(br *breaker, ep string, o outcome, retryAfter time.Duration) {
	now := s.cfg.Clock()
	before := br.status(ep, now).State
	br.record(now, o, retryAfter)
	after := br.status(ep, now)
	if before != after.State {
		switch after.State {
		case BreakerOpen:
			s.log.Warn("b2b circuit opened", "endpoint", ep, "failures", after.ConsecutiveFailures, "until", after.OpenUntil)
		case BreakerClosed:
			s.log.Info("b2b circuit closed", "endpoint", ep)
		}
	}
}

// logAttempt queues one request attempt for the delivery log (nothing
// when the log is off).
func (s *Sink) logAttempt(p *Partner, sent time.Time, latency time.Duration, key string, n, status int, err error) {
	if s.dlog == nil {
		return
	}
	d := Delivery{Tenant: p.Tenant, Partner: p.Name, At: sent, WebhookID: key, Events: n, Status: status, Latency: latency}
	if err != nil {
		d.Error = err.Error()
	}
	s.dlog.add(d)
}

// send makes one request and returns the answer's status (0 without an
// answer); a non-2xx answer is an *HTTPError.
func (s *Sink) send(ctx context.Context, p *Partner, body []byte, key string) (int, error) {
	rctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, p.URL, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("build request: %w", scrubURL(err))
	}
	now := s.cfg.Clock()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", s.cfg.UserAgent)
	p.Signing.Sign(req.Header, key, now, body, p.secrets(now)...)
	resp, err := s.client.Do(req)
	if err != nil {
		if ctx.Err() == nil && errors.Is(rctx.Err(), context.DeadlineExceeded) {
			return 0, fmt.Errorf("no answer within the partner timeout %s: %w", p.Timeout, scrubURL(err))
		}
		return 0, scrubURL(err)
	}
	defer resp.Body.Close()
	lr := io.LimitReader(resp.Body, s.cfg.MaxResponseBytes)
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		// The body is not interpreted; read a bounded amount so that the
		// connection can be reused when it is small.
		_, _ = io.Copy(io.Discard, lr)
		return resp.StatusCode, nil
	}
	got, _ := io.ReadAll(lr)
	ra := min(parseRetryAfter(resp.Header.Get("Retry-After"), s.cfg.Clock()), s.cfg.MaxRetryAfter)
	return resp.StatusCode, newHTTPError(resp.StatusCode, ra, got)
}

// scrubURL replaces the URL inside a *url.Error by its redacted form: a
// partner URL may carry a token in its query or user info.
func scrubURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return &url.Error{Op: ue.Op, URL: redactURL(ue.URL), Err: ue.Err}
	}
	return err
}
