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
	if err := validPair(tenant, dest); err != nil {
		return 0, err
	}
	if to < 1 || to > math.MaxInt64 {
		return 0, fmt.Errorf("rewind %s/%s: %w: sequence %d", tenant, dest, ErrInvalidArgument, to)
	}
	var old int64
	err = s.pool.QueryRow(ctx, `
		UPDATE fairway.cursors c SET next_seq = LEAST(o.next_seq, $3)
		FROM (SELECT next_seq FROM fairway.cursors WHERE tenant = $1 AND dest = $2 FOR UPDATE) o
		WHERE c.tenant = $1 AND c.dest = $2
		RETURNING o.next_seq`, tenant, dest, int64(to)).Scan(&old)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("rewind %s/%s: %w (no cursor: nothing was ever dispatched there)", tenant, dest, ErrUnknownTenant)
	}
	if err != nil {
		return 0, fmt.Errorf("rewind %s/%s: %w", tenant, dest, err)
	}
	if uint64(old) < to {
		return uint64(old), fmt.Errorf("rewind %s/%s: %w: cursor is at %d, before %d; nothing to replay", tenant, dest, ErrInvalidArgument, old, to)
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
