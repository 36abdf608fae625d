package migrate_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
)

// Services run Up at start, several at once: exactly one applies each
// migration, the others see an up-to-date schema, and a second Up applies
// nothing.
func TestConcurrentUpAppliesEachMigrationOnce(t *testing.T) {
	t.Parallel()
	dsn := testenv.NewDatabase(t)
	ctx := context.Background()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		applied = map[int64]int{}
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := migrate.Up(ctx, dsn)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, r := range res {
				applied[r.Version]++
			}
		}()
	}
	wg.Wait()
	if len(applied) == 0 {
		t.Fatal("no migration applied")
	}
	for v, n := range applied {
		if n != 1 {
			t.Errorf("migration %d applied %d times", v, n)
		}
	}
	if res, err := migrate.Up(ctx, dsn); err != nil || len(res) != 0 {
		t.Fatalf("second Up: %v %v", res, err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = 'fairway'`).Scan(&n); err != nil || n < 5 {
		t.Fatalf("fairway schema has %d tables (%v)", n, err)
	}
}
