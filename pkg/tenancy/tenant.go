package tenancy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fairwayhq/fairway/pkg/events"
)

// Tenant is one customer whose events fairway dispatches.
type Tenant struct {
	ID          string
	DisplayName string
	// Weight is the tenant's share in weighted fair dispatch (≥ 1).
	Weight int
	// Paused tenants get no slots (Acquire returns ErrPaused).
	Paused    bool
	CreatedAt time.Time
}

// Limit is the slot limit and weight of one tenant in one destination.
type Limit struct {
	Tenant, Dest string
	MaxSlots     int
	// Weight overrides the tenant's weight in this destination; 0 means
	// "use the tenant weight".
	Weight int
	// InUse is the number of live leases at the time of the query. It may
	// exceed MaxSlots only right after MaxSlots was lowered, while the
	// older leases finish.
	InUse int
	// Paused says the destination is paused for this tenant
	// (SetDestPaused); the tenant's own pause (Tenant.Paused) is apart.
	Paused bool
	// Rate caps the events per second dispatched (SetDestRate; 0: none).
	Rate int
}

const tenantCols = `id, display_name, weight, paused, created_at`

func scanTenant(row pgx.Row) (Tenant, error) {
	var t Tenant
	err := row.Scan(&t.ID, &t.DisplayName, &t.Weight, &t.Paused, &t.CreatedAt)
	return t, err
}

// CreateTenant creates a tenant with the default weight and issues its first
// API token, which is returned once and stored only as a hash.
// ErrTenantExists if the id is taken.
func (s *Store) CreateTenant(ctx context.Context, id, displayName string) (Tenant, string, error) {
	if err := events.ValidateTenant(id); err != nil {
		return Tenant{}, "", err
	}
	token, err := generateToken()
	if err != nil {
		return Tenant{}, "", err
	}
	var t Tenant
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		t, err = scanTenant(tx.QueryRow(ctx, `INSERT INTO fairway.tenants (id, display_name, weight)
			VALUES ($1, $2, $3) RETURNING `+tenantCols, id, displayName, s.cfg.DefaultWeight))
		if err != nil {
			return err
		}
		return token.insert(ctx, tx, id, "")
	})
	switch {
	case isUniqueViolation(err):
		return Tenant{}, "", fmt.Errorf("create tenant %s: %w", id, ErrTenantExists)
	case err != nil:
		return Tenant{}, "", fmt.Errorf("create tenant %s: %w", id, err)
	}
	return t, token.secret, nil
}

// EnsureTenant returns the tenant, creating it with defaults on first sight.
// When the tenant exists it costs one indexed read.
func (s *Store) EnsureTenant(ctx context.Context, id string) (Tenant, error) {
	t, err := s.Tenant(ctx, id)
	if !errors.Is(err, ErrUnknownTenant) {
		return t, err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO fairway.tenants (id, weight) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`,
		id, s.cfg.DefaultWeight)
	if err != nil {
		return Tenant{}, fmt.Errorf("ensure tenant %s: %w", id, err)
	}
	return s.Tenant(ctx, id)
}

// Tenant returns one tenant; ErrUnknownTenant if it does not exist.
func (s *Store) Tenant(ctx context.Context, id string) (Tenant, error) {
	if err := events.ValidateTenant(id); err != nil {
		return Tenant{}, err
	}
	t, err := scanTenant(s.pool.QueryRow(ctx, `SELECT `+tenantCols+` FROM fairway.tenants WHERE id = $1`, id))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Tenant{}, fmt.Errorf("tenant %s: %w", id, ErrUnknownTenant)
	case err != nil:
		return Tenant{}, fmt.Errorf("tenant %s: %w", id, err)
	}
	return t, nil
}

// Tenants lists all tenants ordered by id.
func (s *Store) Tenants(ctx context.Context) ([]Tenant, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+tenantCols+` FROM fairway.tenants ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Tenant, error) { return scanTenant(r) })
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return out, nil
}

// SetWeight sets a tenant's fair-share weight (≥ 1) and notifies
// dispatchers (Released.Weight, once per destination of the tenant), which
// apply it at once. ErrUnknownTenant if there is no such tenant.
func (s *Store) SetWeight(ctx context.Context, tenant string, weight int) error {
	if err := events.ValidateTenant(tenant); err != nil {
		return err
	}
	if weight < 1 {
		return fmt.Errorf("set weight of %s: %w: weight %d below 1", tenant, ErrInvalidArgument, weight)
	}
	return s.updateTenant(ctx, "set weight", tenant, `WITH u AS (
			UPDATE fairway.tenants SET weight = $2 WHERE id = $1 RETURNING id
		), n AS (
			SELECT pg_notify('`+NotifyChannel+`', l.tenant || ' ' || l.dest || ' `+notifyWeight+`')
			FROM fairway.limits l JOIN u ON l.tenant = u.id
		) SELECT (SELECT count(*) FROM u) + 0 * (SELECT count(*) FROM n)`, weight)
}

// SetPaused pauses or resumes a tenant. A paused tenant gets no new slots
// (Acquire returns ErrPaused); leases it holds run to their end. Resuming
// wakes listeners. ErrUnknownTenant if there is no such tenant.
func (s *Store) SetPaused(ctx context.Context, tenant string, paused bool) error {
	if err := events.ValidateTenant(tenant); err != nil {
		return err
	}
	return s.updateTenant(ctx, "set paused", tenant, `WITH u AS (
			UPDATE fairway.tenants SET paused = $2 WHERE id = $1 RETURNING id
		), n AS (
			SELECT pg_notify('`+NotifyChannel+`', l.tenant || ' ' || l.dest)
			FROM fairway.limits l JOIN u ON l.tenant = u.id WHERE NOT $2
		) SELECT (SELECT count(*) FROM u) + 0 * (SELECT count(*) FROM n)`, paused)
}

// SetDestPaused pauses or resumes one destination of a tenant: no new
// slot of (tenant, dest) is handed out while it is paused (ErrPaused);
// batches already running finish. Resuming wakes dispatchers.
// ErrUnknownTenant if the pair was never seen.
func (s *Store) SetDestPaused(ctx context.Context, tenant, dest string, paused bool) error {
	if err := validPair(tenant, dest); err != nil {
		return err
	}
	var n int64
	err := s.pool.QueryRow(ctx, `WITH u AS (
			UPDATE fairway.limits SET paused = $3 WHERE tenant = $1 AND dest = $2 RETURNING tenant, dest
		), n AS (
			SELECT pg_notify('`+NotifyChannel+`', u.tenant || ' ' || u.dest) FROM u WHERE NOT $3
		) SELECT (SELECT count(*) FROM u) + 0 * (SELECT count(*) FROM n)`, tenant, dest, paused).Scan(&n)
	if err != nil {
		return fmt.Errorf("set paused %s/%s: %w", tenant, dest, err)
	}
	if n == 0 {
		return fmt.Errorf("set paused %s/%s: %w (no such destination for this tenant yet)", tenant, dest, ErrUnknownTenant)
	}
	return nil
}

func (s *Store) updateTenant(ctx context.Context, what, tenant, sql string, arg any) error {
	var n int64
	if err := s.pool.QueryRow(ctx, sql, tenant, arg).Scan(&n); err != nil {
		return fmt.Errorf("%s %s: %w", what, tenant, err)
	}
	if n == 0 {
		return fmt.Errorf("%s %s: %w", what, tenant, ErrUnknownTenant)
	}
	return nil
}

// SetLimit sets max_slots of (tenant, dest), creating the row if needed.
// It takes effect for the next acquisition. Raising it creates the slot
// rows and wakes listeners; lowering it converges: no new slot is handed
// out until every lease on a slot numbered at or above the new limit has
// ended, so in-use falls to the new limit within one batch time (or one
// lease TTL if a holder died). 0 stops new acquisitions. ErrUnknownTenant
// if the tenant does not exist.
func (s *Store) SetLimit(ctx context.Context, tenant, dest string, maxSlots int) error {
	if err := validPair(tenant, dest); err != nil {
		return err
	}
	if maxSlots < 0 || maxSlots > MaxSlotsMax {
		return fmt.Errorf("set limit %s/%s: %w: max_slots %d not in [0, %d]", tenant, dest, ErrInvalidArgument, maxSlots, MaxSlotsMax)
	}
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO fairway.limits (tenant, dest, max_slots) VALUES ($1, $2, $3)
		ON CONFLICT (tenant, dest) DO UPDATE SET max_slots = EXCLUDED.max_slots, changed_at = now()`,
		tenant, dest, maxSlots)
	s.queueSlotsAndCursor(b, tenant, dest)
	return s.sendLimitBatch(ctx, b, "set limit", tenant, dest)
}

// SetDestWeight sets the weight override of (tenant, dest); 0 means "use
// the tenant weight". It notifies dispatchers (Released.Weight), which
// apply it at once. ErrUnknownTenant if the tenant does not exist.
func (s *Store) SetDestWeight(ctx context.Context, tenant, dest string, weight int) error {
	if err := validPair(tenant, dest); err != nil {
		return err
	}
	if weight < 0 {
		return fmt.Errorf("set weight %s/%s: %w: weight %d below 0", tenant, dest, ErrInvalidArgument, weight)
	}
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO fairway.limits (tenant, dest, max_slots, weight) VALUES ($1, $2, $3, $4)
		ON CONFLICT (tenant, dest) DO UPDATE SET weight = EXCLUDED.weight, changed_at = now()`,
		tenant, dest, s.cfg.DefaultMaxSlots, weight)
	s.queueSlotsAndCursor(b, tenant, dest)
	b.Queue(`SELECT pg_notify('`+NotifyChannel+`', $1::text || ' ' || $2::text || ' `+notifyWeight+`')`, tenant, dest)
	return s.sendLimitBatch(ctx, b, "set weight", tenant, dest)
}

// SetDestRate caps the events per second dispatched for (tenant, dest),
// on top of its slots; 0 removes the cap. It notifies dispatchers
// (Released.Weight), which apply it at once. ErrUnknownTenant if the
// tenant does not exist.
func (s *Store) SetDestRate(ctx context.Context, tenant, dest string, eventsPerSec int) error {
	if err := validPair(tenant, dest); err != nil {
		return err
	}
	if eventsPerSec < 0 {
		return fmt.Errorf("set rate %s/%s: %w: %d events/s below 0", tenant, dest, ErrInvalidArgument, eventsPerSec)
	}
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO fairway.limits (tenant, dest, max_slots, events_per_sec) VALUES ($1, $2, $3, $4)
		ON CONFLICT (tenant, dest) DO UPDATE SET events_per_sec = EXCLUDED.events_per_sec, changed_at = now()`,
		tenant, dest, s.cfg.DefaultMaxSlots, eventsPerSec)
	s.queueSlotsAndCursor(b, tenant, dest)
	b.Queue(`SELECT pg_notify('`+NotifyChannel+`', $1::text || ' ' || $2::text || ' `+notifyWeight+`')`, tenant, dest)
	return s.sendLimitBatch(ctx, b, "set rate", tenant, dest)
}

// queueSlotsAndCursor makes sure slot rows exist below the current limit,
// the cursor row exists, and wakes listeners (capacity may have grown).
func (s *Store) queueSlotsAndCursor(b *pgx.Batch, tenant, dest string) {
	b.Queue(`INSERT INTO fairway.slots (tenant, dest, slot_no)
		SELECT l.tenant, l.dest, g FROM fairway.limits l, generate_series(0, l.max_slots - 1) g
		WHERE l.tenant = $1 AND l.dest = $2
		ON CONFLICT DO NOTHING`, tenant, dest)
	b.Queue(`INSERT INTO fairway.cursors (tenant, dest) VALUES ($1, $2) ON CONFLICT DO NOTHING`, tenant, dest)
	b.Queue(`SELECT pg_notify('`+NotifyChannel+`', $1::text || ' ' || $2::text)`, tenant, dest)
}

func (s *Store) sendLimitBatch(ctx context.Context, b *pgx.Batch, what, tenant, dest string) error {
	// A batch runs as one implicit transaction: the limit and its slot
	// rows become visible together.
	err := s.pool.SendBatch(ctx, b).Close()
	switch {
	case isFKViolation(err):
		return fmt.Errorf("%s %s/%s: %w", what, tenant, dest, ErrUnknownTenant)
	case err != nil:
		return fmt.Errorf("%s %s/%s: %w", what, tenant, dest, err)
	}
	return nil
}

// Limits lists the tenant's limits per destination with current in-use
// counts. ErrUnknownTenant if the tenant does not exist.
func (s *Store) Limits(ctx context.Context, tenant string) ([]Limit, error) {
	if err := events.ValidateTenant(tenant); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT l.tenant, l.dest, l.max_slots, l.weight,
			(SELECT count(*) FROM fairway.slots s WHERE s.tenant = l.tenant AND s.dest = l.dest AND s.expires_at >= now() AND s.slot_no >= 0), l.paused,
			l.events_per_sec
		FROM fairway.limits l WHERE l.tenant = $1 ORDER BY l.dest`, tenant)
	if err != nil {
		return nil, fmt.Errorf("limits of %s: %w", tenant, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Limit, error) {
		var l Limit
		err := r.Scan(&l.Tenant, &l.Dest, &l.MaxSlots, &l.Weight, &l.InUse, &l.Paused, &l.Rate)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("limits of %s: %w", tenant, err)
	}
	if len(out) == 0 {
		if _, err := s.Tenant(ctx, tenant); err != nil {
			return nil, err
		}
	}
	return out, nil
}
