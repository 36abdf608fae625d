package tenancy

import (
	"context"
	"fmt"
	"time"
)

// PruneBatchesMax is the most batch-log rows one PruneBatches call
// deletes.
const PruneBatchesMax = 100_000

// PruneBatches deletes rows of the batch log (fairway.batches: one per
// dispatched batch, the audit trail that no range was dispatched twice)
// created more than olderThan ago, and returns how many. It looks only at
// the max oldest rows (by id, which grows with time), so a call costs at
// most that many rows whatever the log's size: call again while it returns
// max. Several dispatchers may prune at once.
func (s *Store) PruneBatches(ctx context.Context, olderThan time.Duration, max int) (int, error) {
	if olderThan <= 0 || max < 1 || max > PruneBatchesMax {
		return 0, fmt.Errorf("%w: prune batches older than %s, %d at most (1..%d)", ErrInvalidArgument, olderThan, max, PruneBatchesMax)
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM fairway.batches
		WHERE id IN (SELECT id FROM fairway.batches ORDER BY id LIMIT $2)
		  AND created_at < now() - $1::bigint * interval '1 microsecond'`, olderThan.Microseconds(), max)
	if err != nil {
		return 0, fmt.Errorf("prune batches: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
