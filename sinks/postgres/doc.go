// Package postgres is the PostgreSQL sink: it applies product events to the
// operational catalog table <schema>.products (one row per tenant and
// product) idempotently.
//
// An upsert lands only when its version is newer than the stored one; a
// delete is a versioned tombstone (deleted = true, payload NULL) so that an
// older upsert delivered late cannot resurrect the product. A batch is
// collapsed in Go to the newest version per key, sorted by key (so that
// concurrent writers lock rows in one order), and written in one statement:
// either unnest() over array parameters or COPY into a temporary table and
// one merge (Config.Method).
//
// When PostgreSQL rejects a batch because of its data (SQLSTATE class 22 or
// 23: a payload jsonb refuses, a NUL byte in a product id), the sink bisects
// the batch inside one transaction with savepoints, reports the offending
// records as *sink.PermanentError and applies the rest. Every other failure
// is returned as the batch error, wrapped so that *pgconn.PgError stays
// reachable with errors.As.
package postgres
