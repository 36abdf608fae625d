package migrate_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
)

// migratedWith migrates a new database up to version, writes rows there
// (SQL statements, as that older schema held its data), then migrates it
// the rest of the way, and returns its pool.
func migratedWith(t *testing.T, version int64, rows string) *pgxpool.Pool {
	t.Helper()
	pool, dsn := testenv.NewPool(t)
	ctx := context.Background()
	if err := migrate.UpTo(ctx, dsn, version); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	return pool
}
