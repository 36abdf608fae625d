package tenancy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Lease is one held slot. ID names the lease forever: it is
// "<tenant>/<dest>/<slot>/<token>" (no part contains "/"), so a release is
// a primary-key update and no secondary index on a lease id is needed.
type Lease struct {
	ID           string
	Tenant, Dest string
	Slot         int
	// Token is the fencing epoch: it grows by one with every acquisition of
	// the slot. Only the newest token can extend or release the slot; sinks
	// can use it to fence their own writes.
	Token  int64
	Holder string
	// ExpiresAt is on the database clock.
	ExpiresAt time.Time
	// FromSeq..ToSeq is the batch the lease covers (set by Dispatch; zero
	// for plain Acquire).
	FromSeq, ToSeq uint64
}

// AcquireRequest asks for up to N slots of (Tenant, Dest) for Holder.
type AcquireRequest struct {
	Tenant, Dest, Holder string
	// N is how many slots are wanted; 0 means 1.
	N int
}

func leaseID(tenant, dest string, slot int, token int64) string {
	return tenant + "/" + dest + "/" + strconv.Itoa(slot) + "/" + strconv.FormatInt(token, 10)
}

// ParseLeaseID splits a lease id into its slot identity and token.
func ParseLeaseID(id string) (tenant, dest string, slot int, token int64, err error) {
	parts := strings.Split(id, "/")
	if len(parts) != 4 {
		return "", "", 0, 0, fmt.Errorf("%w: lease id %q", ErrInvalidArgument, id)
	}
	if validPair(parts[0], parts[1]) != nil {
		return "", "", 0, 0, fmt.Errorf("%w: lease id %q", ErrInvalidArgument, id)
	}
	slot, err1 := strconv.Atoi(parts[2])
	token, err2 := strconv.ParseInt(parts[3], 10, 64)
	if err1 != nil || err2 != nil {
		return "", "", 0, 0, fmt.Errorf("%w: lease id %q", ErrInvalidArgument, id)
	}
	return parts[0], parts[1], slot, token, nil
}

// candidateSQL selects free slots of one (tenant, dest) and locks them. It
// is the heart of the Limit invariant (see doc.go):
//   - only slot rows numbered from 0 to below the current max_slots
//     qualify (rows below 0 are replays' slots: replayCandidateSQL), and a
//     slot row can carry one lease at a time, so live leases on rows below
//     the limit never exceed it;
//   - while any live lease sits on a row at or above max_slots (the limit
//     was lowered under it), nothing is handed out: in-use first falls
//     under the new limit;
//   - a pair held for a stream reset (limits.stream_reset_at, CheckStream)
//     gets none: its cursor does not belong to the stream;
//   - FOR UPDATE SKIP LOCKED makes concurrent acquirers take different
//     rows without waiting; a row updated by a concurrent committed
//     acquirer is re-checked on its newest version (READ COMMITTED
//     EvalPlanQual) and dropped when no longer free.
//
// %[1]s, %[2]s: tenant and dest expressions; %[3]s: the LIMIT.
const candidateSQL = `
	FROM fairway.limits l
	JOIN fairway.tenants t ON t.id = l.tenant
	JOIN fairway.slots s ON s.tenant = l.tenant AND s.dest = l.dest
	WHERE l.tenant = %[1]s AND l.dest = %[2]s
	  AND s.slot_no >= 0 AND s.slot_no < l.max_slots
	  AND (s.expires_at IS NULL OR s.expires_at < now())
	  AND NOT t.paused AND NOT l.paused AND l.stream_reset_at IS NULL
	  AND NOT EXISTS (
		SELECT 1 FROM fairway.slots h
		WHERE h.tenant = l.tenant AND h.dest = l.dest
		  AND h.slot_no >= l.max_slots AND h.expires_at >= now())
	ORDER BY s.slot_no
	LIMIT %[3]s
	FOR UPDATE OF s SKIP LOCKED`

// takeSetSQL is the SET list of a taken slot. The outer UPDATE re-checks
// that the row is free; it already holds the row lock from the candidate
// CTE, so the re-check sees the newest row version.
const takeSetSQL = `epoch = s.epoch + 1, acquired_at = now(),
	expires_at = now() + %s::bigint * interval '1 microsecond', priority = %s`

const freeSQL = `(s.expires_at IS NULL OR s.expires_at < now())`

// statusCaseSQL says why a pair (limits l, tenants t) got no slot:
// 'stream reset', 'paused' or 'busy' (see missReason).
const statusCaseSQL = `CASE WHEN l.stream_reset_at IS NOT NULL THEN 'stream reset'
	WHEN t.paused OR l.paused THEN 'paused' ELSE 'busy' END`

// statusSQL says why nothing was taken: NULL = unknown (tenant, dest), else
// statusCaseSQL. Evaluated only when no slot was taken.
const statusSQL = `(SELECT ` + statusCaseSQL + `
	FROM fairway.limits l JOIN fairway.tenants t ON t.id = l.tenant
	WHERE l.tenant = $1 AND l.dest = $2)`

// acquireSQL: $1 tenant, $2 dest, $3 holder, $4 ttl µs, $5 and $6 the
// batch the lease records (NULL: none; AcquireBatch).
var acquireSQL = `WITH c AS (SELECT s.slot_no ` + fmt.Sprintf(candidateSQL, "$1", "$2", "1") + `
), u AS (
	UPDATE fairway.slots s SET ` + fmt.Sprintf(takeSetSQL, "$4", "NULL") + `, holder = $3, from_seq = $5::bigint, to_seq = $6::bigint
	FROM c WHERE s.tenant = $1 AND s.dest = $2 AND s.slot_no = c.slot_no AND ` + freeSQL + `
	RETURNING s.slot_no, s.epoch, s.expires_at
)
SELECT u.slot_no, u.epoch, u.expires_at, CASE WHEN u.slot_no IS NULL THEN ` + statusSQL + ` END
FROM (VALUES (1)) v LEFT JOIN u ON true`

// missReason turns the status of an empty acquisition into an error; nil
// status means the pair has never been seen.
func missReason(status *string) error {
	switch {
	case status == nil:
	case *status == "paused":
		return ErrPaused
	case *status == "stream reset":
		return ErrStreamReset
	}
	return ErrAtLimit
}

// Acquire takes one free slot of (tenant, dest) for holder in one
// statement. ErrAtLimit when none is free (ErrPaused, which matches
// ErrAtLimit, when the tenant is paused). A tenant or destination seen for
// the first time is created with defaults.
func (s *Store) Acquire(ctx context.Context, tenant, dest, holder string) (Lease, error) {
	return s.acquire(ctx, tenant, dest, holder, Range{})
}

// AcquireBatch is Acquire for a batch that does not come from the cursor
// (a dead letter sent back to its destination): the lease records
// r.From..r.To as Dispatch records a batch, so that if it expires before
// its holder releases it, the range becomes an orphan and a dispatcher
// dispatches it again (Orphans). The cursor does not move.
func (s *Store) AcquireBatch(ctx context.Context, tenant, dest, holder string, r Range) (Lease, error) {
	if r.From < 1 || r.To < r.From || r.To > math.MaxInt64 {
		return Lease{}, fmt.Errorf("acquire %s/%s: %w: range %d..%d", tenant, dest, ErrInvalidArgument, r.From, r.To)
	}
	return s.acquire(ctx, tenant, dest, holder, r)
}

// acquire runs acquireSQL; a zero r records no batch.
func (s *Store) acquire(ctx context.Context, tenant, dest, holder string, r Range) (Lease, error) {
	if err := validPair(tenant, dest); err != nil {
		return Lease{}, err
	}
	var from, to *int64
	if r.From > 0 {
		f, t := int64(r.From), int64(r.To)
		from, to = &f, &t
	}
	for attempt := 0; ; attempt++ {
		var (
			slot    *int
			token   *int64
			expires *time.Time
			status  *string
		)
		if err := s.pool.QueryRow(ctx, acquireSQL, tenant, dest, holder, s.ttlUS, from, to).Scan(&slot, &token, &expires, &status); err != nil {
			return Lease{}, fmt.Errorf("acquire %s/%s: %w", tenant, dest, err)
		}
		if slot != nil {
			return Lease{
				ID: leaseID(tenant, dest, *slot, *token), Tenant: tenant, Dest: dest, Slot: *slot,
				Token: *token, Holder: holder, ExpiresAt: *expires, FromSeq: r.From, ToSeq: r.To,
			}, nil
		}
		if status != nil || attempt > 0 {
			return Lease{}, fmt.Errorf("acquire %s/%s: %w", tenant, dest, missReason(status))
		}
		if err := s.ensurePairs(ctx, []pair{{tenant, dest}}); err != nil {
			return Lease{}, err
		}
	}
}

// acquireManySQL: $1 tenants, $2 dests, $3 holders, $4 counts, $5 ttl µs.
// Rows with slot_no -1 report requests whose (tenant, dest) is unknown.
var acquireManySQL = `WITH req AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[]) WITH ORDINALITY AS r(tenant, dest, holder, n, ord)
), c AS (
	SELECT req.ord, req.holder, x.tenant, x.dest, x.slot_no
	FROM req CROSS JOIN LATERAL (SELECT s.tenant, s.dest, s.slot_no ` + fmt.Sprintf(candidateSQL, "req.tenant", "req.dest", "req.n") + `) x
), u AS (
	UPDATE fairway.slots s SET ` + fmt.Sprintf(takeSetSQL, "$5", "NULL") + `, holder = c.holder, from_seq = NULL, to_seq = NULL
	FROM c WHERE s.tenant = c.tenant AND s.dest = c.dest AND s.slot_no = c.slot_no AND ` + freeSQL + `
	RETURNING c.ord, s.slot_no, s.epoch, s.expires_at
)
SELECT ord, slot_no, epoch, expires_at FROM u
UNION ALL
SELECT req.ord, -1, 0, NULL FROM req
WHERE NOT EXISTS (SELECT 1 FROM fairway.limits l WHERE l.tenant = req.tenant AND l.dest = req.dest)`

// AcquireMany takes up to N free slots for each request in one round trip
// (two the first time a pair is seen). Requests for the same (tenant, dest)
// are merged (the first holder wins). The leases come back grouped in
// request order; a request that got fewer slots than it asked for is at its
// limit (or paused) — that is not an error.
func (s *Store) AcquireMany(ctx context.Context, reqs []AcquireRequest) ([]Lease, error) {
	merged := make([]AcquireRequest, 0, len(reqs))
	index := make(map[pair]int, len(reqs))
	for _, r := range reqs {
		if err := validPair(r.Tenant, r.Dest); err != nil {
			return nil, err
		}
		n := r.N
		if n == 0 {
			n = 1
		}
		if n < 0 || n > MaxSlotsMax {
			return nil, fmt.Errorf("acquire %s/%s: %w: N %d", r.Tenant, r.Dest, ErrInvalidArgument, r.N)
		}
		p := pair{r.Tenant, r.Dest}
		if i, ok := index[p]; ok {
			merged[i].N += n
			continue
		}
		index[p] = len(merged)
		r.N = n
		merged = append(merged, r)
	}
	var out []Lease
	todo := merged
	for attempt := 0; len(todo) > 0; attempt++ {
		leases, unknown, err := s.acquireMany(ctx, todo)
		if err != nil {
			return out, err
		}
		out = append(out, leases...)
		if len(unknown) == 0 || attempt > 0 {
			break
		}
		pairs := make([]pair, len(unknown))
		for i, r := range unknown {
			pairs[i] = pair{r.Tenant, r.Dest}
		}
		if err := s.ensurePairs(ctx, pairs); err != nil {
			return out, err
		}
		todo = unknown
	}
	order := func(l Lease) int { return index[pair{l.Tenant, l.Dest}] }
	sort.SliceStable(out, func(i, j int) bool {
		if oi, oj := order(out[i]), order(out[j]); oi != oj {
			return oi < oj
		}
		return out[i].Slot < out[j].Slot
	})
	return out, nil
}

func (s *Store) acquireMany(ctx context.Context, reqs []AcquireRequest) (leases []Lease, unknown []AcquireRequest, err error) {
	ts := make([]string, len(reqs))
	ds := make([]string, len(reqs))
	hs := make([]string, len(reqs))
	ns := make([]int32, len(reqs))
	for i, r := range reqs {
		ts[i], ds[i], hs[i], ns[i] = r.Tenant, r.Dest, r.Holder, int32(r.N)
	}
	rows, err := s.pool.Query(ctx, acquireManySQL, ts, ds, hs, ns, s.ttlUS)
	if err != nil {
		return nil, nil, fmt.Errorf("acquire many: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			ord     int64
			slot    int
			token   int64
			expires *time.Time
		)
		if err := rows.Scan(&ord, &slot, &token, &expires); err != nil {
			return nil, nil, fmt.Errorf("acquire many: %w", err)
		}
		r := reqs[ord-1]
		if slot < 0 {
			unknown = append(unknown, r)
			continue
		}
		leases = append(leases, Lease{
			ID: leaseID(r.Tenant, r.Dest, slot, token), Tenant: r.Tenant, Dest: r.Dest, Slot: slot,
			Token: token, Holder: r.Holder, ExpiresAt: *expires,
		})
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("acquire many: %w", err)
	}
	return leases, unknown, nil
}

// Extend pushes the lease's expiry to now + LeaseTTL (database clock) and
// returns the updated lease. ErrStaleLease if the lease was released or
// fenced out by a newer acquisition. An expired lease whose slot nobody
// took yet can still be extended: nobody else holds it.
func (s *Store) Extend(ctx context.Context, l Lease) (Lease, error) {
	tenant, dest, slot, token, err := ParseLeaseID(l.ID)
	if err != nil {
		return Lease{}, err
	}
	if token != l.Token {
		return Lease{}, fmt.Errorf("extend %s: token %d: %w", l.ID, l.Token, ErrStaleLease)
	}
	err = s.pool.QueryRow(ctx, `UPDATE fairway.slots SET expires_at = now() + $5::bigint * interval '1 microsecond'
		WHERE tenant = $1 AND dest = $2 AND slot_no = $3 AND epoch = $4 AND expires_at IS NOT NULL
		RETURNING expires_at`, tenant, dest, slot, token, s.ttlUS).Scan(&l.ExpiresAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Lease{}, fmt.Errorf("extend %s: %w", l.ID, ErrStaleLease)
	case err != nil:
		return Lease{}, fmt.Errorf("extend %s: %w", l.ID, err)
	}
	return l, nil
}

// asyncCommitSQL turns off synchronous commit for the current transaction.
// Releases (and sweeps) use it: losing a release in a database crash is
// safe — the lease then expires and is reclaimed, which is the No-leak
// path anyway — and it keeps NOTIFY cheap. PostgreSQL serialises the
// commits of notifying transactions under one lock held through the WAL
// flush, so with synchronous commit every release would wait for every
// other release's fsync. Acquisitions, extensions and dispatches stay
// synchronous: losing one could hand a token out twice.
const asyncCommitSQL = `SELECT set_config('synchronous_commit', 'off', true)`

// releaseSQL frees one slot if the token still fences it and notifies
// listeners in the same statement. $1..$4: tenant, dest, slot, token.
const releaseSQL = `WITH a AS (` + asyncCommitSQL + `), r AS (
	UPDATE fairway.slots SET expires_at = NULL, holder = NULL
	WHERE tenant = $1 AND dest = $2 AND slot_no = $3 AND epoch = $4 AND expires_at IS NOT NULL
	RETURNING tenant, dest, slot_no
), n AS (` + notifyFreedSQL + `) SELECT count(*) + 0 * (SELECT count(*) FROM a) FROM n`

// Release frees the lease's slot and wakes listeners. It is idempotent: nil
// if it released the slot or the same lease had already released it (or a
// sweeper did). ErrStaleLease if the slot has been leased again since
// (token is stale); then nothing changes.
//
// Releases made at the same time are combined into one statement
// (grouper); each call still gets its own lease's outcome. A call whose
// ctx ends while it waits for a statement releases nothing.
func (s *Store) Release(ctx context.Context, leaseID string, token int64) error {
	_, _, _, idToken, err := ParseLeaseID(leaseID)
	if err != nil {
		return err
	}
	if idToken != token {
		return fmt.Errorf("release %s: token %d: %w", leaseID, token, ErrStaleLease)
	}
	err, ok := s.releases.do(ctx, Lease{ID: leaseID, Token: token})
	if !ok {
		return fmt.Errorf("release %s: %w", leaseID, ctx.Err())
	}
	return err
}

// releaseOne is Release in a statement of its own.
func (s *Store) releaseOne(ctx context.Context, leaseID string, token int64) error {
	tenant, dest, slot, _, err := ParseLeaseID(leaseID)
	if err != nil {
		return err
	}
	var n int64
	if err := s.pool.QueryRow(ctx, releaseSQL, tenant, dest, slot, token).Scan(&n); err != nil {
		return fmt.Errorf("release %s: %w", leaseID, err)
	}
	if n == 1 {
		return nil
	}
	// Miss path: already released by this lease, or fenced out.
	var epoch int64
	err = s.pool.QueryRow(ctx, `SELECT epoch FROM fairway.slots WHERE tenant = $1 AND dest = $2 AND slot_no = $3`,
		tenant, dest, slot).Scan(&epoch)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("release %s: no such slot: %w", leaseID, ErrStaleLease)
	case err != nil:
		return fmt.Errorf("release %s: %w", leaseID, err)
	case epoch != token:
		return fmt.Errorf("release %s: slot now at token %d: %w", leaseID, epoch, ErrStaleLease)
	}
	return nil
}

// ReleaseMany releases leases in one round trip, with Release's semantics
// per lease. If some were stale it releases the others and returns an error
// matching ErrStaleLease that counts them.
func (s *Store) ReleaseMany(ctx context.Context, leases []Lease) error {
	if len(leases) == 0 {
		return nil
	}
	x, err := releaseArgs(leases)
	if err != nil {
		return err
	}
	released, err := s.releaseMany(ctx, x)
	if err != nil {
		return fmt.Errorf("release %d leases: %w", len(leases), err)
	}
	stale := x.stale
	if n := count(released); n+stale < len(leases) {
		var fenced int
		err := s.pool.QueryRow(ctx, `SELECT count(*)
			FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[]) AS x(t, d, n, e)
			LEFT JOIN fairway.slots s ON s.tenant = x.t AND s.dest = x.d AND s.slot_no = x.n
			WHERE x.e >= 0 AND (s.epoch IS NULL OR s.epoch <> x.e)`, x.ts, x.ds, x.ns, x.es).Scan(&fenced)
		if err != nil {
			return fmt.Errorf("release %d leases: %w", len(leases), err)
		}
		stale += fenced
	}
	if stale > 0 {
		return fmt.Errorf("release %d leases: %d fenced out: %w", len(leases), stale, ErrStaleLease)
	}
	return nil
}

// leaseArrays are leases as releaseManySQL binds them; a lease whose id
// and token disagree gets token -1, which matches nothing (stale counts
// them).
type leaseArrays struct {
	ts, ds []string
	ns     []int32
	es     []int64
	stale  int
}

func releaseArgs(leases []Lease) (leaseArrays, error) {
	x := leaseArrays{ts: make([]string, len(leases)), ds: make([]string, len(leases)), ns: make([]int32, len(leases)), es: make([]int64, len(leases))}
	for i, l := range leases {
		tenant, dest, slot, token, err := ParseLeaseID(l.ID)
		if err != nil {
			return x, err
		}
		if token != l.Token {
			x.stale++
			token = -1
		}
		x.ts[i], x.ds[i], x.ns[i], x.es[i] = tenant, dest, int32(slot), token
	}
	return x, nil
}

// notifyFreedSQL notifies once per pair and lane of the rows of CTE r
// (tenant, dest, slot_no: slots freed), with the number freed when it is
// more than one (Released.Slots) and, for a replay's slots, the word
// replay (Released.Replay).
const notifyFreedSQL = `SELECT pg_notify('` + NotifyChannel + `', tenant || ' ' || dest
		|| CASE WHEN replay THEN ' ` + notifyReplay + `' ELSE '' END || CASE WHEN n > 1 THEN ' ' || n ELSE '' END)
	FROM (SELECT tenant, dest, slot_no < 0 AS replay, count(*) AS n FROM r GROUP BY tenant, dest, slot_no < 0) d`

// releaseManySQL frees the slots the leases still fence, notifies once per
// pair with the number freed, and returns the ordinal (from 1) of each
// lease it released. $1..$4: tenants, dests, slots, tokens.
const releaseManySQL = `WITH a AS (` + asyncCommitSQL + `), x AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[]) WITH ORDINALITY AS x(t, d, n, e, i)
), r AS (
	UPDATE fairway.slots s SET expires_at = NULL, holder = NULL FROM x
	WHERE s.tenant = x.t AND s.dest = x.d AND s.slot_no = x.n AND s.epoch = x.e AND s.expires_at IS NOT NULL
	RETURNING s.tenant, s.dest, s.slot_no, x.i
), n AS (` + notifyFreedSQL + `) SELECT i FROM r WHERE (SELECT count(*) FROM n) + (SELECT count(*) FROM a) > 0`

// releaseMany runs releaseManySQL; released[i] says lease i was released
// by it.
func (s *Store) releaseMany(ctx context.Context, x leaseArrays) (released []bool, err error) {
	rows, err := s.pool.Query(ctx, releaseManySQL, x.ts, x.ds, x.ns, x.es)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	released = make([]bool, len(x.ts))
	for rows.Next() {
		var i int64
		if err := rows.Scan(&i); err != nil {
			return nil, err
		}
		if i < 1 || int(i) > len(released) {
			return nil, fmt.Errorf("released lease %d of %d", i, len(released))
		}
		released[i-1] = true
	}
	return released, rows.Err()
}

func count(bs []bool) (n int) {
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// InUse counts live leases of (tenant, dest): its live batches, not its
// replay's (PairStatus.ReplayInUse).
func (s *Store) InUse(ctx context.Context, tenant, dest string) (int, error) {
	if err := validPair(tenant, dest); err != nil {
		return 0, err
	}
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM fairway.slots
		WHERE tenant = $1 AND dest = $2 AND expires_at >= now() AND slot_no >= 0`, tenant, dest).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("in use %s/%s: %w", tenant, dest, err)
	}
	return n, nil
}

// Sweep frees expired leases and wakes listeners for them. It is a tidy-up
// (and a wake-up source for slots of crashed holders); acquisition
// reclaims expired leases by itself, so correctness never depends on it.
func (s *Store) Sweep(ctx context.Context) (int, error) {
	var n, notified int
	err := s.pool.QueryRow(ctx, `WITH a AS (`+asyncCommitSQL+`), c AS (
			SELECT tenant, dest, slot_no FROM fairway.slots
			WHERE expires_at < now() FOR UPDATE SKIP LOCKED
		), r AS (
			UPDATE fairway.slots s SET expires_at = NULL, holder = NULL FROM c
			WHERE s.tenant = c.tenant AND s.dest = c.dest AND s.slot_no = c.slot_no AND s.expires_at < now()
			RETURNING s.tenant, s.dest, s.slot_no
		), n AS (`+notifyFreedSQL+`) SELECT (SELECT count(*) FROM r), (SELECT count(*) FROM n) + 0 * (SELECT count(*) FROM a)`).Scan(&n, &notified)
	if err != nil {
		return 0, fmt.Errorf("sweep: %w", err)
	}
	return n, nil
}
