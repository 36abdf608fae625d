package tenancy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/jackc/pgx/v5/pgxpool"
)

// setup returns a Store on a fresh, migrated database.
func setup(t testing.TB, cfg *tenancy.Config) (*tenancy.Store, *pgxpool.Pool, string) {
	t.Helper()
	dsn := testenv.NewDatabase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	pool := newPool(t, dsn, 8)
	st, err := tenancy.New(pool, cfg)
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	return st, pool, dsn
}

func newPool(t testing.TB, dsn string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse dsn: %v", err)
	}
	pc.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func tenantName(i int) string { return fmt.Sprintf("t%04d", i) }
