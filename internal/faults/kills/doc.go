// Package kills holds the process-kill fault test: it runs fairway's real
// binaries (cmd/ingest, cmd/dispatcher, cmd/sinks) as separate OS processes
// against one embedded JetStream server, PostgreSQL and ClickHouse, kills
// them with SIGKILL while tenants post events, and then accounts for every
// event ingest acknowledged. `make chaos` runs it with 100 kills. The
// package has no code outside its tests; docs/reliability.md describes
// what runs and what is checked.
package kills
