package migrate_test

import (
	"context"
	"testing"

	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Migration 00022 starts the cursors of high and bulk events where the
// pair's cursor is: no event had a priority before, so none is skipped and
// none is read again from the stream's start.
func TestPriorityCursorsStartAtThePairs(t *testing.T) {
	t.Parallel()
	pool, dsn := testenv.NewPool(t)
	ctx := context.Background()
	if err := migrate.UpTo(ctx, dsn, 21); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO fairway.tenants (id) VALUES ('acme');
		INSERT INTO fairway.limits (tenant, dest, max_slots) VALUES ('acme', 'postgres', 1);
		INSERT INTO fairway.cursors (tenant, dest, next_seq) VALUES ('acme', 'postgres', 500)`); err != nil {
		t.Fatal(err)
	}
	if _, err := migrate.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	st, err := tenancy.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.PairState(ctx, "acme", "postgres")
	if err != nil || p.NextSeq != 500 || p.HighNext != 500 || p.BulkNext != 500 {
		t.Fatalf("after migrating: %+v %v, want every cursor at 500", p, err)
	}
}
