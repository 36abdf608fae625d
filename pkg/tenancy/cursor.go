package tenancy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fairwayhq/fairway/pkg/events"
)

// Cursor returns the next stream sequence of the tenant's normal events
// to dispatch for (tenant, dest): 1 on first sight (the pair is then
// created with defaults).
func (s *Store) Cursor(ctx context.Context, tenant, dest string) (uint64, error) {
	return s.CursorFor(ctx, tenant, dest, events.PriorityNormal)
}

// CursorFor is Cursor for the tenant's events of priority p.
func (s *Store) CursorFor(ctx context.Context, tenant, dest string, p events.Priority) (uint64, error) {
	if err := validPair(tenant, dest); err != nil {
		return 0, err
	}
	for attempt := 0; ; attempt++ {
		var next int64
		err := s.pool.QueryRow(ctx, `SELECT `+laneCursorSQL("$3::int", "fairway.cursors")+` FROM fairway.cursors WHERE tenant = $1 AND dest = $2`, tenant, dest, p.Rank()).Scan(&next)
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

// SetCursor moves the cursors of (tenant, dest), of its events of every
// priority, to next (≥ 1). Batches already dispatched are unaffected.
func (s *Store) SetCursor(ctx context.Context, tenant, dest string, next uint64) error {
	if err := validPair(tenant, dest); err != nil {
		return err
	}
	if next < 1 || next > math.MaxInt64 {
		return fmt.Errorf("set cursor %s/%s: %w: sequence %d", tenant, dest, ErrInvalidArgument, next)
	}
	for attempt := 0; ; attempt++ {
		tag, err := s.pool.Exec(ctx, `UPDATE fairway.cursors SET next_seq = $3, high_next = $3, bulk_next = $3 WHERE tenant = $1 AND dest = $2`, tenant, dest, int64(next))
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
var dispatchSQL = dispatchStatement(candidateSQL, "", `
	UPDATE fairway.cursors SET `+laneMoveSQL("$8::int", "fairway.cursors", "(SELECT max(t) FROM m) + 1")+`
	WHERE tenant = $1 AND dest = $2 AND `+laneCursorSQL("$8::int", "fairway.cursors")+` = $7::bigint AND EXISTS (SELECT 1 FROM m)
	RETURNING 1`)

// laneColumns are the cursor columns of fairway.cursors by the rank of
// their priority (events.Priority.Rank: 0 high, 1 normal, 2 bulk).
var laneColumns = [...]string{"high_next", "next_seq", "bulk_next"}

// laneCursorSQL is the cursor column of table (a name or alias of
// fairway.cursors) of the priority ranked rank.
func laneCursorSQL(rank, table string) string {
	return fmt.Sprintf(`(CASE %[1]s WHEN 0 THEN %[2]s.%[3]s WHEN 2 THEN %[2]s.%[5]s ELSE %[2]s.%[4]s END)`,
		rank, table, laneColumns[0], laneColumns[1], laneColumns[2])
}

// laneMoveSQL is the SET list of an UPDATE of table (fairway.cursors) that
// moves the cursor of the priority ranked rank to value and leaves the
// others.
func laneMoveSQL(rank, table, value string) string {
	set := make([]string, len(laneColumns))
	for r, col := range laneColumns {
		set[r] = fmt.Sprintf("%[1]s = CASE WHEN %[2]s = %[3]d THEN %[4]s ELSE %[5]s.%[1]s END", col, rank, r, value, table)
	}
	return strings.Join(set, ", ")
}

// dispatchStatement is the shape of a lane's dispatch statement
// (dispatchSQL, dispatchReplaySQL): candidates says which slots the lane
// may take (a format of tenant, dest and how many), order how they are
// paired with the ranges, and cur how the lane's cursor moves (an UPDATE
// that returns a row when it did). $8 is the rank of the priority of the
// batches' events, which their leases record (-1: every priority).
func dispatchStatement(candidates, order, cur string) string {
	return `WITH c AS (SELECT s.slot_no ` + fmt.Sprintf(candidates, "$1", "$2", "cardinality($5::bigint[])") + `
), cn AS (SELECT slot_no, row_number() OVER (ORDER BY slot_no ` + order + `) AS rn FROM c
), r AS (SELECT f, t, rn FROM unnest($5::bigint[], $6::bigint[]) WITH ORDINALITY AS x(f, t, rn)
), m AS (SELECT cn.slot_no, r.f, r.t FROM cn JOIN r ON r.rn = cn.rn
), cur AS (` + cur + `
), u AS (
	UPDATE fairway.slots s SET ` + fmt.Sprintf(takeSetSQL, "$4", "NULLIF($8::int, -1)::smallint") + `, holder = $3, from_seq = m.f, to_seq = m.t
	FROM m WHERE s.tenant = $1 AND s.dest = $2 AND s.slot_no = m.slot_no AND EXISTS (SELECT 1 FROM cur)
	RETURNING s.slot_no, s.epoch, s.expires_at, s.from_seq, s.to_seq
), b AS (
	INSERT INTO fairway.batches (tenant, dest, from_seq, to_seq, slot_no, epoch, holder)
	SELECT $1, $2, from_seq, to_seq, slot_no, epoch, $3 FROM u
)
SELECT (SELECT count(*) FROM cur), (SELECT count(*) FROM c), u.slot_no, u.epoch, u.expires_at, u.from_seq, u.to_seq, ` + statusSQL + `
FROM (VALUES (1)) v LEFT JOIN u ON true
ORDER BY u.from_seq`
}

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
// with the cursor elsewhere, ErrCursorMoved and no slot is taken. The
// batches hold the tenant's normal events (DispatchPriority).
func (s *Store) DispatchMany(ctx context.Context, tenant, dest, holder string, expectFrom uint64, ranges []Range) ([]Lease, error) {
	return s.DispatchPriority(ctx, tenant, dest, events.PriorityNormal, holder, expectFrom, ranges)
}

// DispatchPriority is DispatchMany for the tenant's events of priority p,
// from that priority's cursor (PairState.NextFor): the ranges hold only
// events of p, and their leases record it, so that a batch read again (an
// orphan) is read for p alone. The slots are the pair's, whatever the
// priority.
func (s *Store) DispatchPriority(ctx context.Context, tenant, dest string, p events.Priority, holder string, expectFrom uint64, ranges []Range) ([]Lease, error) {
	if err := validPair(tenant, dest); err != nil {
		return nil, err
	}
	if !p.Valid() {
		return nil, fmt.Errorf("dispatch %s/%s: %w: priority %q", tenant, dest, ErrInvalidArgument, p)
	}
	if err := validRanges(expectFrom, ranges); err != nil {
		return nil, fmt.Errorf("dispatch %s/%s: %w", tenant, dest, err)
	}
	for attempt := 0; ; attempt++ {
		r, ok := s.dispatches.do(ctx, dispatchArgs{tenant, dest, holder, expectFrom, ranges, p.Rank()})
		if !ok {
			return nil, fmt.Errorf("dispatch %s/%s: %w", tenant, dest, ctx.Err())
		}
		ls, status, err := r.leases, r.status, r.err
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

// dispatchArgs are one DispatchMany call's arguments; rank is the rank of
// the batches' priority (events.Priority.Rank; -1: every priority, a
// replay's).
type dispatchArgs struct {
	tenant, dest, holder string
	expectFrom           uint64
	ranges               []Range
	rank                 int
}

// dispatchResult is its outcome. A nil status with a non-nil error means
// the pair is unknown.
type dispatchResult struct {
	leases []Lease
	status *string
	err    error
}

// dispatchRow accumulates a dispatch statement's rows for one call.
type dispatchRow struct {
	out           []Lease
	moved, locked int
	status        *string
}

// dispatchScan is one row of dispatchSQL, or of dispatchGroupSQL, which
// begins with the pair's number.
type dispatchScan struct {
	pi             int64
	moved, locked  int
	slot           *int
	token          *int64
	expires        *time.Time
	fromSeq, toSeq *int64
	status         *string
}

func (d *dispatchScan) fields(group bool) []any {
	f := []any{&d.moved, &d.locked, &d.slot, &d.token, &d.expires, &d.fromSeq, &d.toSeq, &d.status}
	if group {
		f = append([]any{&d.pi}, f...)
	}
	return f
}

func (r *dispatchRow) add(a dispatchArgs, d dispatchScan) {
	r.moved, r.locked, r.status = d.moved, d.locked, d.status
	if d.slot != nil {
		r.out = append(r.out, Lease{
			ID: leaseID(a.tenant, a.dest, *d.slot, *d.token), Tenant: a.tenant, Dest: a.dest, Slot: *d.slot, Token: *d.token,
			Holder: a.holder, ExpiresAt: *d.expires, FromSeq: uint64(*d.fromSeq), ToSeq: uint64(*d.toSeq),
		})
	}
}

// result says what the rows mean.
func (r *dispatchRow) result(a dispatchArgs) dispatchResult {
	switch {
	case r.status == nil:
		return dispatchResult{err: fmt.Errorf("dispatch %s/%s: %w", a.tenant, a.dest, ErrUnknownTenant)}
	case r.locked == 0:
		return dispatchResult{status: r.status, err: fmt.Errorf("dispatch %s/%s: %w", a.tenant, a.dest, missReason(r.status))}
	case r.moved == 0:
		return dispatchResult{status: r.status, err: fmt.Errorf("dispatch %s/%s from %d: %w", a.tenant, a.dest, a.expectFrom, ErrCursorMoved)}
	case len(r.out) == 0:
		return dispatchResult{status: r.status, err: fmt.Errorf("dispatch %s/%s: slots locked but none taken", a.tenant, a.dest)}
	}
	return dispatchResult{leases: r.out, status: r.status}
}

// dispatchGroupMax is the most DispatchMany calls one statement carries.
const dispatchGroupMax = 32

// dispatchLinger is how long a dispatch waits for others while dispatches
// come often (grouper): a grant's commit that much later, against a
// statement that costs the backend 40% less a call with four in it.
const dispatchLinger = 2 * time.Millisecond

// newDispatchGroup groups concurrent DispatchMany calls of different pairs
// (grouper; two calls of one pair never share a statement).
func (s *Store) newDispatchGroup() *grouper[dispatchArgs, dispatchResult] {
	return &grouper[dispatchArgs, dispatchResult]{
		max:    dispatchGroupMax,
		key:    func(a dispatchArgs) string { return a.tenant + " " + a.dest },
		run:    s.dispatchBatch,
		linger: dispatchLinger,
	}
}

// DispatchStats returns how many dispatch statements DispatchMany has run
// and how many calls they carried.
func (s *Store) DispatchStats() (statements, calls int) { return s.dispatches.stats() }

// dispatchBatch runs one call with dispatchSQL, more with
// dispatchGroupSQL. If the grouped statement fails (a deadlock with
// another dispatcher's, say), each call runs alone.
func (s *Store) dispatchBatch(ctx context.Context, args []dispatchArgs) []dispatchResult {
	if len(args) > 1 {
		if res, err := s.dispatchGroup(ctx, args); err == nil {
			return res
		}
	}
	res := make([]dispatchResult, len(args))
	for i, a := range args {
		res[i] = s.dispatchOne(ctx, a)
	}
	return res
}

// dispatchOne runs dispatchSQL for one call.
func (s *Store) dispatchOne(ctx context.Context, a dispatchArgs) dispatchResult {
	return s.dispatchWith(ctx, dispatchSQL, a)
}

// dispatchWith runs one call with query, dispatchSQL or one with its
// arguments and rows (dispatchReplaySQL).
func (s *Store) dispatchWith(ctx context.Context, query string, a dispatchArgs) dispatchResult {
	froms, tos := make([]int64, len(a.ranges)), make([]int64, len(a.ranges))
	for i, r := range a.ranges {
		froms[i], tos[i] = int64(r.From), int64(r.To)
	}
	fail := func(err error) dispatchResult {
		return dispatchResult{status: &status0, err: fmt.Errorf("dispatch %s/%s: %w", a.tenant, a.dest, err)}
	}
	rows, err := s.pool.Query(ctx, query, a.tenant, a.dest, a.holder, s.ttlUS, froms, tos, int64(a.expectFrom), a.rank)
	if err != nil {
		return fail(err)
	}
	defer rows.Close()
	var r dispatchRow
	for rows.Next() {
		var row dispatchScan
		if err := rows.Scan(row.fields(false)...); err != nil {
			return fail(err)
		}
		r.add(a, row)
	}
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	return r.result(a)
}

// dispatchGroupSQL is dispatchSQL for several (tenant, dest) pairs, each
// with its own holder, cursor and ranges, in one statement; pairs are
// distinct. $1 tenants, $2 dests, $3 holders, $4 cursors, $5 ranges per
// pair (q.pi numbers the pairs from 1); $6..$9 the ranges: pair number,
// from, to, and number within the pair (from 1, in order); $10 ttl µs.
// Each pair's part does what dispatchSQL does for it, independently of the
// others: its slots are locked with SKIP LOCKED and paired with its
// ranges, its cursor moves only if it still equals its $4 and a slot was
// locked, and only then are its slots taken and its batches logged.
var dispatchGroupSQL = `WITH q AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::int[], $11::int[]) WITH ORDINALITY AS q(tenant, dest, holder, expect, n, rank, pi)
), c AS (
	SELECT q.pi, k.slot_no FROM q CROSS JOIN LATERAL (SELECT s.slot_no ` + fmt.Sprintf(candidateSQL, "q.tenant", "q.dest", "q.n") + `) k
), cn AS (SELECT pi, slot_no, row_number() OVER (PARTITION BY pi ORDER BY slot_no) AS rn FROM c
), r AS (SELECT * FROM unnest($6::int[], $7::bigint[], $8::bigint[], $9::int[]) AS r(pi, f, t, rn)
), m AS (SELECT cn.pi, cn.slot_no, r.f, r.t FROM cn JOIN r ON r.pi = cn.pi AND r.rn = cn.rn
), cur AS (
	UPDATE fairway.cursors cu SET ` + laneMoveSQL("q.rank", "cu", "mm.last + 1") + `
	FROM (SELECT pi, max(t) AS last FROM m GROUP BY pi) mm JOIN q ON q.pi = mm.pi
	WHERE cu.tenant = q.tenant AND cu.dest = q.dest AND ` + laneCursorSQL("q.rank", "cu") + ` = q.expect
	RETURNING mm.pi
), u AS (
	UPDATE fairway.slots s SET ` + fmt.Sprintf(takeSetSQL, "$10", "q.rank::smallint") + `, holder = q.holder, from_seq = m.f, to_seq = m.t
	FROM m JOIN q ON q.pi = m.pi JOIN cur ON cur.pi = m.pi
	WHERE s.tenant = q.tenant AND s.dest = q.dest AND s.slot_no = m.slot_no
	RETURNING m.pi, s.slot_no, s.epoch, s.expires_at, s.from_seq, s.to_seq
), b AS (
	INSERT INTO fairway.batches (tenant, dest, from_seq, to_seq, slot_no, epoch, holder)
	SELECT q.tenant, q.dest, u.from_seq, u.to_seq, u.slot_no, u.epoch, q.holder FROM u JOIN q ON q.pi = u.pi
)
SELECT q.pi, (SELECT count(*) FROM cur WHERE cur.pi = q.pi), (SELECT count(*) FROM c WHERE c.pi = q.pi),
	u.slot_no, u.epoch, u.expires_at, u.from_seq, u.to_seq,
	(SELECT ` + statusCaseSQL + `
	 FROM fairway.limits l JOIN fairway.tenants t ON t.id = l.tenant WHERE l.tenant = q.tenant AND l.dest = q.dest)
FROM q LEFT JOIN u ON u.pi = q.pi
ORDER BY q.pi, u.from_seq`

// dispatchGroup runs dispatchGroupSQL for args (distinct pairs).
func (s *Store) dispatchGroup(ctx context.Context, args []dispatchArgs) ([]dispatchResult, error) {
	var (
		ts, ds, hs = make([]string, len(args)), make([]string, len(args)), make([]string, len(args))
		expects    = make([]int64, len(args))
		ns, ranks  = make([]int32, len(args)), make([]int32, len(args))
		rpi, rn    []int32
		froms, tos []int64
	)
	for i, a := range args {
		ts[i], ds[i], hs[i], expects[i], ns[i], ranks[i] = a.tenant, a.dest, a.holder, int64(a.expectFrom), int32(len(a.ranges)), int32(a.rank)
		for j, r := range a.ranges {
			rpi, rn = append(rpi, int32(i+1)), append(rn, int32(j+1))
			froms, tos = append(froms, int64(r.From)), append(tos, int64(r.To))
		}
	}
	// PostgreSQL plans this statement afresh at each execution unless told
	// to keep its generic plan (its estimate of the generic plan loses to
	// the custom plans' for array arguments), and planning it costs more
	// CPU than grouping saves. The setting is local to the batch's implicit
	// transaction.
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`)
	b.Queue(dispatchGroupSQL, ts, ds, hs, expects, ns, rpi, froms, tos, rn, s.ttlUS, ranks)
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	acc := make([]dispatchRow, len(args))
	for rows.Next() {
		var row dispatchScan
		if err := rows.Scan(row.fields(true)...); err != nil {
			return nil, err
		}
		if row.pi < 1 || int(row.pi) > len(args) {
			return nil, fmt.Errorf("dispatch: row for pair %d of %d", row.pi, len(args))
		}
		acc[row.pi-1].add(args[row.pi-1], row)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	res := make([]dispatchResult, len(args))
	for i, a := range args {
		res[i] = acc[i].result(a)
	}
	return res, nil
}

// status0 marks errors that are not "unknown pair" (no retry).
var status0 = "error"
