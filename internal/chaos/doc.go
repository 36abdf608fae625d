// Package chaos holds fault-injection tests that run fairway's real
// binaries (cmd/ingest, cmd/dispatcher, cmd/sinks) as separate OS
// processes against one embedded JetStream server, PostgreSQL and
// ClickHouse, kill them with SIGKILL while tenants post events, and then
// account for every event ingest acknowledged. The package has no code
// outside its tests; docs/reliability.md describes what runs and what is
// checked.
package chaos
