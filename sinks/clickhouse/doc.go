// Package clickhouse is the ClickHouse sink: it appends every applied event to
// product_events (the analytics log) and the newest state of each product to
// products_latest, both created at start when missing.
//
// Both tables are ReplacingMergeTree, so redelivery is idempotent after
// deduplication (query with FINAL, or wait for merges):
//
//   - product_events is ORDER BY (tenant_id, product_id, version): an event
//     delivered twice counts once;
//   - products_latest is ReplacingMergeTree(version) ORDER BY (tenant_id,
//     product_id): the highest version wins whatever the arrival order, and a
//     delete is a row with deleted = 1 and an empty payload, so a tombstone
//     keeps winning over older upserts.
//
// ClickHouse stores whatever bytes it is given and silently wraps DateTime
// values outside 1970…2106, so the sink validates each record itself (a
// payload must be a JSON object within Config.MaxPayloadBytes; occurred_at
// must fit DateTime) and reports the records it refuses as
// *sink.PermanentError; the rest of the batch is inserted, one INSERT per
// table. Any error from ClickHouse is a batch error; the sink's rows of the
// classification (ClassifyRules: the server exceptions worth retrying) and
// the generic ones (sink.Classify) judge it.
//
// # Group commit
//
// Every INSERT makes a part that ClickHouse must merge, and many tiny ones
// (one-event work items from small tenants, several applied at once) slow
// it down. So concurrent Apply calls share their INSERTs: one goroutine
// inserts for the sink, in rounds. While a round runs, arriving Apply calls
// (validated first, each on its own) queue their rows; the next round takes
// the queued calls, oldest first, as many as fit in Config.GroupRows rows (a
// call that does not fit is first in the next round; one bigger than
// GroupRows goes alone), inserts them with one PrepareBatch per table and
// wakes every caller with the result. After a round of n calls, the next
// waits up to Config.Linger for n calls to be queued, so that the callers
// just woken can come back and join; otherwise a call that finds no round
// running starts one at once. So a lone caller, or one after a pause longer
// than the linger, never waits.
//
// Rounds of caught-up tenants wait to fill: while every queued call comes
// from a work item whose tenant had nothing more waiting (sink.CaughtUp),
// the next round waits until Config.FillRows rows are queued or its
// oldest call has waited Config.FillWait. Any other call ends the wait: holding it would keep its
// tenant's slot and slow the tenant down. ClickHouse merges every insert's
// part again and again, so fewer, bigger inserts save it most of its CPU.
//
// A failed round is not blindly everyone's failure. A transient error
// (sink.Classify: network, too many parts, …) or a round of one is returned
// as it is, and the runtime retries with backoff. Otherwise each member
// inserts its own rows alone once more and returns that result, so rows
// ClickHouse rejects fail only their own work item.
//
// Context: a call whose ctx ends while it is queued leaves the queue and
// returns ctx.Err(); its rows are never inserted. A call whose rows are
// already in a running round waits for that round's result (it cannot take
// its rows back out of an INSERT in flight); the round is cancelled only
// when the ctx of every one of its members has ended, or on Close.
// Config.GroupRows < 0 turns group commit off: every Apply inserts its own
// rows at once, concurrently with the others.
//
// The SQL is kept to what ClickHouse 18.16 (Debian's package) and current
// releases both accept: no DateTime64 (DateTime plus a nanosecond Int64), no
// LowCardinality, and inserts through PrepareBatch with named columns (an
// INSERT through Exec with bound parameters hangs on 18.16).
package clickhouse
