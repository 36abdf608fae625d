// Package testenv gives integration tests the real servers they need:
// PostgreSQL (a fresh database per caller), ClickHouse (a fresh database per
// caller) and an embedded JetStream server on a free port with its store in
// t.TempDir().
//
// Servers are found through DATABASE_URL and CLICKHOUSE_ADDR, which
// `make test` sets from scripts/dev-services.sh. When a server does not
// answer, the test fails with a message saying how to start it; it never
// skips.
//
// Eventually is the tests' one way to wait for a state of those servers;
// pipelinetest is their one way to run the whole pipeline on them.
package testenv
