package tenancy

import (
	"context"
	"fmt"
	"math"
)

// A replay runs in its pair's replay lane (Rewind): a cursor of its own
// (cursors.replay_next, up to replay_until) and slots of its own, the slot
// rows numbered -1 down to -replay_slots. Live dispatch (DispatchMany)
// never takes those rows and never moves that cursor, and the replay lane
// never takes the live rows or moves next_seq, so a replay neither waits
// for the pair's live events nor holds them up. Leases of either lane are
// released, extended, fenced and recovered alike.

// replayCandidateSQL selects free replay slots of one (tenant, dest) and
// locks them, by the rules of candidateSQL for the replay lane's rows and
// the replay's own budget (cursors.replay_slots); a pair whose limit is 0
// (dispatch switched off) gets none here either.
const replayCandidateSQL = `
	FROM fairway.limits l
	JOIN fairway.tenants t ON t.id = l.tenant
	JOIN fairway.cursors k ON k.tenant = l.tenant AND k.dest = l.dest
	JOIN fairway.slots s ON s.tenant = l.tenant AND s.dest = l.dest
	WHERE l.tenant = %[1]s AND l.dest = %[2]s
	  AND s.slot_no < 0 AND s.slot_no >= -k.replay_slots AND l.max_slots > 0
	  AND (s.expires_at IS NULL OR s.expires_at < now())
	  AND NOT t.paused AND NOT l.paused AND l.stream_reset_at IS NULL
	  AND NOT EXISTS (
		SELECT 1 FROM fairway.slots h
		WHERE h.tenant = l.tenant AND h.dest = l.dest
		  AND h.slot_no < -k.replay_slots AND h.expires_at >= now())
	ORDER BY s.slot_no DESC
	LIMIT %[3]s
	FOR UPDATE OF s SKIP LOCKED`

// dispatchReplaySQL is dispatchSQL for the replay lane: the same
// arguments, its slots from replayCandidateSQL, and its cursor
// replay_next, which moves only while the batches end before
// replay_until.
var dispatchReplaySQL = dispatchStatement(replayCandidateSQL, "DESC", `
	UPDATE fairway.cursors SET replay_next = (SELECT max(t) FROM m) + 1
	WHERE tenant = $1 AND dest = $2 AND replay_next = $7::bigint AND (SELECT max(t) FROM m) < replay_until
	RETURNING 1`)

// DispatchReplay is DispatchMany in the pair's replay lane: expectFrom is
// the replay's cursor (PairState.ReplayNext), the batches take the
// replay's slots (ErrAtLimit when none is free; a pair that never
// replayed has none), and every range must end
// before the replay's end (PairState.ReplayUntil). A replay cursor that is
// elsewhere, or a range past the end (the replay was cancelled or
// widened), is ErrCursorMoved, and nothing is taken.
func (s *Store) DispatchReplay(ctx context.Context, tenant, dest, holder string, expectFrom uint64, ranges []Range) ([]Lease, error) {
	if err := validPair(tenant, dest); err != nil {
		return nil, err
	}
	if err := validRanges(expectFrom, ranges); err != nil {
		return nil, fmt.Errorf("dispatch replay %s/%s: %w", tenant, dest, err)
	}
	r := s.dispatchWith(ctx, dispatchReplaySQL, dispatchArgs{tenant, dest, holder, expectFrom, ranges, -1})
	return r.leases, r.err
}

// FinishReplay moves the replay cursor of (tenant, dest) from from to
// until: the dispatcher found none of the tenant's events in between, up
// to the replay's end as it knew it (until). A replay cursor elsewhere (a
// grant moved it, a rewind moved its start back) is left alone; a replay
// a rewind has since widened past until goes on from there.
func (s *Store) FinishReplay(ctx context.Context, tenant, dest string, from, until uint64) error {
	if err := validPair(tenant, dest); err != nil {
		return err
	}
	if until <= from || until > math.MaxInt64 {
		return fmt.Errorf("finish replay %s/%s: %w: %d..%d", tenant, dest, ErrInvalidArgument, from, until)
	}
	_, err := s.pool.Exec(ctx, `UPDATE fairway.cursors SET replay_next = $4
		WHERE tenant = $1 AND dest = $2 AND replay_next = $3 AND $4 <= replay_until`, tenant, dest, int64(from), int64(until))
	if err != nil {
		return fmt.Errorf("finish replay %s/%s: %w", tenant, dest, err)
	}
	return nil
}
