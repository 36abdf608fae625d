package b2b

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// SetTransform gives a partner a filter and mapping of its events (the
// zero Transform removes them) and returns the partner without its
// secret. Expressions that do not compile are refused with CEL's error
// (ErrInvalidTransform) and nothing changes. Sinks pick the change up at
// once (tenancy.NotifyPartner).
func (r *Registry) SetTransform(ctx context.Context, tenant, name string, t Transform) (Partner, error) {
	if _, err := t.compile(); err != nil {
		return Partner{}, err
	}
	p, err := r.change(ctx, tenant, name, tenancy.PartnerChanged, `UPDATE fairway.partners SET filter_expr = $3, map_expr = $4, updated_at = now()
		WHERE tenant_id = $1 AND partner = $2 RETURNING `+partnerCols, exprArg(t.Filter), exprArg(t.Map))
	if err != nil {
		return Partner{}, r.wrap("set the transform of", tenant, name, err)
	}
	return p, nil
}

// SetMaxEvents sets how many events one request to the partner holds at
// most (1: one event per request; 0: as many as MaxRequestBytes allows)
// and returns the partner without its secret.
func (r *Registry) SetMaxEvents(ctx context.Context, tenant, name string, n int) (Partner, error) {
	if n < 0 || n > MaxEventsMax {
		return Partner{}, fmt.Errorf("%w: max events %d not in [0, %d]", ErrInvalidPartner, n, MaxEventsMax)
	}
	p, err := r.change(ctx, tenant, name, tenancy.PartnerChanged, `UPDATE fairway.partners SET max_events = $3, updated_at = now()
		WHERE tenant_id = $1 AND partner = $2 RETURNING `+partnerCols, n)
	if err != nil {
		return Partner{}, r.wrap("set the batch size of", tenant, name, err)
	}
	return p, nil
}

// SetRequestRate sets the most requests a second the partner takes (0:
// no limit) and returns the partner without its secret. Every sink
// replica paces its requests to the partner through one row
// (TakeRequest), so together they never send more.
func (r *Registry) SetRequestRate(ctx context.Context, tenant, name string, perSec int) (Partner, error) {
	if perSec < 0 || perSec > RequestsPerSecMax {
		return Partner{}, fmt.Errorf("%w: requests per second %d not in [0, %d]", ErrInvalidPartner, perSec, RequestsPerSecMax)
	}
	p, err := r.change(ctx, tenant, name, tenancy.PartnerChanged, `UPDATE fairway.partners SET requests_per_sec = $3, rate_tat = NULL, updated_at = now()
		WHERE tenant_id = $1 AND partner = $2 RETURNING `+partnerCols, perSec)
	if err != nil {
		return Partner{}, r.wrap("set the request rate of", tenant, name, err)
	}
	return p, nil
}

// RequestsPerSecMax is the highest request rate a partner may declare.
const RequestsPerSecMax = 10_000

// TakeRequest claims the partner's next request: it returns 0 when a
// request may go now, or how long to wait before asking again. Requests
// are spaced at least 1/RequestsPerSec apart (the generic cell rate
// algorithm without a burst), so no second of the partner's clock holds
// more than RequestsPerSec of them, whichever replica sends them. A
// partner without a limit always gets 0.
func (r *Registry) TakeRequest(ctx context.Context, tenant, name string) (time.Duration, error) {
	var wait float64
	err := r.pool.QueryRow(ctx, `WITH p AS (
			SELECT requests_per_sec, COALESCE(rate_tat, clock_timestamp()) AS tat, clock_timestamp() AS now
			FROM fairway.partners WHERE tenant_id = $1 AND partner = $2 AND requests_per_sec > 0 FOR UPDATE
		), u AS (
			UPDATE fairway.partners SET rate_tat = GREATEST(p.tat, p.now) + make_interval(secs => 1.0 / p.requests_per_sec)
			FROM p WHERE tenant_id = $1 AND partner = $2 AND p.tat <= p.now
			RETURNING 1
		)
		SELECT CASE WHEN EXISTS (SELECT 1 FROM u) THEN 0 ELSE EXTRACT(EPOCH FROM p.tat - p.now)::float8 END FROM p`, tenant, name).Scan(&wait)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, nil // no limit (or no partner: the request says so)
	case err != nil:
		return 0, fmt.Errorf("take a request of partner %s/%s: %w", tenant, name, err)
	}
	return time.Duration(max(wait, 0) * float64(time.Second)), nil
}

func exprArg(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func transformOf(filter, mapping *string) Transform {
	var t Transform
	if filter != nil {
		t.Filter = *filter
	}
	if mapping != nil {
		t.Map = *mapping
	}
	return t
}

// Delivery is one request to a partner as the delivery log holds it.
type Delivery struct {
	Tenant, Partner string
	// At is when the request was sent.
	At time.Time
	// WebhookID is the request's idempotency key (webhook-id or
	// Idempotency-Key): the same on every retry of the same events.
	WebhookID string
	// Events is how many events the request held.
	Events int
	// Status is the HTTP status of the answer; 0 when there was none
	// (timeout, refused or reset connection).
	Status int
	// Latency is from sending the request to the end of the answer.
	Latency time.Duration
	// Error is why the attempt failed, "" when it succeeded.
	Error string
	// Retries is how many earlier attempts with the same WebhookID the
	// log holds (Deliveries fills it; the sink leaves it 0).
	Retries int
}

// OK reports whether the partner accepted the request (a 2xx answer).
func (d Delivery) OK() bool { return d.Status >= 200 && d.Status <= 299 }

// Deliveries returns the newest limit attempts of the delivery log of a
// partner of tenant, newest first. The log keeps Config.DeliveryLogKeep
// rows per tenant and partner (default DeliveryLogKeepDefault).
func (r *Registry) Deliveries(ctx context.Context, tenant, name string, limit int) ([]Delivery, error) {
	rows, err := r.pool.Query(ctx, `SELECT at, webhook_id, events, status, latency_us, error, retries FROM (
			SELECT id, at, webhook_id, events, status, latency_us, error,
				row_number() OVER (PARTITION BY webhook_id ORDER BY id) - 1 AS retries
			FROM fairway.partner_deliveries WHERE tenant_id = $1 AND partner = $2
		) d ORDER BY id DESC LIMIT $3`, tenant, name, limit)
	if err != nil {
		return nil, fmt.Errorf("b2b: deliveries of %s/%s: %w", tenant, name, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Delivery, error) {
		d := Delivery{Tenant: tenant, Partner: name}
		var us int64
		err := row.Scan(&d.At, &d.WebhookID, &d.Events, &d.Status, &us, &d.Error, &d.Retries)
		d.Latency = time.Duration(us) * time.Microsecond
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("b2b: deliveries of %s/%s: %w", tenant, name, err)
	}
	return out, nil
}

// DeliveryStats sums up the delivery log of one partner of a tenant.
type DeliveryStats struct {
	Tenant, Partner string
	// Attempts and Succeeded count the requests the log holds (the last
	// Config.DeliveryLogKeep).
	Attempts, Succeeded int
	// LastAt is when the newest of them was sent.
	LastAt time.Time
	// LastFailed reports whether the newest of them failed (no 2xx
	// answer): the partner's state now, where LastError may be old.
	LastFailed bool
	// LastError and LastErrorAt are the newest failed attempt's; empty
	// when none failed.
	LastError   string
	LastErrorAt time.Time
}

// SuccessRate is Succeeded / Attempts, 0 without attempts.
func (s DeliveryStats) SuccessRate() float64 {
	if s.Attempts == 0 {
		return 0
	}
	return float64(s.Succeeded) / float64(s.Attempts)
}

// DeliveryStats returns, for each partner of tenant (every tenant when
// tenant is "") with rows in the delivery log, its success rate and last
// error, ordered by tenant and partner.
func (r *Registry) DeliveryStats(ctx context.Context, tenant string) ([]DeliveryStats, error) {
	rows, err := r.pool.Query(ctx, `SELECT tenant_id, partner, count(*), count(*) FILTER (WHERE status BETWEEN 200 AND 299), max(at),
			(array_agg(status NOT BETWEEN 200 AND 299 ORDER BY id DESC))[1],
			coalesce((array_agg(error ORDER BY id DESC) FILTER (WHERE error <> ''))[1], ''),
			max(at) FILTER (WHERE error <> '')
		FROM fairway.partner_deliveries WHERE $1 = '' OR tenant_id = $1
		GROUP BY tenant_id, partner ORDER BY tenant_id, partner`, tenant)
	if err != nil {
		return nil, fmt.Errorf("b2b: delivery stats: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DeliveryStats, error) {
		var s DeliveryStats
		var lastErrAt *time.Time
		err := row.Scan(&s.Tenant, &s.Partner, &s.Attempts, &s.Succeeded, &s.LastAt, &s.LastFailed, &s.LastError, &lastErrAt)
		if lastErrAt != nil {
			s.LastErrorAt = *lastErrAt
		}
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("b2b: delivery stats: %w", err)
	}
	return out, nil
}
