package migrate_test

import (
	"context"
	"testing"

	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Migration 00022 starts the cursors of high and bulk events where the
// pair's cursor is: no event had a priority before, so none is skipped and
// none is read again from the stream's start.
func TestPriorityCursorsStartAtThePairs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := migratedWith(t, 21, `INSERT INTO fairway.tenants (id) VALUES ('acme');
		INSERT INTO fairway.limits (tenant, dest, max_slots) VALUES ('acme', 'postgres', 1);
		INSERT INTO fairway.cursors (tenant, dest, next_seq) VALUES ('acme', 'postgres', 500)`)
	st, err := tenancy.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.PairState(ctx, "acme", "postgres")
	if err != nil || p.NextSeq != 500 || p.HighNext != 500 || p.BulkNext != 500 {
		t.Fatalf("after migrating: %+v %v, want every cursor at 500", p, err)
	}
}
