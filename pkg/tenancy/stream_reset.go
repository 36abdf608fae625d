package tenancy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/jackc/pgx/v5"
)

// StreamPosition is what CheckStream and ResetCursors know of the stream
// the cursors point into (PRODUCTS), as JetStream reports it.
type StreamPosition struct {
	Name string
	// Created is when JetStream created the stream. A stream deleted and
	// created again (a NATS server replaced by an empty one) has a new
	// one; a restored stream keeps its original's.
	Created time.Time
	// FirstSeq is the first sequence the stream holds (LastSeq+1, or 0,
	// when it holds none); LastSeq the last it ever stored (0: none).
	FirstSeq, LastSeq uint64
}

// CursorAhead says whether a cursor (the next sequence to dispatch) is
// past the end of a stream whose last sequence is last. A cursor moves
// only past events that were dispatched, so it is at most last+1 unless the
// stream went back: recreated, or restored from an older backup.
func CursorAhead(next, last uint64) bool { return next > last+1 }

// StreamReset is a (tenant, destination) held because its cursor does not
// belong to the stream: no slot of it is handed out (ErrStreamReset) until
// ResetCursors moves the cursor.
type StreamReset struct {
	Tenant, Dest string
	NextSeq      uint64
	Since        time.Time
	// Detail says why, for `fairway status`.
	Detail string
}

// StreamCheck is what CheckStream found.
type StreamCheck struct {
	// Position is the stream as CheckStream read it first, before the
	// cursors.
	Position StreamPosition
	// Recreated says the stream's creation time is not the one recorded at
	// the previous check: it was deleted and created again in between. The
	// first check of a stream records it and reports false.
	Recreated bool
	// Held lists the pairs this check held (not those held before).
	Held []StreamReset
}

// CheckStream holds every (tenant, destination) whose cursor cannot be
// right for the stream that read describes, so that no dispatcher skips
// the events in between:
//   - when the stream's creation time is not the one recorded for it
//     (fairway.streams), the stream was recreated and every cursor past 1
//     pointed into the one it replaced;
//   - a cursor past the stream's end (CursorAhead) points into a stream
//     that went back, recreated or restored from an older backup.
//
// read is called once, and once more after reading the cursors when one
// of them looks ahead: a cursor can be ahead of a last sequence read after
// it only if the stream went back, so a cursor that a dispatch moves
// meanwhile is never taken for a reset. Held pairs keep their cursor; no
// slot of them is handed out (ErrStreamReset) until ResetCursors. Several
// dispatchers may check at once: each pair is held, and each recreation
// reported, by one of them.
func (s *Store) CheckStream(ctx context.Context, read func(context.Context) (StreamPosition, error)) (StreamCheck, error) {
	pos, err := read(ctx)
	if err != nil {
		return StreamCheck{}, err
	}
	if pos.Name == "" {
		return StreamCheck{}, fmt.Errorf("check stream: %w: no stream name", ErrInvalidArgument)
	}
	out := StreamCheck{Position: pos}
	if out.Recreated, out.Held, err = s.checkCreated(ctx, pos); err != nil {
		return out, fmt.Errorf("check stream %s: %w", pos.Name, err)
	}
	rows, err := s.pool.Query(ctx, `SELECT c.tenant, c.dest, c.next_seq FROM fairway.cursors c
		JOIN fairway.limits l ON l.tenant = c.tenant AND l.dest = c.dest
		WHERE l.stream_reset_at IS NULL AND c.next_seq > $1`, seqArg(pos.LastSeq)+1)
	if err != nil {
		return out, fmt.Errorf("check stream %s: %w", pos.Name, err)
	}
	suspects, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StreamReset, error) {
		var h StreamReset
		var next int64
		err := r.Scan(&h.Tenant, &h.Dest, &next)
		h.NextSeq = uint64(next)
		return h, err
	})
	if err != nil || len(suspects) == 0 {
		if err != nil {
			err = fmt.Errorf("check stream %s: %w", pos.Name, err)
		}
		return out, err
	}
	now, err := read(ctx)
	if err != nil {
		return out, err
	}
	var ts, ds, details []string
	var ns []int64
	for _, h := range suspects {
		if CursorAhead(h.NextSeq, now.LastSeq) {
			ts, ds, ns = append(ts, h.Tenant), append(ds, h.Dest), append(ns, int64(h.NextSeq))
			details = append(details, fmt.Sprintf("cursor %d is past the end of stream %s (last sequence %d): the stream was recreated or restored",
				h.NextSeq, now.Name, now.LastSeq))
		}
	}
	if len(ts) == 0 {
		return out, nil
	}
	held, err := s.hold(ctx, s.pool, `UPDATE fairway.limits l SET stream_reset_at = now(), stream_reset_detail = x.detail
		FROM fairway.cursors c, unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) AS x(t, d, n, detail)
		WHERE l.tenant = x.t AND l.dest = x.d AND c.tenant = x.t AND c.dest = x.d AND c.next_seq = x.n
		  AND l.stream_reset_at IS NULL
		RETURNING l.tenant, l.dest, c.next_seq, l.stream_reset_at, l.stream_reset_detail`, ts, ds, ns, details)
	if err != nil {
		return out, fmt.Errorf("check stream %s: %w", pos.Name, err)
	}
	out.Held = append(out.Held, held...)
	return out, nil
}

// checkCreated compares the stream's creation time with the one recorded
// and records it. When they differ it holds every pair whose cursor is
// past 1, in the same transaction, so that exactly one caller does.
func (s *Store) checkCreated(ctx context.Context, pos StreamPosition) (recreated bool, held []StreamReset, err error) {
	created := pos.Created.UTC().Truncate(time.Microsecond) // as PostgreSQL keeps it
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO fairway.streams (name, created_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING`,
			pos.Name, created); err != nil {
			return err
		}
		var was time.Time
		if err := tx.QueryRow(ctx, `SELECT created_at FROM fairway.streams WHERE name = $1 FOR UPDATE`, pos.Name).Scan(&was); err != nil {
			return err
		}
		if was.Equal(created) {
			return nil
		}
		recreated = true
		detail := fmt.Sprintf("stream %s was recreated at %s; the cursor pointed into the one created at %s",
			pos.Name, created.Format(time.RFC3339), was.UTC().Format(time.RFC3339))
		if held, err = s.hold(ctx, tx, `UPDATE fairway.limits l SET stream_reset_at = now(), stream_reset_detail = $1
			FROM fairway.cursors c
			WHERE c.tenant = l.tenant AND c.dest = l.dest AND c.next_seq > 1 AND l.stream_reset_at IS NULL
			RETURNING l.tenant, l.dest, c.next_seq, l.stream_reset_at, l.stream_reset_detail`, detail); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE fairway.streams SET created_at = $2 WHERE name = $1`, pos.Name, created)
		return err
	})
	return recreated, held, err
}

// hold runs a statement that holds pairs and returns them.
func (s *Store) hold(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, args ...any) ([]StreamReset, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (StreamReset, error) {
		var h StreamReset
		var next int64
		err := r.Scan(&h.Tenant, &h.Dest, &next, &h.Since, &h.Detail)
		h.NextSeq = uint64(next)
		return h, err
	})
}

// ResetTo says where ResetCursors moves a held cursor.
type ResetTo int

const (
	// ResetToFirst moves it to the stream's first event: everything the
	// stream holds is dispatched (again; idempotent sinks absorb what was
	// applied before).
	ResetToFirst ResetTo = iota + 1
	// ResetToLast moves it past the stream's last event: what the stream
	// holds is skipped, the events stored from then on are dispatched.
	ResetToLast
)

// ParseResetTo parses "first" or "last".
func ParseResetTo(s string) (ResetTo, error) {
	switch s {
	case "first":
		return ResetToFirst, nil
	case "last":
		return ResetToLast, nil
	}
	return 0, fmt.Errorf("%w: reset to %q: want first or last", ErrInvalidArgument, s)
}

// CursorMove is one cursor ResetCursors moved.
type CursorMove struct {
	Tenant, Dest string
	// From is where the cursor was, To where it is now.
	From, To uint64
}

// ResetCursors releases the pairs held for a stream reset, of tenant (""
// for every tenant) and dest ("" for every destination): it checks the
// stream first (CheckStream), so that a cursor found ahead now is held and
// reset too, then, in one transaction, moves each held cursor to where to
// says, ends the replays running on it and drops its orphaned batches
// (their sequences are the old stream's), clears the hold and notifies
// dispatchers (Released.Cursor, and a release: the pair may have slots
// again). Pairs that are not held are left alone. It returns the check and
// the cursors it moved, ordered by tenant and destination.
func (s *Store) ResetCursors(ctx context.Context, read func(context.Context) (StreamPosition, error), tenant, dest string, to ResetTo) (StreamCheck, []CursorMove, error) {
	if tenant != "" {
		if err := events.ValidateTenant(tenant); err != nil {
			return StreamCheck{}, nil, err
		}
	}
	if dest != "" {
		if err := ValidDest(dest); err != nil {
			return StreamCheck{}, nil, err
		}
	}
	if to != ResetToFirst && to != ResetToLast {
		return StreamCheck{}, nil, fmt.Errorf("reset cursors: %w: reset to %d", ErrInvalidArgument, to)
	}
	check, err := s.CheckStream(ctx, read)
	if err != nil {
		return check, nil, err
	}
	pos, err := read(ctx)
	if err != nil {
		return check, nil, err
	}
	target := max(pos.FirstSeq, 1)
	if to == ResetToLast {
		target = pos.LastSeq + 1
	}
	if target > math.MaxInt64 {
		return check, nil, fmt.Errorf("reset cursors: %w: sequence %d", ErrInvalidArgument, target)
	}
	rows, err := s.pool.Query(ctx, `WITH h AS (
			SELECT l.tenant, l.dest FROM fairway.limits l
			WHERE l.stream_reset_at IS NOT NULL AND ($1 = '' OR l.tenant = $1) AND ($2 = '' OR l.dest = $2)
			FOR UPDATE
		), o AS (
			SELECT c.tenant, c.dest, c.next_seq FROM fairway.cursors c JOIN h ON h.tenant = c.tenant AND h.dest = c.dest
			FOR UPDATE OF c
		), c AS (
			UPDATE fairway.cursors c SET next_seq = $3, high_next = $3, bulk_next = $3, replay_next = NULL, replay_until = NULL, replay_rate = NULL
			FROM o WHERE c.tenant = o.tenant AND c.dest = o.dest
			RETURNING c.tenant, c.dest, o.next_seq AS old
		), l AS (
			UPDATE fairway.limits l SET stream_reset_at = NULL, stream_reset_detail = NULL
			FROM h WHERE l.tenant = h.tenant AND l.dest = h.dest
		), r AS (
			UPDATE fairway.replays r SET state = 'cancelled', finished_at = now()
			FROM h WHERE r.tenant = h.tenant AND r.dest = h.dest AND r.state = 'running'
		), x AS (
			DELETE FROM fairway.orphans o USING h WHERE o.tenant = h.tenant AND o.dest = h.dest
		), n AS (
			SELECT pg_notify('`+NotifyChannel+`', tenant || ' ' || dest || ' `+notifyCursor+`'),
			       pg_notify('`+NotifyChannel+`', tenant || ' ' || dest) FROM c
		)
		SELECT tenant, dest, old, (SELECT count(*) FROM n) FROM c ORDER BY tenant, dest`, tenant, dest, int64(target))
	if err != nil {
		return check, nil, fmt.Errorf("reset cursors: %w", err)
	}
	moves, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (CursorMove, error) {
		m := CursorMove{To: target}
		var old int64
		err := r.Scan(&m.Tenant, &m.Dest, &old, nil)
		m.From = uint64(old)
		return m, err
	})
	if err != nil {
		return check, nil, fmt.Errorf("reset cursors: %w", err)
	}
	return check, moves, nil
}

// StreamResets lists the pairs held for a stream reset, ordered by tenant
// and destination.
func (s *Store) StreamResets(ctx context.Context) ([]StreamReset, error) {
	out, err := s.hold(ctx, s.pool, `SELECT l.tenant, l.dest, COALESCE(c.next_seq, 1), l.stream_reset_at, COALESCE(l.stream_reset_detail, '')
		FROM fairway.limits l LEFT JOIN fairway.cursors c ON c.tenant = l.tenant AND c.dest = l.dest
		WHERE l.stream_reset_at IS NOT NULL ORDER BY l.tenant, l.dest`)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("stream resets: %w", err)
	}
	return out, nil
}

// seqArg is a stream sequence as a bigint argument.
func seqArg(seq uint64) int64 { return int64(min(seq, math.MaxInt64-1)) }
