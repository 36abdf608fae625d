package tenancy

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
)

// RewindCursor moves the cursor of a known (tenant, dest) back to to and
// returns where it was, atomically, so a replay knows exactly which range
// it re-dispatches. Moving forward is refused (ErrInvalidArgument): that
// would skip events. ErrUnknownTenant when the pair was never seen.
func (s *Store) RewindCursor(ctx context.Context, tenant, dest string, to uint64) (prev uint64, err error) {
	return s.RewindCursorRange(ctx, tenant, dest, to, 0)
}

// RewindCursorRange is RewindCursor with an end: when last > 0 and the
// cursor was past last+1, the dispatcher's first move of the cursor past
// last (the dispatch of the batch that holds last) makes it jump back to
// prev, so the events after last are not dispatched again (except those
// in that same batch). last 0 means no end. A bounded rewind during another
// bounded replay keeps the later end and the first replay's resume point.
func (s *Store) RewindCursorRange(ctx context.Context, tenant, dest string, from, last uint64) (prev uint64, err error) {
	if err := validPair(tenant, dest); err != nil {
		return 0, err
	}
	if from < 1 || from > math.MaxInt64 || last > math.MaxInt64 || (last > 0 && last < from) {
		return 0, fmt.Errorf("rewind %s/%s: %w: range %d..%d", tenant, dest, ErrInvalidArgument, from, last)
	}
	var old int64
	err = s.pool.QueryRow(ctx, `
		UPDATE fairway.cursors c SET next_seq = LEAST(o.next_seq, $3),
			stop_after = CASE WHEN $4 = 0 OR $4 + 1 >= o.next_seq THEN o.stop_after ELSE GREATEST(o.stop_after, $4) END,
			resume_at  = CASE WHEN $4 = 0 OR $4 + 1 >= o.next_seq THEN o.resume_at ELSE COALESCE(o.resume_at, o.next_seq) END
		FROM (SELECT next_seq, stop_after, resume_at FROM fairway.cursors WHERE tenant = $1 AND dest = $2 FOR UPDATE) o
		WHERE c.tenant = $1 AND c.dest = $2
		RETURNING o.next_seq`, tenant, dest, int64(from), int64(last)).Scan(&old)
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
// behind (ending a replay early); it never moves it back. It reports the
// cursor's position afterwards.
func (s *Store) AdvanceCursor(ctx context.Context, tenant, dest string, to uint64) (uint64, error) {
	if err := validPair(tenant, dest); err != nil {
		return 0, err
	}
	var now int64
	err := s.pool.QueryRow(ctx, `UPDATE fairway.cursors SET next_seq = GREATEST(next_seq, $3)
		WHERE tenant = $1 AND dest = $2 RETURNING next_seq`, tenant, dest, int64(to)).Scan(&now)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("advance %s/%s: %w", tenant, dest, ErrUnknownTenant)
	}
	if err != nil {
		return 0, fmt.Errorf("advance %s/%s: %w", tenant, dest, err)
	}
	return uint64(now), nil
}
