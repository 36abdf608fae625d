package tenancy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cursor returns the next stream sequence to dispatch for (tenant, dest):
// 1 on first sight (the pair is then created with defaults).
func (s *Store) Cursor(ctx context.Context, tenant, dest string) (uint64, error) {
	if err := validPair(tenant, dest); err != nil {
		return 0, err
	}
	for attempt := 0; ; attempt++ {
		var next int64
		err := s.pool.QueryRow(ctx, `SELECT next_seq FROM fairway.cursors WHERE tenant = $1 AND dest = $2`, tenant, dest).Scan(&next)
		switch {
		case err == nil:
			return uint64(next), nil
		case !errors.Is(err, pgx.ErrNoRows) || attempt > 0:
			return 0, fmt.Errorf("cursor %s/%s: %w", tenant, dest, err)
		}
		if err := s.ensurePairs(ctx, []pair{{tenant, dest}}); err != nil {
			return 0, err
		}
	}
}

// SetCursor moves the cursor of (tenant, dest) to next (≥ 1), for replay.
// Batches already dispatched are unaffected.
func (s *Store) SetCursor(ctx context.Context, tenant, dest string, next uint64) error {
	if err := validPair(tenant, dest); err != nil {
		return err
	}
	if next < 1 || next > math.MaxInt64 {
		return fmt.Errorf("set cursor %s/%s: %w: sequence %d", tenant, dest, ErrInvalidArgument, next)
	}
	for attempt := 0; ; attempt++ {
		tag, err := s.pool.Exec(ctx, `UPDATE fairway.cursors SET next_seq = $3 WHERE tenant = $1 AND dest = $2`, tenant, dest, int64(next))
		if err != nil {
			return fmt.Errorf("set cursor %s/%s: %w", tenant, dest, err)
		}
		if tag.RowsAffected() == 1 || attempt > 0 {
			return nil
		}
		if err := s.ensurePairs(ctx, []pair{{tenant, dest}}); err != nil {
			return err
		}
	}
}

// Range is one batch's sequences, From..To inclusive.
type Range struct{ From, To uint64 }

// dispatchSQL: $1 tenant, $2 dest, $3 holder, $4 ttl µs, $5 froms, $6 tos
// (ranges in order), $7 the cursor the caller read from.
//
// It is one statement, so it is one transaction without BEGIN/COMMIT round
// trips, and everything in it happens or nothing does:
//   - c locks up to len(ranges) free slots (FOR UPDATE SKIP LOCKED); locked
//     rows stay free until the statement ends, so each can be taken below;
//   - m pairs the first k ranges with the k locked slots;
//   - cur moves the cursor past the last paired range, only if a slot was
//     locked and the cursor still equals $7; the cursor
//     row lock serialises dispatchers of one (tenant, dest), and a loser
//     re-reads the moved cursor (EvalPlanQual) and matches nothing;
//   - u takes the paired slots, and b logs the batches, only if cur moved.
//
// So a dispatcher that finds no free slot changes nothing (not even the
// cursor), and one that loses the cursor race takes no slot.
var dispatchSQL = `WITH c AS (SELECT s.slot_no ` + fmt.Sprintf(candidateSQL, "$1", "$2", "cardinality($5::bigint[])") + `
), cn AS (SELECT slot_no, row_number() OVER (ORDER BY slot_no) AS rn FROM c
), r AS (SELECT f, t, rn FROM unnest($5::bigint[], $6::bigint[]) WITH ORDINALITY AS x(f, t, rn)
), m AS (SELECT cn.slot_no, r.f, r.t FROM cn JOIN r ON r.rn = cn.rn
), cur AS (
	UPDATE fairway.cursors SET next_seq = (SELECT max(t) FROM m) + 1
	WHERE tenant = $1 AND dest = $2 AND next_seq = $7::bigint AND EXISTS (SELECT 1 FROM m)
	RETURNING 1
), u AS (
	UPDATE fairway.slots s SET ` + fmt.Sprintf(takeSetSQL, "$4") + `, holder = $3, from_seq = m.f, to_seq = m.t
	FROM m WHERE s.tenant = $1 AND s.dest = $2 AND s.slot_no = m.slot_no AND EXISTS (SELECT 1 FROM cur)
	RETURNING s.slot_no, s.epoch, s.expires_at, s.from_seq, s.to_seq
), b AS (
	INSERT INTO fairway.batches (tenant, dest, from_seq, to_seq, slot_no, epoch, holder)
	SELECT $1, $2, from_seq, to_seq, slot_no, epoch, $3 FROM u
)
SELECT (SELECT count(*) FROM cur), (SELECT count(*) FROM c), u.slot_no, u.epoch, u.expires_at, u.from_seq, u.to_seq, ` + statusSQL + `
FROM (VALUES (1)) v LEFT JOIN u ON true
ORDER BY u.from_seq`

// Dispatch records that holder dispatches sequences expectFrom..to of
// (tenant, dest), in one transaction: it takes a slot (ErrAtLimit if none
// is free), checks that the cursor still equals expectFrom (ErrCursorMoved
// otherwise; no slot is taken), records the batch on the lease and in the
// batch log, and moves the cursor to to+1. Either all of it happens or
// nothing does, so two dispatchers never dispatch the same range and a
// crash never skips events.
func (s *Store) Dispatch(ctx context.Context, tenant, dest, holder string, expectFrom, to uint64) (Lease, error) {
	ls, err := s.DispatchMany(ctx, tenant, dest, holder, expectFrom, []Range{{expectFrom, to}})
	if err != nil {
		return Lease{}, err
	}
	return ls[0], nil
}

// DispatchManyMax is the most ranges one DispatchMany call takes.
const DispatchManyMax = 64

// DispatchMany is Dispatch for several batches of one (tenant, dest) in one
// round trip. expectFrom is the cursor the caller read from; the ranges
// follow it in order without overlapping. A range may start after the
// previous one's end (or the first after expectFrom) when the sequences in
// between are not the tenant's: a tight range lets a sink start reading at
// its first event. It takes as many free slots as it can, up to
// len(ranges), gives them to the first ranges in order, and moves the
// cursor past the last range that got a slot. The leases come back in range
// order; fewer leases than ranges means the tenant reached its limit. With
// no free slot it returns ErrAtLimit (or ErrPaused) and changes nothing;
// with the cursor elsewhere, ErrCursorMoved and no slot is taken.
func (s *Store) DispatchMany(ctx context.Context, tenant, dest, holder string, expectFrom uint64, ranges []Range) ([]Lease, error) {
	if err := validPair(tenant, dest); err != nil {
		return nil, err
	}
	if err := validRanges(expectFrom, ranges); err != nil {
		return nil, fmt.Errorf("dispatch %s/%s: %w", tenant, dest, err)
	}
	for attempt := 0; ; attempt++ {
		ls, status, err := s.dispatch(ctx, tenant, dest, holder, expectFrom, ranges)
		if err == nil || status != nil || attempt > 0 {
			return ls, err
		}
		// Never seen: create with defaults and try once more.
		if err := s.ensurePairs(ctx, []pair{{tenant, dest}}); err != nil {
			return nil, err
		}
	}
}

func validRanges(expectFrom uint64, ranges []Range) error {
	if len(ranges) == 0 || len(ranges) > DispatchManyMax {
		return fmt.Errorf("%w: %d ranges, want 1..%d", ErrInvalidArgument, len(ranges), DispatchManyMax)
	}
	if expectFrom < 1 || ranges[0].From < expectFrom {
		return fmt.Errorf("%w: first range %d..%d starts before the cursor %d", ErrInvalidArgument, ranges[0].From, ranges[0].To, expectFrom)
	}
	for i, r := range ranges {
		if r.From < 1 || r.To < r.From || r.To >= math.MaxInt64 {
			return fmt.Errorf("%w: range %d..%d", ErrInvalidArgument, r.From, r.To)
		}
		if i > 0 && r.From <= ranges[i-1].To {
			return fmt.Errorf("%w: range %d..%d overlaps or precedes %d..%d", ErrInvalidArgument, r.From, r.To, ranges[i-1].From, ranges[i-1].To)
		}
	}
	return nil
}

// dispatch runs dispatchSQL. A nil status with a non-nil error means the
// pair is unknown.
func (s *Store) dispatch(ctx context.Context, tenant, dest, holder string, expectFrom uint64, ranges []Range) ([]Lease, *string, error) {
	froms, tos := make([]int64, len(ranges)), make([]int64, len(ranges))
	for i, r := range ranges {
		froms[i], tos[i] = int64(r.From), int64(r.To)
	}
	rows, err := s.pool.Query(ctx, dispatchSQL, tenant, dest, holder, s.ttlUS, froms, tos, int64(expectFrom))
	if err != nil {
		return nil, &status0, fmt.Errorf("dispatch %s/%s: %w", tenant, dest, err)
	}
	var (
		out           []Lease
		moved, locked int
		status        *string
	)
	for rows.Next() {
		var (
			slot           *int
			token          *int64
			expires        *time.Time
			fromSeq, toSeq *int64
		)
		if err := rows.Scan(&moved, &locked, &slot, &token, &expires, &fromSeq, &toSeq, &status); err != nil {
			rows.Close()
			return nil, &status0, fmt.Errorf("dispatch %s/%s: %w", tenant, dest, err)
		}
		if slot != nil {
			out = append(out, Lease{
				ID: leaseID(tenant, dest, *slot, *token), Tenant: tenant, Dest: dest, Slot: *slot, Token: *token,
				Holder: holder, ExpiresAt: *expires, FromSeq: uint64(*fromSeq), ToSeq: uint64(*toSeq),
			})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, &status0, fmt.Errorf("dispatch %s/%s: %w", tenant, dest, err)
	}
	switch {
	case status == nil:
		return nil, nil, fmt.Errorf("dispatch %s/%s: %w", tenant, dest, ErrUnknownTenant)
	case locked == 0:
		return nil, status, fmt.Errorf("dispatch %s/%s: %w", tenant, dest, missReason(status))
	case moved == 0:
		return nil, status, fmt.Errorf("dispatch %s/%s from %d: %w", tenant, dest, expectFrom, ErrCursorMoved)
	case len(out) == 0:
		return nil, status, fmt.Errorf("dispatch %s/%s: slots locked but none taken", tenant, dest)
	}
	return out, status, nil
}

// status0 marks errors that are not "unknown pair" (no retry).
var status0 = "error"
