package tenancy

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
)

// RewindCursor moves the cursor of a known (tenant, dest) back to to and
// returns where it was; see Rewind.
func (s *Store) RewindCursor(ctx context.Context, tenant, dest string, to uint64) (prev uint64, err error) {
	return s.Rewind(ctx, Rewind{Tenant: tenant, Dest: dest, From: to})
}

// ReplayUnthrottled as a replay rate (Rewind.Rate, PairState.ReplayRate)
// means as fast as the tenant's slots allow.
const ReplayUnthrottled = -1

// Rewind says which range of (Tenant, Dest) to dispatch again.
type Rewind struct {
	Tenant, Dest string
	// From is the first sequence to dispatch again (≥ 1).
	From uint64
	// Last, when not 0, ends the replay: the dispatcher's first move of
	// the cursor past Last (the dispatch of the batch that holds it) makes
	// it jump back to where it was, so the events after Last are not
	// dispatched again (except those in that same batch).
	Last uint64
	// Rate is how many events per second the dispatcher may replay: 0 for
	// its default (dispatch.Config.ReplayRate), ReplayUnthrottled for as
	// fast as the tenant's slots allow.
	Rate int
}

// Rewind moves the cursor of a known (tenant, dest) back to r.From and
// returns where it was, atomically, so a replay knows exactly which range
// it re-dispatches. It marks the cursor row as replaying up to where the
// cursor was (PairState.ReplayUntil) at r.Rate, and notifies dispatchers
// (Released.Cursor) so they pick the rewind up at once. Moving forward is
// refused (ErrInvalidArgument): that would skip events. ErrUnknownTenant
// when the pair was never seen. A bounded rewind during another bounded
// replay keeps the later end and the first replay's resume point.
func (s *Store) Rewind(ctx context.Context, r Rewind) (prev uint64, err error) {
	tenant, dest, from, last := r.Tenant, r.Dest, r.From, r.Last
	if err := validPair(tenant, dest); err != nil {
		return 0, err
	}
	if from < 1 || from > math.MaxInt64 || last > math.MaxInt64 || (last > 0 && last < from) {
		return 0, fmt.Errorf("rewind %s/%s: %w: range %d..%d", tenant, dest, ErrInvalidArgument, from, last)
	}
	// Stored as NULL for the default, 0 for unthrottled.
	var rate *int
	switch {
	case r.Rate < ReplayUnthrottled:
		return 0, fmt.Errorf("rewind %s/%s: %w: rate %d", tenant, dest, ErrInvalidArgument, r.Rate)
	case r.Rate == ReplayUnthrottled:
		rate = new(int)
	case r.Rate > 0:
		rate = &r.Rate
	}
	var old int64
	err = s.pool.QueryRow(ctx, `
		WITH u AS (
			UPDATE fairway.cursors c SET next_seq = LEAST(o.next_seq, $3),
				stop_after = CASE WHEN $4 = 0 OR $4 + 1 >= o.next_seq THEN o.stop_after ELSE GREATEST(o.stop_after, $4) END,
				resume_at  = CASE WHEN $4 = 0 OR $4 + 1 >= o.next_seq THEN o.resume_at ELSE COALESCE(o.resume_at, o.next_seq) END,
				replay_until = CASE WHEN o.next_seq > $3 THEN GREATEST(o.replay_until, o.next_seq) ELSE o.replay_until END,
				replay_rate  = CASE WHEN o.next_seq > $3 THEN $5 ELSE o.replay_rate END
			FROM (SELECT next_seq, stop_after, resume_at, replay_until, replay_rate FROM fairway.cursors WHERE tenant = $1 AND dest = $2 FOR UPDATE) o
			WHERE c.tenant = $1 AND c.dest = $2
			RETURNING o.next_seq AS old
		)
		SELECT old, (SELECT count(*) FROM (SELECT pg_notify('`+NotifyChannel+`', $1 || ' ' || $2 || ' `+notifyCursor+`') FROM u) n) FROM u`,
		tenant, dest, int64(from), int64(last), rate).Scan(&old, nil)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("rewind %s/%s: %w (no cursor: nothing was ever dispatched there)", tenant, dest, ErrUnknownTenant)
	}
	if err != nil {
		return 0, fmt.Errorf("rewind %s/%s: %w", tenant, dest, err)
	}
	if uint64(old) < from {
		return uint64(old), fmt.Errorf("rewind %s/%s: %w: cursor is at %d, before %d; nothing to replay", tenant, dest, ErrInvalidArgument, old, from)
	}
	return uint64(old), nil
}

// AdvanceCursor moves the cursor of (tenant, dest) forward to to if it is
// behind (ending a replay early); it never moves it back, and notifies
// dispatchers (Released.Cursor). It reports the cursor's position
// afterwards.
func (s *Store) AdvanceCursor(ctx context.Context, tenant, dest string, to uint64) (uint64, error) {
	if err := validPair(tenant, dest); err != nil {
		return 0, err
	}
	var now int64
	err := s.pool.QueryRow(ctx, `WITH u AS (UPDATE fairway.cursors SET next_seq = GREATEST(next_seq, $3)
		WHERE tenant = $1 AND dest = $2 RETURNING next_seq)
		SELECT next_seq, (SELECT count(*) FROM (SELECT pg_notify('`+NotifyChannel+`', $1 || ' ' || $2 || ' `+notifyCursor+`') FROM u) n) FROM u`,
		tenant, dest, int64(to)).Scan(&now, nil)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("advance %s/%s: %w", tenant, dest, ErrUnknownTenant)
	}
	if err != nil {
		return 0, fmt.Errorf("advance %s/%s: %w", tenant, dest, err)
	}
	return uint64(now), nil
}
