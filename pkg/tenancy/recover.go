package tenancy

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fairwayhq/fairway/pkg/events"
)

// Orphan is a dispatched batch whose lease ended without its holder
// releasing it: the lease expired and was swept or its slot reclaimed, or
// the dispatcher handed the batch back unpublished (ReturnBatches). Its
// events may never have been applied, so it must be dispatched again.
//
// Orphans are recorded by the database itself (trigger slots_keep_orphan,
// migration 00008) in the statement that ends the expired lease, so no code
// path — Sweep, Acquire, AcquireMany, Dispatch, a late Release — can lose
// one. A late Release after expiry also leaves an orphan: the batch is then
// applied twice, which idempotent sinks absorb; sinks avoid it by extending
// their lease while they work.
type Orphan struct {
	Tenant, Dest string
	// Slot and Token name the lease that ended; with Tenant and Dest they
	// identify the orphan.
	Slot  int
	Token int64
	// FromSeq..ToSeq is the batch, as Dispatch recorded it.
	FromSeq, ToSeq uint64
	// Holder held the lease that ended.
	Holder     string
	OrphanedAt time.Time
	// Priority is the priority of the batch's events; "" when it holds
	// every event of the tenant in its range (a replay's, a redrive's).
	Priority events.Priority
}

// Orphans lists up to limit orphaned batches of dest, oldest first. Expired
// leases that no statement has ended yet are not orphans yet: Sweep ends
// them (and so records them) first.
func (s *Store) Orphans(ctx context.Context, dest string, limit int) ([]Orphan, error) {
	if err := ValidDest(dest); err != nil {
		return nil, err
	}
	if limit < 1 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, `SELECT tenant, dest, slot_no, epoch, from_seq, to_seq, holder, orphaned_at, priority
		FROM fairway.orphans WHERE dest = $1 ORDER BY orphaned_at, tenant, slot_no LIMIT $2`, dest, limit)
	if err != nil {
		return nil, fmt.Errorf("orphans of %s: %w", dest, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Orphan, error) {
		var (
			o        Orphan
			from, to int64
			rank     *int16
		)
		err := r.Scan(&o.Tenant, &o.Dest, &o.Slot, &o.Token, &from, &to, &o.Holder, &o.OrphanedAt, &rank)
		o.FromSeq, o.ToSeq = uint64(from), uint64(to)
		if rank != nil {
			o.Priority = events.Priorities[*rank]
		}
		return o, err
	})
	if err != nil {
		return nil, fmt.Errorf("orphans of %s: %w", dest, err)
	}
	return out, nil
}

// redispatchStatement is redispatchSQL with candidates, the slots it may
// take: a live batch's orphan takes a live slot (candidateSQL), a replay
// batch's one of its replay's slots (replayCandidateSQL), so a replay's
// orphans never wait in front of the pair's live events.
//
// redispatchSQL: $1 tenant, $2 dest, $3 orphan slot, $4 orphan token,
// $5 holder, $6 ttl µs. It deletes the orphan (the row lock fences
// concurrent redispatchers: a second one blocks, then deletes nothing), takes
// a free slot by the same rules as Acquire (candidateSQL: the Limit
// invariant holds) and records the orphan's range on the new lease and in
// the batch log. The caller rolls back when no slot was free.
func redispatchStatement(candidates string) string {
	return `WITH o AS (
	DELETE FROM fairway.orphans
	WHERE tenant = $1 AND dest = $2 AND slot_no = $3 AND epoch = $4
	RETURNING from_seq, to_seq, priority
), c AS (SELECT s.slot_no ` + fmt.Sprintf(candidates, "$1", "$2", "1") + `
), u AS (
	UPDATE fairway.slots s SET ` + fmt.Sprintf(takeSetSQL, "$6", "o.priority") + `, holder = $5, from_seq = o.from_seq, to_seq = o.to_seq
	FROM c, o WHERE s.tenant = $1 AND s.dest = $2 AND s.slot_no = c.slot_no AND ` + freeSQL + `
	RETURNING s.slot_no, s.epoch, s.expires_at, s.from_seq, s.to_seq
), b AS (
	INSERT INTO fairway.batches (tenant, dest, from_seq, to_seq, slot_no, epoch, holder)
	SELECT $1, $2, from_seq, to_seq, slot_no, epoch, $5 FROM u
)
SELECT (SELECT count(*) FROM o), u.slot_no, u.epoch, u.expires_at, u.from_seq, u.to_seq, ` + statusSQL + `
FROM (VALUES (1)) v LEFT JOIN u ON true`
}

var (
	redispatchSQL       = redispatchStatement(candidateSQL)
	redispatchReplaySQL = redispatchStatement(replayCandidateSQL)
)

// Redispatch leases a slot of the orphan's (tenant, dest) for holder and
// records the orphan's range on it, in one transaction that also removes
// the orphan. The new lease has a new token, so the work item published for
// it is new work, not a duplicate. ErrAtLimit (or ErrPaused) when no slot is
// free — the orphan stays; ErrStaleLease when the orphan is gone (another
// dispatcher re-dispatched it).
func (s *Store) Redispatch(ctx context.Context, o Orphan, holder string) (Lease, error) {
	if err := validPair(o.Tenant, o.Dest); err != nil {
		return Lease{}, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Lease{}, fmt.Errorf("redispatch %s/%s %d..%d: %w", o.Tenant, o.Dest, o.FromSeq, o.ToSeq, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var (
		deleted  int
		slot     *int
		token    *int64
		expires  *time.Time
		from, to *int64
		status   *string
	)
	query := redispatchSQL
	if o.Slot < 0 { // a replay's batch: on the replay's slots
		query = redispatchReplaySQL
	}
	err = tx.QueryRow(ctx, query, o.Tenant, o.Dest, o.Slot, o.Token, holder, s.ttlUS).
		Scan(&deleted, &slot, &token, &expires, &from, &to, &status)
	if err != nil {
		return Lease{}, fmt.Errorf("redispatch %s/%s %d..%d: %w", o.Tenant, o.Dest, o.FromSeq, o.ToSeq, err)
	}
	switch {
	case deleted == 0:
		return Lease{}, fmt.Errorf("redispatch %s/%s %d..%d: orphan gone: %w", o.Tenant, o.Dest, o.FromSeq, o.ToSeq, ErrStaleLease)
	case slot == nil:
		return Lease{}, fmt.Errorf("redispatch %s/%s %d..%d: %w", o.Tenant, o.Dest, o.FromSeq, o.ToSeq, missReason(status))
	}
	if err := tx.Commit(ctx); err != nil {
		return Lease{}, fmt.Errorf("redispatch %s/%s: commit: %w", o.Tenant, o.Dest, err)
	}
	return Lease{
		ID: leaseID(o.Tenant, o.Dest, *slot, *token), Tenant: o.Tenant, Dest: o.Dest, Slot: *slot, Token: *token,
		Holder: holder, ExpiresAt: *expires, FromSeq: uint64(*from), ToSeq: uint64(*to),
	}, nil
}

// ReturnBatches hands back dispatched batches whose work items were never
// published: in one statement it frees each lease's slot (waking
// listeners) and records its batch as an orphan, so any dispatcher
// re-dispatches it at once instead of after the lease time. Leases that are
// no longer current (fenced out, already released) or carry no batch are
// skipped: their batch is either someone else's now or already recorded.
// It returns how many were handed back.
func (s *Store) ReturnBatches(ctx context.Context, leases []Lease) (int, error) {
	if len(leases) == 0 {
		return 0, nil
	}
	ts := make([]string, len(leases))
	ds := make([]string, len(leases))
	ns := make([]int32, len(leases))
	es := make([]int64, len(leases))
	hs := make([]string, len(leases))
	for i, l := range leases {
		tenant, dest, slot, token, err := ParseLeaseID(l.ID)
		if err != nil {
			return 0, err
		}
		if token != l.Token {
			token = math.MinInt64 // matches nothing
		}
		ts[i], ds[i], ns[i], es[i], hs[i] = tenant, dest, int32(slot), token, l.Holder
	}
	// The UPDATE of an expired lease fires the trigger, which records the
	// orphan itself; the INSERT below then conflicts and does nothing.
	var n int
	err := s.pool.QueryRow(ctx, `WITH x AS (
			SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[], $5::text[]) AS x(t, d, n, e, h)
		), r AS (
			UPDATE fairway.slots s SET expires_at = NULL, holder = NULL FROM x
			WHERE s.tenant = x.t AND s.dest = x.d AND s.slot_no = x.n AND s.epoch = x.e
			  AND s.expires_at IS NOT NULL AND s.from_seq IS NOT NULL
			RETURNING s.tenant, s.dest, s.slot_no, s.epoch, s.from_seq, s.to_seq, s.priority, x.h
		), o AS (
			INSERT INTO fairway.orphans (tenant, dest, slot_no, epoch, from_seq, to_seq, holder, priority)
			SELECT tenant, dest, slot_no, epoch, from_seq, to_seq, coalesce(h, ''), priority FROM r
			ON CONFLICT DO NOTHING
		), n AS (`+notifyFreedSQL+`
		) SELECT (SELECT count(*) FROM r) + 0 * (SELECT count(*) FROM n)`, ts, ds, ns, es, hs).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("return %d batches: %w", len(leases), err)
	}
	return n, nil
}

// PairState is what a dispatcher needs to know about one (tenant, dest):
// its cursor and its effective weight (the destination's weight override,
// else the tenant's weight).
type PairState struct {
	Tenant string
	// NextSeq is the cursor of the tenant's normal events; HighNext and
	// BulkNext those of its high and bulk ones (NextFor).
	NextSeq, HighNext, BulkNext uint64
	Weight                      int
	// ReplayNext, when not 0 and below ReplayUntil, says the pair is
	// replaying (Rewind) in its replay lane: ReplayNext is the next
	// sequence the replay dispatches, ReplayUntil (exclusive) where it
	// ends, at ReplayRate events per second (0: the dispatcher's default;
	// ReplayUnthrottled: not throttled).
	ReplayNext, ReplayUntil uint64
	ReplayRate              int
	// Rate caps the events per second dispatched for the pair (SetDestRate;
	// 0: no cap).
	Rate int
}

// NextFor is the cursor of the tenant's events of priority p.
func (p PairState) NextFor(pr events.Priority) uint64 {
	switch pr {
	case events.PriorityHigh:
		return p.HighNext
	case events.PriorityBulk:
		return p.BulkNext
	}
	return p.NextSeq
}

// Replaying says whether the pair's replay lane has events to dispatch.
func (p PairState) Replaying() bool { return p.ReplayNext != 0 && p.ReplayNext < p.ReplayUntil }

// PairStates lists every known (tenant, dest) of dest with its cursor and
// effective weight, in one query.
func (s *Store) PairStates(ctx context.Context, dest string) ([]PairState, error) {
	return s.pairStates(ctx, dest, nil)
}

// PairStatesOf is PairStates for the given tenants (none: none), in one
// query. A pair never seen is created with defaults first, as Cursor
// does, and a tenant never seen too; that takes an insert and a second
// query.
func (s *Store) PairStatesOf(ctx context.Context, dest string, tenants []string) ([]PairState, error) {
	if len(tenants) == 0 {
		return nil, nil
	}
	for _, t := range tenants {
		if err := validPair(t, dest); err != nil {
			return nil, err
		}
	}
	out, err := s.pairStates(ctx, dest, tenants)
	if err != nil || len(out) >= len(tenants) {
		return out, err
	}
	found := make(map[string]bool, len(out))
	for _, p := range out {
		found[p.Tenant] = true
	}
	var missing []pair
	for _, t := range tenants {
		if !found[t] {
			found[t] = true // once, should tenants hold it twice
			missing = append(missing, pair{t, dest})
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	if err := s.ensurePairs(ctx, missing); err != nil {
		return nil, err
	}
	names := make([]string, len(missing))
	for i, m := range missing {
		names[i] = m.tenant
	}
	more, err := s.pairStates(ctx, dest, names)
	if err != nil {
		return nil, err
	}
	return append(out, more...), nil
}

// PairState is PairStates for one tenant. ErrUnknownTenant when the pair
// was never seen.
func (s *Store) PairState(ctx context.Context, tenant, dest string) (PairState, error) {
	if err := validPair(tenant, dest); err != nil {
		return PairState{}, err
	}
	ps, err := s.pairStates(ctx, dest, []string{tenant})
	if err != nil {
		return PairState{}, err
	}
	if len(ps) == 0 {
		return PairState{}, fmt.Errorf("pair state %s/%s: %w", tenant, dest, ErrUnknownTenant)
	}
	return ps[0], nil
}

// pairStates lists dest's pairs of tenants (nil: of every tenant).
func (s *Store) pairStates(ctx context.Context, dest string, tenants []string) ([]PairState, error) {
	if err := ValidDest(dest); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT l.tenant, c.next_seq, c.high_next, c.bulk_next, CASE WHEN l.weight > 0 THEN l.weight ELSE t.weight END,
			COALESCE(c.replay_next, 0), COALESCE(c.replay_until, 0), CASE WHEN c.replay_rate = 0 THEN -1 ELSE COALESCE(c.replay_rate, 0) END,
			l.events_per_sec
		FROM fairway.limits l
		JOIN fairway.tenants t ON t.id = l.tenant
		JOIN fairway.cursors c ON c.tenant = l.tenant AND c.dest = l.dest
		WHERE l.dest = $1 AND ($2::text[] IS NULL OR l.tenant = ANY($2::text[]))`, dest, tenants)
	if err != nil {
		return nil, fmt.Errorf("pair states of %s: %w", dest, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PairState, error) {
		var (
			p                PairState
			next, high, bulk int64
			rnext, until     int64
		)
		err := r.Scan(&p.Tenant, &next, &high, &bulk, &p.Weight, &rnext, &until, &p.ReplayRate, &p.Rate)
		p.NextSeq, p.HighNext, p.BulkNext = uint64(next), uint64(high), uint64(bulk)
		p.ReplayNext, p.ReplayUntil = uint64(rnext), uint64(until)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("pair states of %s: %w", dest, err)
	}
	return out, nil
}
