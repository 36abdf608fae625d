package b2b

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// RegistryConfig configures a Registry.
type RegistryConfig struct {
	// SecretKey, when set, is the 32-byte AES-256 key that encrypts partner
	// secrets at rest (AES-GCM, bound to the tenant and partner). Without
	// it secrets are stored as they are, and secrets stored encrypted
	// cannot be read (ErrSecretKey). See ParseSecretKey and SecretKeyEnv.
	// Default: none.
	SecretKey []byte
	// AllowInsecureHTTP accepts http:// partner URLs (tests, the demo, a
	// partner on a private network). Default false: https only.
	AllowInsecureHTTP bool
}

// Registry holds the B2B partners of every tenant in fairway.partners
// (migrations 00004 and 00013). Every change notifies dispatchers and
// sinks in its transaction (tenancy.NotifyPartner), so it takes effect at
// once. It is safe for concurrent use.
type Registry struct {
	pool      *pgxpool.Pool
	box       secretBox
	allowHTTP bool
}

// NewRegistry returns a Registry on pool. The schema comes from
// internal/migrate.
func NewRegistry(pool *pgxpool.Pool, cfg *RegistryConfig) (*Registry, error) {
	if cfg == nil {
		cfg = &RegistryConfig{}
	}
	if pool == nil {
		return nil, fmt.Errorf("%w: pool is required", ErrConfig)
	}
	box, err := newSecretBox(cfg.SecretKey)
	if err != nil {
		return nil, err
	}
	return &Registry{pool: pool, box: box, allowHTTP: cfg.AllowInsecureHTTP}, nil
}

const partnerCols = `tenant_id, partner, url, secret, enabled, timeout_ms, max_request_bytes, ops, created_at, updated_at,
	signing, previous_secret, previous_secret_until, filter_expr, map_expr, max_events, requests_per_sec`

// Add registers p (zero Signing, Timeout and MaxRequestBytes take their
// defaults; Enabled is taken as given; PreviousSecret is ignored). It
// returns the stored partner, without its secret.
func (r *Registry) Add(ctx context.Context, p Partner) (Partner, error) {
	p = p.withDefaults()
	if err := p.validate(r.allowHTTP); err != nil {
		return Partner{}, err
	}
	var out Partner
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		row := tx.QueryRow(ctx, `INSERT INTO fairway.partners (tenant_id, partner, url, secret, enabled, timeout_ms, max_request_bytes, ops, signing,
			filter_expr, map_expr, max_events)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING `+partnerCols,
			p.Tenant, p.Name, p.URL, r.box.seal(p.Tenant, p.Name, p.Secret), p.Enabled, p.Timeout.Milliseconds(), p.MaxRequestBytes, opsArg(p.Ops), p.Signing,
			exprArg(p.Transform.Filter), exprArg(p.Transform.Map), p.MaxEvents)
		var err error
		if out, err = r.scan(row, false); err != nil {
			return err
		}
		return tenancy.NotifyPartner(ctx, tx, p.Tenant, p.Name, tenancy.PartnerAdded)
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "23505":
			return Partner{}, fmt.Errorf("%w: %s/%s", ErrPartnerExists, p.Tenant, p.Name)
		case "23503":
			return Partner{}, fmt.Errorf("%w: %s", ErrUnknownTenant, p.Tenant)
		}
	}
	if err != nil {
		return Partner{}, fmt.Errorf("b2b: add partner %s/%s: %w", p.Tenant, p.Name, err)
	}
	return out, nil
}

// Update is a change to a partner: nil fields stay as they are.
type Update struct {
	URL *string
	// Secret replaces the secret at once (RotateSecret keeps the old one
	// signing for a while); nil keeps it.
	Secret Secret
	// Signing changes the scheme; the secret stays (see WebhookSecret).
	Signing         *Signing
	Enabled         *bool
	Timeout         *time.Duration
	MaxRequestBytes *int
	// Ops replaces the op filter; a pointer to nil means all ops.
	Ops *[]events.Op
}

// Update changes a partner and returns it, without its secret.
func (r *Registry) Update(ctx context.Context, tenant, name string, u Update) (Partner, error) {
	var out Partner
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		p, err := r.scan(tx.QueryRow(ctx, `SELECT `+partnerCols+` FROM fairway.partners WHERE tenant_id = $1 AND partner = $2 FOR UPDATE`, tenant, name), u.Secret == nil)
		if err != nil {
			return err
		}
		if u.URL != nil {
			p.URL = *u.URL
		}
		if u.Secret != nil {
			p.Secret = u.Secret
		}
		if u.Enabled != nil {
			p.Enabled = *u.Enabled
		}
		if u.Timeout != nil {
			p.Timeout = *u.Timeout
		}
		if u.MaxRequestBytes != nil {
			p.MaxRequestBytes = *u.MaxRequestBytes
		}
		if u.Ops != nil {
			p.Ops = *u.Ops
		}
		if u.Signing != nil {
			p.Signing = *u.Signing
		}
		if err := p.validate(r.allowHTTP); err != nil {
			return err
		}
		out, err = r.changeIn(ctx, tx, tenant, name, tenancy.PartnerChanged, `UPDATE fairway.partners SET url = $3, secret = $4, enabled = $5, timeout_ms = $6,
			max_request_bytes = $7, ops = $8, signing = $9, updated_at = now() WHERE tenant_id = $1 AND partner = $2 RETURNING `+partnerCols,
			p.URL, r.box.seal(tenant, name, p.Secret), p.Enabled, p.Timeout.Milliseconds(), p.MaxRequestBytes, opsArg(p.Ops), p.Signing)
		return err
	})
	if err != nil {
		return Partner{}, r.wrap("update", tenant, name, err)
	}
	return out, nil
}

// RotateSecret makes secret the partner's secret. The secret it replaces
// becomes the previous secret and signs every request as well until
// until, so that the partner can move its verifier to the new secret in
// the meantime; a zero until drops it at once. It returns the partner
// without its secrets.
func (r *Registry) RotateSecret(ctx context.Context, tenant, name string, secret Secret, until time.Time) (Partner, error) {
	var out Partner
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		p, err := r.scan(tx.QueryRow(ctx, `SELECT `+partnerCols+` FROM fairway.partners WHERE tenant_id = $1 AND partner = $2 FOR UPDATE`, tenant, name), false)
		if err != nil {
			return err
		}
		p.Secret = secret
		if err := p.validate(r.allowHTTP); err != nil {
			return err
		}
		var untilArg *time.Time
		if !until.IsZero() {
			untilArg = &until
		}
		// The stored secret moves as it is: sealed or not, it is bound to
		// the same tenant and partner.
		out, err = r.changeIn(ctx, tx, tenant, name, tenancy.PartnerChanged, `UPDATE fairway.partners SET secret = $3,
			previous_secret = CASE WHEN $4::timestamptz IS NULL THEN NULL ELSE secret END, previous_secret_until = $4,
			updated_at = now() WHERE tenant_id = $1 AND partner = $2 RETURNING `+partnerCols,
			r.box.seal(tenant, name, secret), untilArg)
		return err
	})
	if err != nil {
		return Partner{}, r.wrap("rotate the secret of", tenant, name, err)
	}
	return out, nil
}

// SetEnabled enables or disables a partner.
func (r *Registry) SetEnabled(ctx context.Context, tenant, name string, enabled bool) error {
	_, err := r.change(ctx, tenant, name, tenancy.PartnerChanged,
		`UPDATE fairway.partners SET enabled = $3, updated_at = now() WHERE tenant_id = $1 AND partner = $2 RETURNING `+partnerCols, enabled)
	return r.wrap("set enabled", tenant, name, err)
}

// Remove deletes a partner.
func (r *Registry) Remove(ctx context.Context, tenant, name string) error {
	_, err := r.change(ctx, tenant, name, tenancy.PartnerRemoved,
		`DELETE FROM fairway.partners WHERE tenant_id = $1 AND partner = $2 RETURNING `+partnerCols)
	return r.wrap("remove", tenant, name, err)
}

// change runs sql ($1 tenant, $2 name, then args; RETURNING partnerCols)
// on one partner and notifies the change in the same transaction
// (tenancy.NotifyPartner with what). It returns the partner as sql left
// it, without its secret; pgx.ErrNoRows when there is no such partner.
func (r *Registry) change(ctx context.Context, tenant, name, what, sql string, args ...any) (Partner, error) {
	var p Partner
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		var err error
		p, err = r.changeIn(ctx, tx, tenant, name, what, sql, args...)
		return err
	})
	return p, err
}

// changeIn is change within tx, for a change that reads the partner
// first.
func (r *Registry) changeIn(ctx context.Context, tx pgx.Tx, tenant, name, what, sql string, args ...any) (Partner, error) {
	p, err := r.scan(tx.QueryRow(ctx, sql, append([]any{tenant, name}, args...)...), false)
	if err != nil {
		return Partner{}, err
	}
	return p, tenancy.NotifyPartner(ctx, tx, tenant, name, what)
}

// Get returns one partner with its secrets (decrypted); ErrUnknownPartner
// when it is not registered.
func (r *Registry) Get(ctx context.Context, tenant, name string) (Partner, error) {
	p, err := r.scan(r.pool.QueryRow(ctx, `SELECT `+partnerCols+` FROM fairway.partners WHERE tenant_id = $1 AND partner = $2`, tenant, name), true)
	if err != nil {
		return Partner{}, r.wrap("get", tenant, name, err)
	}
	return p, nil
}

// List returns the partners of tenant (every tenant when tenant is ""),
// ordered by tenant and name, without their secrets (SecretSet tells that
// one is stored).
func (r *Registry) List(ctx context.Context, tenant string) ([]Partner, error) {
	rows, err := r.pool.Query(ctx, `SELECT `+partnerCols+` FROM fairway.partners WHERE $1 = '' OR tenant_id = $1 ORDER BY tenant_id, partner`, tenant)
	if err != nil {
		return nil, fmt.Errorf("b2b: list partners: %w", err)
	}
	defer rows.Close()
	var out []Partner
	for rows.Next() {
		p, err := r.scan(rows, false)
		if err != nil {
			return nil, fmt.Errorf("b2b: list partners: %w", err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("b2b: list partners: %w", err)
	}
	return out, nil
}

func (r *Registry) wrap(op, tenant, name string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %s/%s", ErrUnknownPartner, tenant, name)
	case errors.Is(err, ErrInvalidPartner), errors.Is(err, ErrSecretKey):
		return err
	}
	return fmt.Errorf("b2b: %s partner %s/%s: %w", op, tenant, name, err)
}

// scan reads one row of partnerCols; withSecret decrypts the secrets,
// else only SecretSet and SecretEncrypted are filled.
func (r *Registry) scan(row pgx.Row, withSecret bool) (Partner, error) {
	var p Partner
	var stored, previous []byte
	var timeoutMS int64
	var ops []string
	var signing string
	var previousUntil *time.Time
	var filter, mapping *string
	if err := row.Scan(&p.Tenant, &p.Name, &p.URL, &stored, &p.Enabled, &timeoutMS, &p.MaxRequestBytes, &ops, &p.CreatedAt, &p.UpdatedAt,
		&signing, &previous, &previousUntil, &filter, &mapping, &p.MaxEvents, &p.RequestsPerSec); err != nil {
		return Partner{}, err
	}
	p.Transform = transformOf(filter, mapping)
	var err error
	if p.Signing, err = ParseSigning(signing); err != nil {
		return Partner{}, err
	}
	if previousUntil != nil {
		p.PreviousSecretUntil = *previousUntil
	}
	p.Timeout = time.Duration(timeoutMS) * time.Millisecond
	if ops != nil {
		p.Ops = make([]events.Op, len(ops))
		for i, o := range ops {
			p.Ops[i] = events.Op(o)
		}
	}
	p.SecretSet = len(stored) > 1
	p.SecretEncrypted = len(stored) > 0 && stored[0] == secretAESGCM
	if withSecret {
		if p.Secret, _, err = r.box.open(p.Tenant, p.Name, stored); err != nil {
			return Partner{}, err
		}
		if previous != nil {
			if p.PreviousSecret, _, err = r.box.open(p.Tenant, p.Name, previous); err != nil {
				return Partner{}, err
			}
		}
	}
	return p, nil
}

func opsArg(ops []events.Op) []string {
	if ops == nil {
		return nil
	}
	out := make([]string, len(ops))
	for i, o := range ops {
		out[i] = string(o)
	}
	return out
}

// Partners returns the names of tenant's enabled partners, sorted: each is
// a destination "b2b:<name>" to dispatch to. It implements
// internal/dispatch.PartnerSource; disabled partners are left out so that
// their backlog waits in the stream instead of being dispatched.
func (r *Registry) Partners(ctx context.Context, tenant string) ([]string, error) {
	rows, err := r.pool.Query(ctx, `SELECT partner FROM fairway.partners WHERE tenant_id = $1 AND enabled ORDER BY partner`, tenant)
	if err != nil {
		return nil, fmt.Errorf("b2b: partners of %s: %w", tenant, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("b2b: partners of %s: %w", tenant, err)
	}
	return names, nil
}
