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

// Dispatcher is one row of fairway.dispatchers.
type Dispatcher struct {
	Holder string
	SeenAt time.Time
	// Partitions are the partitions of PRODUCTS it reads, as it last
	// recorded them (SetPartitions); nil when it recorded none (its
	// stream has no partitions).
	Partitions []int
}

// SetPartitions records the partitions of PRODUCTS the dispatcher holder
// reads, for status. One statement; nothing when holder has no row.
func (s *Store) SetPartitions(ctx context.Context, holder string, parts []int) error {
	if parts == nil {
		parts = []int{}
	}
	if _, err := s.pool.Exec(ctx, `UPDATE fairway.dispatchers SET partitions = $2 WHERE holder = $1`, holder, parts); err != nil {
		return fmt.Errorf("set partitions of %s: %w", holder, err)
	}
	return nil
}

// Dispatchers returns the dispatchers seen within ttl, sorted by holder.
func (s *Store) Dispatchers(ctx context.Context, ttl time.Duration) ([]Dispatcher, error) {
	rows, err := s.pool.Query(ctx, `
SELECT holder, seen_at, partitions FROM fairway.dispatchers
WHERE seen_at >= now() - $1::interval ORDER BY holder`, ttl)
	if err != nil {
		return nil, fmt.Errorf("dispatchers: %w", err)
	}
	defer rows.Close()
	var out []Dispatcher
	for rows.Next() {
		var d Dispatcher
		var parts []int32
		if err := rows.Scan(&d.Holder, &d.SeenAt, &parts); err != nil {
			return nil, fmt.Errorf("dispatchers: %w", err)
		}
		if parts != nil {
			d.Partitions = make([]int, len(parts))
			for i, p := range parts {
				d.Partitions[i] = int(p)
			}
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("dispatchers: %w", err)
	}
	return out, nil
}
