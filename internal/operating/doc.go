// Package operating holds no code. Its tests run fairway the way
// docs/operating.md ("Operating it" in the README) tells an operator to:
// the real binaries as separate processes, the nats-server `make nats`
// installs (bin/nats-server) with deploy/nats/single.conf and its users,
// PostgreSQL and ClickHouse, started in any order. They also check that
// every binary refuses, within seconds and saying why, a NATS server that
// is too old or that refuses it; that the services recover from a NATS
// server replaced by an empty one as "Stream resets" says; and that
// `make nats` (scripts/nats.sh) and the build of `make demo`
// (scripts/build.sh) do what they say.
package operating
