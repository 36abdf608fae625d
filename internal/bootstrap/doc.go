// Package bootstrap holds the start-up pieces every fairway service shares:
// the logger, the NATS connection, the PostgreSQL pool (migrated), the
// Prometheus registry and an HTTP server with timeouts and two-phase
// shutdown. main packages call it; nothing else does.
package bootstrap
