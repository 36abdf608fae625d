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

// dispatchSQL: $1 tenant, $2 dest, $3 holder, $4 ttl µs, $5 from, $6 to.
// cur moves the cursor only if it still equals from; the cursor row lock
// serialises dispatchers of one (tenant, dest), and a loser re-reads the
// moved cursor (EvalPlanQual) and matches nothing. The slot is taken only
// if the cursor moved, and the batch is logged only if a slot was taken.
// The caller rolls back when the cursor moved but no slot was free.
var dispatchSQL = `WITH cur AS (
	UPDATE fairway.cursors SET next_seq = $6::bigint + 1
	WHERE tenant = $1 AND dest = $2 AND next_seq = $5::bigint
	RETURNING 1
), c AS (SELECT s.slot_no ` + fmt.Sprintf(candidateSQL, "$1", "$2", "1") + `
), u AS (
	UPDATE fairway.slots s SET ` + fmt.Sprintf(takeSetSQL, "$4") + `, holder = $3, from_seq = $5, to_seq = $6
	FROM c WHERE s.tenant = $1 AND s.dest = $2 AND s.slot_no = c.slot_no AND ` + freeSQL + `
	  AND EXISTS (SELECT 1 FROM cur)
	RETURNING s.slot_no, s.epoch, s.expires_at
), b AS (
	INSERT INTO fairway.batches (tenant, dest, from_seq, to_seq, slot_no, epoch, holder)
	SELECT $1, $2, $5, $6, slot_no, epoch, $3 FROM u
)
SELECT (SELECT count(*) FROM cur), u.slot_no, u.epoch, u.expires_at, ` + statusSQL + `
FROM (VALUES (1)) v LEFT JOIN u ON true`

// Dispatch records that holder dispatches sequences expectFrom..to of
// (tenant, dest), in one transaction: it takes a slot (ErrAtLimit if none
// is free), checks that the cursor still equals expectFrom (ErrCursorMoved
// otherwise; no slot is taken), records the batch on the lease and in the
// batch log, and moves the cursor to to+1. Either all of it happens or
// nothing does, so two dispatchers never dispatch the same range and a
// crash never skips events.
func (s *Store) Dispatch(ctx context.Context, tenant, dest, holder string, expectFrom, to uint64) (Lease, error) {
	if err := validPair(tenant, dest); err != nil {
		return Lease{}, err
	}
	if expectFrom < 1 || to < expectFrom || to >= math.MaxInt64 {
		return Lease{}, fmt.Errorf("dispatch %s/%s: %w: range %d..%d", tenant, dest, ErrInvalidArgument, expectFrom, to)
	}
	for attempt := 0; ; attempt++ {
		l, status, err := s.dispatch(ctx, tenant, dest, holder, expectFrom, to)
		if err == nil || status != nil || attempt > 0 {
			return l, err
		}
		// Never seen: create with defaults and try once more.
		if err := s.ensurePairs(ctx, []pair{{tenant, dest}}); err != nil {
			return Lease{}, err
		}
	}
}

// dispatch runs dispatchSQL in a transaction. A nil status with a non-nil
// error means the pair is unknown.
func (s *Store) dispatch(ctx context.Context, tenant, dest, holder string, from, to uint64) (Lease, *string, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return Lease{}, nil, fmt.Errorf("dispatch %s/%s: %w", tenant, dest, err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var (
		moved   int
		slot    *int
		token   *int64
		expires *time.Time
		status  *string
	)
	err = tx.QueryRow(ctx, dispatchSQL, tenant, dest, holder, s.ttlUS, int64(from), int64(to)).
		Scan(&moved, &slot, &token, &expires, &status)
	if err != nil {
		return Lease{}, &status0, fmt.Errorf("dispatch %s/%s: %w", tenant, dest, err)
	}
	switch {
	case status == nil:
		return Lease{}, nil, fmt.Errorf("dispatch %s/%s: %w", tenant, dest, ErrUnknownTenant)
	case moved == 0:
		return Lease{}, status, fmt.Errorf("dispatch %s/%s from %d: %w", tenant, dest, from, ErrCursorMoved)
	case slot == nil:
		return Lease{}, status, fmt.Errorf("dispatch %s/%s: %w", tenant, dest, missReason(status))
	}
	if err := tx.Commit(ctx); err != nil {
		return Lease{}, status, fmt.Errorf("dispatch %s/%s: commit: %w", tenant, dest, err)
	}
	return Lease{
		ID: leaseID(tenant, dest, *slot, *token), Tenant: tenant, Dest: dest, Slot: *slot, Token: *token,
		Holder: holder, ExpiresAt: *expires, FromSeq: from, ToSeq: to,
	}, status, nil
}

// status0 marks errors that are not "unknown pair" (no retry).
var status0 = "error"
