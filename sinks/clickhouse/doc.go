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
// table. Any error from ClickHouse is a batch error; IsTransient classifies
// it.
//
// The SQL is kept to what ClickHouse 18.16 (Debian's package) and current
// releases both accept: no DateTime64 (DateTime plus a nanosecond Int64), no
// LowCardinality, and inserts through PrepareBatch with named columns (an
// INSERT through Exec with bound parameters hangs on 18.16).
package clickhouse
