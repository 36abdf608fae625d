// Package outage holds the dependency-outage and poison-event tests of the
// whole pipeline. Each test runs the real parts in one process — embedded
// JetStream, the dispatcher, one sink runner per destination on real
// PostgreSQL, ClickHouse and in-process partner receivers — publishes
// traffic for several tenants, breaks one dependency
// and then accounts for every published event in every destination and in
// the dead-letter stream. There is no code here besides the tests; see
// docs/reliability.md for what each one proves and how to run them.
package outage
