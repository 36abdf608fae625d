// Package tenancy keeps fairway's per-tenant state in PostgreSQL: tenants
// and their weights, API tokens (stored as SHA-256 hashes and a short
// prefix), slot limits per (tenant, destination), fenced slot leases,
// dispatch cursors and the batch log, ingest quotas, and wake-ups when a
// slot frees. The dispatcher, the sinks, ingest (token checks, quotas) and
// the operator CLI use it through Store.
//
// # Schema (internal/migrate/sql/00002_tenancy.sql)
//
//	tenants(id, display_name, weight, paused, created_at)
//	api_tokens(hash, tenant|NULL for admin, admin, name, created_at, revoked_at,
//	           id, prefix)                                  PK hash; id, prefix: 00013
//	limits(tenant, dest, max_slots, weight, changed_at, paused,
//	       stream_reset_at, stream_reset_detail)          PK (tenant, dest)
//	slots(tenant, dest, slot_no, epoch, holder, acquired_at, expires_at,
//	      from_seq, to_seq, priority,
//	      wait_kind, wait_detail, wait_epoch, wait_since)   PK (tenant, dest, slot_no); priority: 00022
//	cursors(tenant, dest, next_seq, high_next, bulk_next, replay_next,
//	        replay_until, replay_rate, replay_slots)       PK (tenant, dest); replay_*: 00011, 00021; high_, bulk_next: 00022
//	batches(id, tenant, dest, from_seq, to_seq, slot_no, epoch, holder, created_at)
//	streams(name, created_at)                               PK name; 00016
//	quotas(tenant, events_per_sec, events_burst, bytes_per_sec, bytes_burst,
//	       max_backlog, events_tat, bytes_tat, changed_at)  PK tenant; 00017
//
// A pair has a cursor per priority of the tenant's events (next_seq for
// normal ones, high_next, bulk_next: DispatchPriority), and a lease
// records the priority of its batch (NULL: every event of the tenant in
// its range), which its orphan keeps.
//
// stream_reset_at (00016) holds a pair whose cursor does not belong to the
// stream (CheckStream): no slot of it is handed out (ErrStreamReset) until
// ResetCursors. streams keeps the creation time of the stream the cursors
// point into, which tells a stream created anew.
//
// The wait_* columns (00009) are a note the holder of a lease leaves with
// SetLeaseWait while it backs off ("retrying", "circuit open"); it counts
// only while wait_epoch is the live lease's epoch (PairStatuses).
//
// A (tenant, destination) seen for the first time — by Acquire,
// AcquireMany, Dispatch, Cursor or SetCursor — is created with defaults
// (tenant weight 1, max_slots 1, cursor 1). The hot path does not pay for
// that: the acquisition statement reports "unknown pair" as a by-product,
// and only then is a one-round-trip batch of INSERT … ON CONFLICT DO
// NOTHING sent and the statement retried.
//
// quotas (quota.go) holds a tenant's ingest quotas and the state of their
// token buckets, shared by every ingest replica: TakeQuota is one
// statement per request (docs/quotas.md).
//
// # Slots and the acquisition statement
//
// Every (tenant, dest) has one slots row per slot number below the highest
// max_slots it ever had; SetLimit creates missing rows in the same
// transaction that changes the limit. A replay's slots are the rows
// numbered -1 down to -replay_slots, which Rewind creates (replay_lane.go):
// live dispatch never takes them, nor the replay lane a live one. A slot is held while
// expires_at >= now() and free when expires_at is NULL or past — the
// database clock decides, never a Go clock. Acquire is one statement:
//
//	WITH c AS (
//	  SELECT s.slot_no FROM limits l JOIN tenants t … JOIN slots s …
//	  WHERE l.tenant = $1 AND l.dest = $2
//	    AND s.slot_no < l.max_slots                        -- (1)
//	    AND (s.expires_at IS NULL OR s.expires_at < now()) -- free or expired
//	    AND NOT t.paused AND NOT l.paused
//	    AND NOT EXISTS (live lease on a slot_no >= l.max_slots) -- (2)
//	  ORDER BY s.slot_no LIMIT 1
//	  FOR UPDATE OF s SKIP LOCKED)                         -- (3)
//	UPDATE slots s SET epoch = epoch + 1, holder = $3, acquired_at = now(),
//	       expires_at = now() + ttl
//	FROM c WHERE s.<key> = c.<key> AND <free>               -- (4)
//	RETURNING slot_no, epoch, expires_at
//
// Why it cannot exceed max_slots under any interleaving:
//
//  1. A lease lives in a slot row, and a row carries at most one lease.
//     Only rows numbered below the limit the statement sees are taken, so
//     leases on those rows never number more than the limit.
//  2. After a limit is lowered, rows at or above it may still carry older
//     leases. While any of them is live, nothing is handed out, so in-use
//     converges: no new slot until every lease above the new limit ends
//     (within one batch time, or one lease TTL if its holder died). High
//     rows are never taken again, so that condition only ever becomes true.
//  3. The row lock, not a count read in Go, decides ownership. SKIP LOCKED
//     sends concurrent acquirers to different rows without waiting, which
//     avoids the convoy of callers queueing on one counter row
//     (docs/benchmarks.md, "Slot leases"). Under READ COMMITTED a row
//     updated by an acquirer that committed after our snapshot is locked
//     in its newest version and the WHERE clause is re-evaluated on it
//     (EvalPlanQual): a row that is no longer free is skipped, not taken.
//  4. The UPDATE repeats the free condition and joins on the locked row's
//     key only — the classic SKIP LOCKED pitfall (an outer statement that
//     re-runs the subquery, or takes a row the subquery did not lock) does
//     not arise.
//
// AcquireMany is the same statement over unnest()ed request arrays with a
// LATERAL candidate subquery per request (LIMIT n), so a dispatcher takes
// slots for 64 tenants in one round trip. Requests for the same pair are
// merged first, so one statement never asks for one row twice. Driving the
// candidate query from the limits row (not from slots) lets the drain check
// (2) use the primary key with slot_no >= max_slots as an index condition;
// that cut the buffers a 64-slot acquisition touches from ~2,200 to ~1,200.
//
// # Fencing
//
// epoch grows by one on every acquisition of a slot and is the lease's
// fencing token. A lease id is "<tenant>/<dest>/<slot>/<token>" — unique
// forever because slot rows are never deleted (except with their tenant) —
// so Release and Extend are primary-key updates guarded by
// "epoch = token", with no index on a lease id and HOT updates (only
// unindexed columns change; the table has fillfactor 50). A late finisher
// whose slot was taken over sees ErrStaleLease and changes nothing; a
// second Release by the same lease is a no-op returning nil. Release does
// not require the lease to be unexpired: if nobody took the slot, its
// holder still owns it. Expired leases are reclaimed by the next acquirer;
// Sweep only tidies and wakes listeners.
//
// # Wake-ups and asynchronous release commits
//
// Release frees the row and calls pg_notify('fairway_released',
// "<tenant> <dest>") in the same statement; SetLimit, SetPaused(false) and
// Sweep notify too. Operators' changes notify in their transaction as
// well: a moved cursor ("<tenant> <dest> cursor"), a weight ("<tenant>
// <dest> weight") and, on 'fairway_partners', a partner (NotifyPartner).
// Listen holds a dedicated LISTEN connection, reconnects on loss and then
// sends Released{} meaning "rescan"; ListenPartners follows partner
// changes alone.
//
// # Grouped statements
//
// Release and DispatchMany group concurrent calls (group.go), as a
// database groups commits: calls made while a statement of their kind runs
// go out together in the next one (releases through ReleaseMany's
// statement, notifying once per pair with the number of slots freed:
// "<tenant> <dest> <n>"; dispatches of distinct pairs through
// dispatchGroupSQL); while calls come often from several callers, the
// next statement's caller lingers up to 2 ms for company first. Each call still gets its own outcome, as
// if alone. A statement's own cost is much of what a short one costs
// PostgreSQL (BenchmarkReleaseCPU, BenchmarkDispatchCPU).
//
// PostgreSQL serialises the commits of notifying transactions under one
// lock held through the WAL flush, so with synchronous commit concurrent
// releasing callers queue behind each other's flushes. Release,
// ReleaseMany and Sweep therefore commit with
// synchronous_commit = off (SET LOCAL via set_config in the statement). It
// is safe: a release lost in a database crash leaves a lease that expires
// and is reclaimed — the No-leak path — and any later synchronous commit
// (an acquisition) flushes the WAL that precedes it. Acquire, Extend and
// Dispatch stay synchronous: losing one could hand a token out twice.
//
// # Cursors and Dispatch
//
// Dispatch and DispatchMany are one statement (shared with other pairs'
// calls made at the same time), so one transaction and one round trip: lock up to one free slot per range (FOR UPDATE SKIP LOCKED),
// move the cursor past the last range that got a slot only if a slot was
// locked and the cursor still equals the first range's start (the cursor
// row lock serialises dispatchers of one pair; a loser re-reads the moved
// row and matches nothing), take the locked slots only if the cursor moved,
// log the batches only for slots taken. Two dispatchers therefore never
// dispatch one range, one that finds no free slot changes nothing, and a
// crash at any point either keeps all of it or none of it.
//
// # How the tests check the Limit invariant
//
// The hammer (hammer_test.go) runs 3 processes × 32 goroutines and changes
// limits at random from one goroutine, bracketing each change with
// database-clock readings. An observer reads every live lease in one
// snapshot, back to back. For each pair with k live leases, the oldest
// acquired at a (the acquiring statement's now()), at sample time s:
//
//	k ≤ max{ limit of the latest change committed before a,
//	         limits of every later change that began before s }
//
// Each live lease was acquired by a statement whose snapshot lies in
// [a, s], so it saw one of those limits. When every live lease was
// acquired after the latest change committed, the bound is exactly that
// change's limit. Holders check what the observer cannot: a process never
// holds one slot under two leases, and releasing or extending a live lease
// never reports it stale (that would mean a live slot was handed to
// someone else). Deliberately breaking the statement — dropping (1), or
// dropping the free condition — makes the hammer fail within seconds.
package tenancy
