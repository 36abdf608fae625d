package tenancy

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"
)

// RewindCursor replays (tenant, dest) from to up to its cursor and
// returns the cursor; see Rewind.
func (s *Store) RewindCursor(ctx context.Context, tenant, dest string, to uint64) (cursor uint64, err error) {
	return s.Rewind(ctx, Rewind{Tenant: tenant, Dest: dest, From: to})
}

// ReplayUnthrottled as a replay rate (Rewind.Rate, PairState.ReplayRate)
// means as fast as the replay's slots allow.
const ReplayUnthrottled = -1

// Rewind says which range of (Tenant, Dest) to dispatch again.
type Rewind struct {
	Tenant, Dest string
	// From is the first sequence to dispatch again (≥ 1).
	From uint64
	// Last, when not 0, is the last sequence to dispatch again; else the
	// replay runs up to the pair's cursor.
	Last uint64
	// Rate is how many events per second the dispatcher may replay: 0 for
	// its default (dispatch.Config.ReplayRate), ReplayUnthrottled for as
	// fast as the replay's slots allow.
	Rate int
	// Slots is how many of the replay's batches the destination may hold
	// at once, on top of the pair's own slots (0: 1).
	Slots int
}

// ReplaySlotsMax is the most slots a replay may have (Rewind.Slots).
const ReplaySlotsMax = 64

// Rewind starts a replay of a known (tenant, dest): the range from r.From
// up to the pair's cursor (or through r.Last) is dispatched again in the
// pair's replay lane, which has a cursor and slots of its own, so the
// pair's live events keep their cursor and slots and go on flowing. It
// returns the pair's cursor, atomically with the start, so a replay knows
// exactly which range it re-dispatches, and notifies dispatchers
// (Released.Cursor) so they pick it up at once. A start at or after the
// cursor is refused (ErrInvalidArgument): nothing there was dispatched
// yet. ErrUnknownTenant when the pair was never seen. A rewind while the
// pair replays widens the running replay to cover both ranges, at the
// newer rate and slots.
func (s *Store) Rewind(ctx context.Context, r Rewind) (cursor uint64, err error) {
	tenant, dest, from, last := r.Tenant, r.Dest, r.From, r.Last
	if err := validPair(tenant, dest); err != nil {
		return 0, err
	}
	if from < 1 || from > math.MaxInt64 || last > math.MaxInt64-1 || (last > 0 && last < from) {
		return 0, fmt.Errorf("rewind %s/%s: %w: range %d..%d", tenant, dest, ErrInvalidArgument, from, last)
	}
	if r.Slots < 0 || r.Slots > ReplaySlotsMax {
		return 0, fmt.Errorf("rewind %s/%s: %w: %d slots, want 1..%d", tenant, dest, ErrInvalidArgument, r.Slots, ReplaySlotsMax)
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
	err = s.pool.QueryRow(ctx, rewindSQL, tenant, dest, int64(from), int64(last), rate, max(r.Slots, 1)).Scan(&old, nil)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("rewind %s/%s: %w (no cursor: nothing was ever dispatched there)", tenant, dest, ErrUnknownTenant)
	}
	if err != nil {
		return 0, fmt.Errorf("rewind %s/%s: %w", tenant, dest, err)
	}
	if uint64(old) <= from {
		return uint64(old), fmt.Errorf("rewind %s/%s: %w: cursor is at %d, not past %d; nothing to replay", tenant, dest, ErrInvalidArgument, old, from)
	}
	return uint64(old), nil
}

// rewindSQL: $1 tenant, $2 dest, $3 from, $4 last (0: none), $5 rate,
// $6 slots. It locks the cursor row (dispatches of either lane wait, and
// a dispatch of the replay lane from a position the rewind moved finds
// its cursor moved), starts or widens the lane when from is before the
// cursor, makes sure the lane's slot rows exist, and notifies.
const rewindSQL = `
WITH o AS (
	SELECT old, CASE WHEN $4::bigint = 0 THEN old ELSE LEAST($4::bigint + 1, old) END AS until, running, replay_next, replay_until
	FROM (SELECT GREATEST(next_seq, high_next, bulk_next) AS old, COALESCE(replay_next < replay_until, false) AS running, replay_next, replay_until
		FROM fairway.cursors WHERE tenant = $1 AND dest = $2 FOR UPDATE) c
), u AS (
	UPDATE fairway.cursors c SET
		replay_next  = CASE WHEN o.running THEN LEAST(o.replay_next, $3) ELSE $3 END,
		replay_until = CASE WHEN o.running THEN GREATEST(o.replay_until, o.until) ELSE o.until END,
		replay_rate  = $5, replay_slots = $6
	FROM o WHERE c.tenant = $1 AND c.dest = $2 AND $3 < o.old
	RETURNING 1
), s AS (
	INSERT INTO fairway.slots (tenant, dest, slot_no)
	SELECT $1, $2, -g FROM u, generate_series(1, $6::int) g
	ON CONFLICT DO NOTHING
)
SELECT o.old, (SELECT count(*) FROM (SELECT pg_notify('` + NotifyChannel + `', $1 || ' ' || $2 || ' ` + notifyCursor + `') FROM u) n) FROM o`

// EndReplay ends the replay of (tenant, dest), if one runs: its lane
// dispatches nothing more (batches already dispatched finish). It
// notifies dispatchers (Released.Cursor) and returns the replay's cursor
// as it ended, the first sequence it did not dispatch (0: no replay was
// running), from which a later Rewind may take it up again.
func (s *Store) EndReplay(ctx context.Context, tenant, dest string) (stoppedAt uint64, err error) {
	if err := validPair(tenant, dest); err != nil {
		return 0, err
	}
	var at int64
	err = s.pool.QueryRow(ctx, `WITH o AS (
			SELECT replay_next FROM fairway.cursors
			WHERE tenant = $1 AND dest = $2 AND replay_next < replay_until FOR UPDATE
		), u AS (
			UPDATE fairway.cursors c SET replay_next = c.replay_until FROM o
			WHERE c.tenant = $1 AND c.dest = $2 RETURNING o.replay_next
		)
		SELECT COALESCE((SELECT replay_next FROM u), 0),
			(SELECT count(*) FROM (SELECT pg_notify('`+NotifyChannel+`', $1 || ' ' || $2 || ' `+notifyCursor+`') FROM u) n)`,
		tenant, dest).Scan(&at, nil)
	if err != nil {
		return 0, fmt.Errorf("end replay %s/%s: %w", tenant, dest, err)
	}
	return uint64(at), nil
}
