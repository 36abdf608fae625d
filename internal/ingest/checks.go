package ingest

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultChecks are the /readyz checks: the stream answers its info
// request, and PostgreSQL answers a ping.
func DefaultChecks(js jetstream.JetStream, pool *pgxpool.Pool, stream string) map[string]Check {
	return map[string]Check{
		"jetstream": func(ctx context.Context) error {
			if _, err := js.Stream(ctx, stream); err != nil {
				return fmt.Errorf("stream %s: %w", stream, err)
			}
			return nil
		},
		"postgres": func(ctx context.Context) error { return pool.Ping(ctx) },
	}
}
