package tenancy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults and bounds for Config.
const (
	LeaseTTLDefault        = 30 * time.Second
	LeaseTTLMin            = 100 * time.Millisecond
	DefaultMaxSlotsDefault = 1
	DefaultWeightDefault   = 1
	// MaxSlotsMax bounds a limit: one row per slot is created up front.
	MaxSlotsMax = 10_000
)

// NotifyChannel is the PostgreSQL channel a release (or a raised limit)
// notifies, with payload "<tenant> <dest>", or "<tenant> <dest> <n>" when
// one statement freed n > 1 of the pair's slots; "<tenant> <dest> cursor"
// and "<tenant> <dest> weight" for an operator's change to the pair's
// cursor or weight; "members" when a dispatcher joins or leaves (see
// Released).
const NotifyChannel = "fairway_released"

// PartnersChannel is the PostgreSQL channel a change to a B2B partner
// notifies (NotifyPartner), with payload "<tenant> <partner> <change>".
// It is apart from NotifyChannel so that the sinks, which follow partner
// changes only, do not receive every slot release.
const PartnersChannel = "fairway_partners"

// Config configures a Store.
type Config struct {
	// LeaseTTL is how long a slot lease lives unless extended. A slot held
	// by a crashed process is free again after at most this long.
	// Default 30s (LeaseTTLDefault), minimum 100ms.
	LeaseTTL time.Duration
	// DefaultMaxSlots is max_slots for a (tenant, destination) seen for the
	// first time. Default 1.
	DefaultMaxSlots int
	// DefaultWeight is the weight of a tenant seen for the first time.
	// Default 1.
	DefaultWeight int
	// Logger receives the few events worth logging (listener reconnects).
	// Default: discard.
	Logger *slog.Logger
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c *Config) WithDefaults() *Config {
	if c == nil {
		c = &Config{}
	}
	return &Config{
		LeaseTTL:        cmp.Or(c.LeaseTTL, LeaseTTLDefault),
		DefaultMaxSlots: cmp.Or(c.DefaultMaxSlots, DefaultMaxSlotsDefault),
		DefaultWeight:   cmp.Or(c.DefaultWeight, DefaultWeightDefault),
		Logger:          cmp.Or(c.Logger, slog.New(slog.DiscardHandler)),
	}
}

func (c *Config) validate() error {
	if c.LeaseTTL < LeaseTTLMin {
		return fmt.Errorf("%w: LeaseTTL %s below %s", ErrInvalidArgument, c.LeaseTTL, LeaseTTLMin)
	}
	if c.DefaultMaxSlots < 1 || c.DefaultMaxSlots > MaxSlotsMax {
		return fmt.Errorf("%w: DefaultMaxSlots %d not in [1, %d]", ErrInvalidArgument, c.DefaultMaxSlots, MaxSlotsMax)
	}
	if c.DefaultWeight < 1 {
		return fmt.Errorf("%w: DefaultWeight %d below 1", ErrInvalidArgument, c.DefaultWeight)
	}
	return nil
}

// Store is tenancy state in PostgreSQL: tenants, tokens, limits, slot
// leases, cursors. It is safe for concurrent use; several processes may
// share one database. The schema is applied by internal/migrate.
type Store struct {
	pool  *pgxpool.Pool
	cfg   *Config
	log   *slog.Logger
	ttlUS int64 // LeaseTTL in microseconds, as bound into SQL

	releases   *grouper[Lease, error]
	dispatches *grouper[dispatchArgs, dispatchResult]
}

// New returns a Store on pool.
func New(pool *pgxpool.Pool, cfg *Config) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: nil pool", ErrInvalidArgument)
	}
	c := cfg.WithDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	s := &Store{pool: pool, cfg: c, log: c.Logger, ttlUS: c.LeaseTTL.Microseconds()}
	s.releases, s.dispatches = s.newReleaseGroup(), s.newDispatchGroup()
	return s, nil
}

// LeaseTTL is the configured lease lifetime.
func (s *Store) LeaseTTL() time.Duration { return s.cfg.LeaseTTL }

type pair struct{ tenant, dest string }

// ensurePairs creates, with defaults, whatever is missing of the tenants,
// their limits rows, slot rows and cursors. Callers use it only on the miss
// path (a statement found no limits row); existing rows are left alone.
// The batch runs as one implicit transaction in one round trip, and
// inserts in key order, so that two callers creating overlapping pairs
// at once (dispatchers loading new tenants) wait for each other rather
// than deadlock.
func (s *Store) ensurePairs(ctx context.Context, pairs []pair) error {
	ts := make([]string, len(pairs))
	ds := make([]string, len(pairs))
	for i, p := range pairs {
		ts[i], ds[i] = p.tenant, p.dest
	}
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO fairway.tenants (id, weight)
		SELECT DISTINCT t, $2::int FROM unnest($1::text[]) t ORDER BY 1
		ON CONFLICT (id) DO NOTHING`, ts, s.cfg.DefaultWeight)
	b.Queue(`INSERT INTO fairway.limits (tenant, dest, max_slots)
		SELECT DISTINCT t, d, $3::int FROM unnest($1::text[], $2::text[]) AS p(t, d) ORDER BY 1, 2
		ON CONFLICT (tenant, dest) DO NOTHING`, ts, ds, s.cfg.DefaultMaxSlots)
	b.Queue(`INSERT INTO fairway.slots (tenant, dest, slot_no)
		SELECT l.tenant, l.dest, g
		FROM fairway.limits l
		JOIN (SELECT DISTINCT t, d FROM unnest($1::text[], $2::text[]) AS p(t, d)) p ON l.tenant = p.t AND l.dest = p.d
		CROSS JOIN LATERAL generate_series(0, l.max_slots - 1) g
		ORDER BY 1, 2, 3
		ON CONFLICT DO NOTHING`, ts, ds)
	b.Queue(`INSERT INTO fairway.cursors (tenant, dest)
		SELECT DISTINCT t, d FROM unnest($1::text[], $2::text[]) AS p(t, d) ORDER BY 1, 2
		ON CONFLICT DO NOTHING`, ts, ds)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("tenancy: create defaults: %w", err)
	}
	return nil
}

func isFKViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23503"
}

func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}
