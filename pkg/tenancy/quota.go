package tenancy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/jackc/pgx/v5"
)

// QuotaKind names one of a tenant's ingest quotas, as the ingest API's
// refusals, its metrics and the CLI spell it.
type QuotaKind string

// The ingest quotas.
const (
	QuotaEventsPerSec QuotaKind = "events_per_sec"
	QuotaBytesPerSec  QuotaKind = "bytes_per_sec"
	QuotaMaxBacklog   QuotaKind = "max_backlog"
)

// QuotaKinds lists every QuotaKind.
var QuotaKinds = []QuotaKind{QuotaEventsPerSec, QuotaBytesPerSec, QuotaMaxBacklog}

// Quota is what ingest takes in for one tenant. Each field is off at 0;
// the zero Quota is no quota at all, which is every tenant's default.
type Quota struct {
	Tenant string
	// EventsPerSec is the sustained rate, in events per second, at which
	// ingest takes the tenant's events in. EventsBurst is how many it
	// takes at once from a full bucket, and so the most events one request
	// may carry. Default burst: one second's worth (EventsPerSec).
	EventsPerSec, EventsBurst int64
	// BytesPerSec is the sustained rate in payload bytes per second;
	// BytesBurst is its bucket, default one second's worth.
	BytesPerSec, BytesBurst int64
	// MaxBacklog caps the events waiting in PRODUCTS for the tenant's
	// slowest destination: while that many or more wait, ingest takes no
	// more of the tenant's events.
	MaxBacklog int64
	// ChangedAt is when the quota was last set.
	ChangedAt time.Time
}

// Off reports whether no quota is set.
func (q Quota) Off() bool { return q.EventsPerSec == 0 && q.BytesPerSec == 0 && q.MaxBacklog == 0 }

// Rated reports whether a rate quota (events or bytes per second) is set.
func (q Quota) Rated() bool { return q.EventsPerSec > 0 || q.BytesPerSec > 0 }

// WithDefaults returns q with the burst of each rate that is set, when 0,
// defaulted to one second's worth.
func (q Quota) WithDefaults() Quota {
	if q.EventsPerSec > 0 && q.EventsBurst == 0 {
		q.EventsBurst = q.EventsPerSec
	}
	if q.BytesPerSec > 0 && q.BytesBurst == 0 {
		q.BytesBurst = q.BytesPerSec
	}
	return q
}

func (q Quota) validate() error {
	var errs []string
	for _, f := range []struct {
		name string
		v    int64
	}{{"events per second", q.EventsPerSec}, {"burst", q.EventsBurst}, {"bytes per second", q.BytesPerSec},
		{"bytes burst", q.BytesBurst}, {"max backlog", q.MaxBacklog}} {
		if f.v < 0 {
			errs = append(errs, fmt.Sprintf("%s %d is negative", f.name, f.v))
		}
	}
	if q.EventsPerSec == 0 && q.EventsBurst != 0 {
		errs = append(errs, "a burst needs an events-per-second rate")
	}
	if q.BytesPerSec == 0 && q.BytesBurst != 0 {
		errs = append(errs, "a bytes burst needs a bytes-per-second rate")
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidArgument, strings.Join(errs, "; "))
	}
	return nil
}

// String says the quota in a few words ("-" for none), as the CLI shows it.
func (q Quota) String() string {
	var parts []string
	if q.EventsPerSec > 0 {
		parts = append(parts, fmt.Sprintf("%d events/s (burst %d)", q.EventsPerSec, q.EventsBurst))
	}
	if q.BytesPerSec > 0 {
		parts = append(parts, fmt.Sprintf("%d bytes/s (burst %d)", q.BytesPerSec, q.BytesBurst))
	}
	if q.MaxBacklog > 0 {
		parts = append(parts, fmt.Sprintf("max backlog %d", q.MaxBacklog))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

const quotaCols = `tenant, events_per_sec, events_burst, bytes_per_sec, bytes_burst, max_backlog, changed_at`

func scanQuota(row pgx.Row) (Quota, error) {
	var q Quota
	err := row.Scan(&q.Tenant, &q.EventsPerSec, &q.EventsBurst, &q.BytesPerSec, &q.BytesBurst, &q.MaxBacklog, &q.ChangedAt)
	return q, err
}

// SetQuota sets q.Tenant's ingest quota, with WithDefaults applied; a
// quota that is Off clears it. Every ingest replica applies it within its
// quota refresh (a second by default). The token buckets keep their state,
// so lowering a rate does not hand out a fresh burst. ErrUnknownTenant if
// the tenant does not exist.
func (s *Store) SetQuota(ctx context.Context, q Quota) error {
	if err := events.ValidateTenant(q.Tenant); err != nil {
		return err
	}
	if err := q.validate(); err != nil {
		return fmt.Errorf("set quota of %s: %w", q.Tenant, err)
	}
	q = q.WithDefaults()
	if q.Off() {
		return s.ClearQuota(ctx, q.Tenant)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO fairway.quotas (tenant, events_per_sec, events_burst, bytes_per_sec, bytes_burst, max_backlog)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (tenant) DO UPDATE SET events_per_sec = EXCLUDED.events_per_sec, events_burst = EXCLUDED.events_burst,
			bytes_per_sec = EXCLUDED.bytes_per_sec, bytes_burst = EXCLUDED.bytes_burst, max_backlog = EXCLUDED.max_backlog,
			changed_at = now()`,
		q.Tenant, q.EventsPerSec, q.EventsBurst, q.BytesPerSec, q.BytesBurst, q.MaxBacklog)
	switch {
	case isFKViolation(err):
		return fmt.Errorf("set quota of %s: %w", q.Tenant, ErrUnknownTenant)
	case err != nil:
		return fmt.Errorf("set quota of %s: %w", q.Tenant, err)
	}
	return nil
}

// ClearQuota removes every quota of tenant. ErrUnknownTenant if the tenant
// does not exist.
func (s *Store) ClearQuota(ctx context.Context, tenant string) error {
	if err := events.ValidateTenant(tenant); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM fairway.quotas WHERE tenant = $1`, tenant)
	if err != nil {
		return fmt.Errorf("clear quota of %s: %w", tenant, err)
	}
	if tag.RowsAffected() == 0 {
		if _, err := s.Tenant(ctx, tenant); err != nil {
			return err
		}
	}
	return nil
}

// Quota returns tenant's quota: the zero Quota (with Tenant set) when none
// is set. ErrUnknownTenant if the tenant does not exist.
func (s *Store) Quota(ctx context.Context, tenant string) (Quota, error) {
	if err := events.ValidateTenant(tenant); err != nil {
		return Quota{}, err
	}
	q, err := scanQuota(s.pool.QueryRow(ctx, `SELECT `+quotaCols+` FROM fairway.quotas WHERE tenant = $1`, tenant))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		if _, err := s.Tenant(ctx, tenant); err != nil {
			return Quota{}, err
		}
		return Quota{Tenant: tenant}, nil
	case err != nil:
		return Quota{}, fmt.Errorf("quota of %s: %w", tenant, err)
	}
	return q, nil
}

// Quotas lists every tenant's quota that is set, ordered by tenant. It is
// one read of a table that holds only those rows; ingest replicas reload
// it every second.
func (s *Store) Quotas(ctx context.Context) ([]Quota, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+quotaCols+` FROM fairway.quotas ORDER BY tenant`)
	if err != nil {
		return nil, fmt.Errorf("list quotas: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Quota, error) { return scanQuota(r) })
	if err != nil {
		return nil, fmt.Errorf("list quotas: %w", err)
	}
	return out, nil
}

// QuotaTake is the outcome of TakeQuota.
type QuotaTake struct {
	// Refused names the rate quota that refused the take; "" when it was
	// taken (or the tenant has no rate quota).
	Refused QuotaKind
	// Limit and Burst are the refusing quota's rate and burst.
	Limit, Burst int64
	// Wait is how long until the take fits (when it can).
	Wait time.Duration
	// Never says the take is larger than the refusing quota's burst: it
	// never fits and must be split.
	Never bool
}

// takeQuotaSQL takes $2 events and $3 payload bytes from the token buckets
// of tenant $1, both or neither; $4 (clamp) caps each take at its burst.
// It is one statement, so one transaction: the row lock (FOR UPDATE)
// serialises the takes of every ingest replica, and the decision is made
// on the newest row (EvalPlanQual). A bucket is the generic cell rate
// algorithm's theoretical arrival time (tat): n fits when
// max(tat, now) + n/rate <= now + burst/rate, and taking n moves tat
// there. ew and bw are how many seconds each take must wait (<= 0: it
// fits now). now() is the statement's start; tat never moves back, so a
// second is credited at most once, and over any window of length T the
// takes that succeed sum to at most burst + rate*T. A take lost in a
// database crash only lets a little more in, so it commits without waiting
// for the WAL flush.
const takeQuotaSQL = `WITH a AS (` + asyncCommitSQL + `), q AS (
	SELECT events_per_sec AS er, events_burst AS eb, bytes_per_sec AS br, bytes_burst AS bb,
	       GREATEST(events_tat, now()) AS et, GREATEST(bytes_tat, now()) AS bt,
	       CASE WHEN $4 THEN LEAST($2::bigint, events_burst) ELSE $2::bigint END AS en,
	       CASE WHEN $4 THEN LEAST($3::bigint, bytes_burst) ELSE $3::bigint END AS bn
	FROM fairway.quotas WHERE tenant = $1 FOR UPDATE
), d AS (
	SELECT *,
	       CASE WHEN er = 0 THEN 0 ELSE extract(epoch FROM et - now())::float8 - (eb - en)::float8 / er END AS ew,
	       CASE WHEN br = 0 THEN 0 ELSE extract(epoch FROM bt - now())::float8 - (bb - bn)::float8 / br END AS bw
	FROM q
), u AS (
	UPDATE fairway.quotas SET
		events_tat = CASE WHEN d.er = 0 THEN events_tat ELSE d.et + make_interval(secs => d.en::float8 / d.er) END,
		bytes_tat  = CASE WHEN d.br = 0 THEN bytes_tat ELSE d.bt + make_interval(secs => d.bn::float8 / d.br) END
	FROM d WHERE tenant = $1 AND d.ew <= 0 AND d.bw <= 0
	RETURNING 1
)
SELECT er, eb, en, ew, br, bb, bn, bw, (SELECT count(*) FROM u) + 0 * (SELECT count(*) FROM a) FROM d`

// TakeQuota takes n events and bytes payload bytes from tenant's
// rate quotas, both or neither, in one statement shared by every ingest
// replica. A take larger than a burst never fits (QuotaTake.Never) unless
// clamp caps it at the burst: a CSV import clamps, so a single event
// larger than the bytes burst goes in on a full bucket rather than never.
// A tenant without a rate quota always gets what it asks for.
func (s *Store) TakeQuota(ctx context.Context, tenant string, n, bytes int64, clamp bool) (QuotaTake, error) {
	if err := events.ValidateTenant(tenant); err != nil {
		return QuotaTake{}, err
	}
	if n < 0 || bytes < 0 {
		return QuotaTake{}, fmt.Errorf("take quota of %s: %w: %d events, %d bytes", tenant, ErrInvalidArgument, n, bytes)
	}
	var (
		er, eb, en, br, bb, bn int64
		ew, bw                 float64
		taken                  int64
	)
	err := s.pool.QueryRow(ctx, takeQuotaSQL, tenant, n, bytes, clamp).Scan(&er, &eb, &en, &ew, &br, &bb, &bn, &bw, &taken)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return QuotaTake{}, nil
	case err != nil:
		return QuotaTake{}, fmt.Errorf("take quota of %s: %w", tenant, err)
	case taken > 0:
		return QuotaTake{}, nil
	}
	ev := QuotaTake{Refused: QuotaEventsPerSec, Limit: er, Burst: eb, Never: en > eb, Wait: secs(ew)}
	by := QuotaTake{Refused: QuotaBytesPerSec, Limit: br, Burst: bb, Never: bn > bb, Wait: secs(bw)}
	switch {
	case er > 0 && ev.Never:
		return ev, nil
	case br > 0 && by.Never:
		return by, nil
	case ew >= bw:
		return ev, nil
	default:
		return by, nil
	}
}

func secs(s float64) time.Duration {
	if s <= 0 || math.IsNaN(s) {
		return 0
	}
	return time.Duration(math.Ceil(s * float64(time.Second)))
}

// FirstUndispatched returns, per priority, the first PRODUCTS sequence
// that some destination of tenant has not dispatched yet: the lowest,
// over the tenant's destinations, of that priority's cursor (a replay runs
// in a lane of its own and does not count), or 1 when no destination has
// seen the tenant. The tenant's events of each priority from there on are
// its backlog for its slowest destination. One indexed read.
func (s *Store) FirstUndispatched(ctx context.Context, tenant string) (map[events.Priority]uint64, error) {
	if err := events.ValidateTenant(tenant); err != nil {
		return nil, err
	}
	var high, normal, bulk int64
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(min(high_next), 1), COALESCE(min(next_seq), 1), COALESCE(min(bulk_next), 1)
		FROM fairway.cursors WHERE tenant = $1`, tenant).Scan(&high, &normal, &bulk)
	if err != nil {
		return nil, fmt.Errorf("first undispatched of %s: %w", tenant, err)
	}
	return map[events.Priority]uint64{events.PriorityHigh: uint64(high), events.PriorityNormal: uint64(normal), events.PriorityBulk: uint64(bulk)}, nil
}
