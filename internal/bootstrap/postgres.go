package bootstrap

import (
	"context"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairwayhq/fairway/internal/migrate"
)

// OpenPostgres opens a pool on dsn, checks it answers and applies pending
// migrations. Errors never contain the DSN's password.
func OpenPostgres(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL is not a valid PostgreSQL URL (%s)", RedactURL(dsn))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open PostgreSQL at %s: %w", RedactURL(dsn), err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("PostgreSQL at %s does not answer: %w", RedactURL(dsn), err)
	}
	if _, err := migrate.Up(ctx, dsn); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// RedactURL hides the password of a URL-shaped DSN or server URL, for
// errors and logs.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "<dsn>"
	}
	return u.Redacted()
}
