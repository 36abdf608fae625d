// Package sink defines what a destination (PostgreSQL, ClickHouse, B2B
// webhooks) offers the sink runtime: one idempotent Apply of a batch of
// records, with permanent per-record problems reported one by one and
// everything else returned as a batch error for the runtime to classify.
//
// It also holds the pieces every implementation shares: PermanentError, the
// in-batch collapse to the newest version per key (Latest), the bisection
// that isolates the records a destination rejects (Isolate), and the one
// classification of failures (Classify: generic rows, plus the rows a sink
// adds through Classifier).
//
// The conformance suite every implementation runs is in sinktest; the
// registry of sink kinds is in kind. docs/sinks.md, "Writing a sink", puts
// them together.
package sink
