package tenancy

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Heartbeat records that the dispatcher holder is alive and returns every
// dispatcher seen within ttl, holder included, sorted. Rows older than
// 10 × ttl are removed (dispatchers long gone). One statement.
func (s *Store) Heartbeat(ctx context.Context, holder string, ttl time.Duration) ([]string, error) {
	if holder == "" {
		return nil, fmt.Errorf("%w: heartbeat: empty holder", ErrInvalidArgument)
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("%w: heartbeat: ttl %v is not positive", ErrInvalidArgument, ttl)
	}
	// A dispatcher that is new, or back after its row went stale,
	// notifies the others (Released.Members) so they split the pairs with
	// it at once.
	rows, err := s.pool.Query(ctx, `
WITH old AS (
    SELECT seen_at >= now() - $2::interval AS alive FROM fairway.dispatchers WHERE holder = $1
), up AS (
    INSERT INTO fairway.dispatchers (holder) VALUES ($1)
    ON CONFLICT (holder) DO UPDATE SET seen_at = now()
    RETURNING holder
), gone AS (
    DELETE FROM fairway.dispatchers WHERE seen_at < now() - 10 * $2::interval AND holder <> $1
), note AS (
    SELECT pg_notify('`+NotifyChannel+`', '`+notifyMembers+`') WHERE NOT coalesce((SELECT alive FROM old), false)
)
SELECT m.holder FROM (
    SELECT holder FROM fairway.dispatchers WHERE seen_at >= now() - $2::interval AND holder <> $1
    UNION ALL SELECT holder FROM up
) m, (SELECT count(*) FROM note) n`, holder, ttl)
	if err != nil {
		return nil, fmt.Errorf("heartbeat %s: %w", holder, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var h string
		if err := rows.Scan(&h); err != nil {
			return nil, fmt.Errorf("heartbeat %s: %w", holder, err)
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("heartbeat %s: %w", holder, err)
	}
	slices.Sort(out)
	return out, nil
}

// Leave removes holder's heartbeat row, so the other dispatchers take its
// pairs over at their next heartbeat instead of after the ttl.
func (s *Store) Leave(ctx context.Context, holder string) error {
	if _, err := s.pool.Exec(ctx, `WITH d AS (DELETE FROM fairway.dispatchers WHERE holder = $1 RETURNING holder)
SELECT pg_notify('`+NotifyChannel+`', '`+notifyMembers+`') FROM d`, holder); err != nil {
		return fmt.Errorf("leave %s: %w", holder, err)
	}
	return nil
}
