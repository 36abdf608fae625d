package tenancy_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// TestPruneBatches: rows older than the retention go, in chunks of at most
// max from the oldest, and recent ones stay; bad arguments are refused.
func TestPruneBatches(t *testing.T) {
	t.Parallel()
	st, pool, _ := setup(t, &tenancy.Config{DefaultMaxSlots: 4})
	ctx := testCtx(t)
	for i := range uint64(10) {
		ls := must[[]tenancy.Lease](t)(st.DispatchMany(ctx, "acme", tenancy.DestPostgres, "h", 1+i*10, []tenancy.Range{{From: 1 + i*10, To: 10 + i*10}}))
		if err := st.Release(ctx, ls[0].ID, ls[0].Token); err != nil {
			t.Fatal(err)
		}
	}
	// Age the first 7 rows by two days.
	if _, err := pool.Exec(ctx, `UPDATE fairway.batches SET created_at = created_at - interval '2 days'
		WHERE id IN (SELECT id FROM fairway.batches ORDER BY id LIMIT 7)`); err != nil {
		t.Fatal(err)
	}
	left := func() (n int) {
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM fairway.batches`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, step := range []struct{ max, deleted, left int }{{4, 4, 6}, {4, 3, 3}, {4, 0, 3}} {
		n, err := st.PruneBatches(ctx, 24*time.Hour, step.max)
		if err != nil || n != step.deleted || left() != step.left {
			t.Fatalf("prune (max %d): deleted %d, %v, %d left; want %d deleted, %d left", step.max, n, err, left(), step.deleted, step.left)
		}
	}
	var oldest uint64
	if err := pool.QueryRow(ctx, `SELECT min(from_seq) FROM fairway.batches`).Scan(&oldest); err != nil {
		t.Fatal(err)
	}
	if oldest != 71 {
		t.Fatalf("oldest batch left starts at %d, want 71", oldest)
	}
	for _, bad := range []struct {
		older time.Duration
		max   int
	}{{0, 10}, {time.Hour, 0}, {time.Hour, tenancy.PruneBatchesMax + 1}} {
		if _, err := st.PruneBatches(ctx, bad.older, bad.max); !errors.Is(err, tenancy.ErrInvalidArgument) {
			t.Errorf("prune %v/%d: %v, want ErrInvalidArgument", bad.older, bad.max, err)
		}
	}
}
