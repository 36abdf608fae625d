package tenancy_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// TestReleaseGrouped holds the first release's statement on a row lock
// while 71 more calls queue behind it: the queued calls go out in two
// statements (64 + 7, releaseGroupMax), each call with its own outcome: a
// stale lease among them gets ErrStaleLease and its neighbours are
// released; a call whose context ends while it waits returns and releases
// nothing; a statement that frees several of one pair's slots notifies
// the pair once, with their number.
func TestReleaseGrouped(t *testing.T) {
	t.Parallel()
	st, pool, _ := setup(t, &tenancy.Config{DefaultMaxSlots: 16})
	ctx := testCtx(t)
	rel, err := st.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}

	first := must[tenancy.Lease](t)(st.Acquire(ctx, "blocker", "postgres", "h"))
	var live []tenancy.Lease
	for i := range 5 {
		for range 14 {
			live = append(live, must[tenancy.Lease](t)(st.Acquire(ctx, fmt.Sprintf("t%d", i), "postgres", "h")))
		}
	}
	// A stale lease: released, its slot taken again by a newer lease.
	stale := must[tenancy.Lease](t)(st.Acquire(ctx, "t9", "postgres", "h"))
	if err := st.Release(ctx, stale.ID, stale.Token); err != nil {
		t.Fatal(err)
	}
	newer := must[tenancy.Lease](t)(st.Acquire(ctx, "t9", "postgres", "h"))
	if newer.Slot != stale.Slot {
		t.Fatalf("re-acquired slot %d, want %d", newer.Slot, stale.Slot)
	}
	cancelled := must[tenancy.Lease](t)(st.Acquire(ctx, "t8", "postgres", "h"))
	drainNotifications(t, rel, "t9") // the stale lease's own release

	stmts0, calls0 := st.ReleaseStats()
	// Hold first's slot row so its release (the first statement) waits.
	lock := holdRows(t, ctx, pool, `SELECT 1 FROM fairway.slots WHERE tenant = 'blocker' FOR UPDATE`)
	var wg sync.WaitGroup
	errs := make(map[string]error)
	var mu sync.Mutex
	release := func(ctx context.Context, l tenancy.Lease) {
		wg.Go(func() {
			err := st.Release(ctx, l.ID, l.Token)
			mu.Lock()
			errs[l.ID] = err
			mu.Unlock()
		})
	}
	release(ctx, first)
	lock.waitBlocked("the first release")
	// Queued one by one, so the statements' split is known.
	queue := func(ctx context.Context, l tenancy.Lease) {
		n := st.QueuedReleases()
		release(ctx, l)
		testenv.Eventually(t, waitMax, "a release to queue", queueHolds(st.QueuedReleases, n+1))
	}
	cctx, cancel := context.WithCancel(ctx)
	queue(cctx, cancelled)
	for _, l := range live {
		queue(ctx, l)
	}
	queue(ctx, stale)
	cancel()
	testenv.Eventually(t, waitMax, "the cancelled release to leave the queue", queueHolds(st.QueuedReleases, 71))
	lock.unlock()
	wg.Wait()

	if stmts, calls := st.ReleaseStats(); stmts-stmts0 != 3 || calls-calls0 != 72 {
		t.Fatalf("%d calls in %d statements, want 72 in 3 (1 + 64 + 7)", calls-calls0, stmts-stmts0)
	}
	for _, l := range append([]tenancy.Lease{first}, live...) {
		if err := errs[l.ID]; err != nil {
			t.Errorf("release %s: %v", l.ID, err)
		}
	}
	if err := errs[stale.ID]; !errors.Is(err, tenancy.ErrStaleLease) {
		t.Errorf("stale release: %v, want ErrStaleLease", err)
	}
	if err := errs[cancelled.ID]; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled release: %v, want context.Canceled", err)
	}
	for tenant, want := range map[string]int{"blocker": 0, "t0": 0, "t4": 0, "t8": 1, "t9": 1} {
		if in := must[int](t)(st.InUse(ctx, tenant, "postgres")); in != want {
			t.Errorf("%s: %d slots in use, want %d", tenant, in, want)
		}
	}
	// One notification per pair and statement, counting its slots: t0..t3
	// were all in the second statement (64 = 4·14 + 8 of t4), t4's other 6
	// in the third, with the stale lease (that statement released them and
	// reported the stale one; the calls then went out one by one to learn
	// whose lease was stale, and found theirs released).
	got := map[string][]int{}
	for len(got["t0"])+len(got["t1"])+len(got["t2"])+len(got["t3"])+len(got["t4"]) < 6 {
		select {
		case r := <-rel:
			got[r.Tenant] = append(got[r.Tenant], r.Slots)
		case <-time.After(30 * time.Second):
			t.Fatalf("notifications so far %v", got)
		}
	}
	for i := range 4 {
		if s := got[fmt.Sprintf("t%d", i)]; len(s) != 1 || s[0] != 14 {
			t.Errorf("t%d notified %v, want [14]", i, s)
		}
	}
	if s := got["t4"]; len(s) != 2 || s[0] != 8 || s[1] != 6 {
		t.Errorf("t4 notified %v, want [8 6]", s)
	}
}

// TestReleaseGroupedRace releases from many goroutines at once, each
// lease exactly once, under -race: every slot ends free.
func TestReleaseGroupedRace(t *testing.T) {
	t.Parallel()
	st, _, _ := setup(t, &tenancy.Config{DefaultMaxSlots: 8})
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			tenant := fmt.Sprintf("r%02d", g%8)
			for range 20 {
				l, err := st.Acquire(ctx, tenant, "clickhouse", "h")
				if err != nil {
					t.Error(err)
					return
				}
				if err := st.Release(ctx, l.ID, l.Token); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for g := range 8 {
		if in := must[int](t)(st.InUse(ctx, fmt.Sprintf("r%02d", g), "clickhouse")); in != 0 {
			t.Errorf("r%02d: %d slots in use", g, in)
		}
	}
	stmts, calls := st.ReleaseStats()
	t.Logf("%d releases in %d statements", calls, stmts)
	if calls != 640 {
		t.Errorf("%d releases counted, want 640", calls)
	}
}

// rowLock is a transaction holding row locks, on a connection of its own.
type rowLock struct {
	t    *testing.T
	ctx  context.Context
	pool *pgxpool.Pool
	tx   pgx.Tx
	pid  int // its backend
}

// holdRows runs lock (a SELECT … FOR UPDATE) in a transaction kept open
// until unlock (or the test's end). The connection checks for deadlocks
// after 30 s (where the user may set it), so that a statement it blocks,
// which waits first, is the one that finds a deadlock the test makes.
func holdRows(t *testing.T, ctx context.Context, pool *pgxpool.Pool, lock string) *rowLock {
	t.Helper()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	_, _ = conn.Exec(ctx, `SET deadlock_timeout = '30s'`) // superuser only; fine without
	l := &rowLock{t: t, ctx: ctx, pool: pool}
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&l.pid); err != nil {
		t.Fatal(err)
	}
	if l.tx, err = conn.Begin(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.tx.Rollback(context.WithoutCancel(ctx)) })
	if _, err := l.tx.Exec(ctx, lock); err != nil {
		t.Fatal(err)
	}
	return l
}

// exec runs another statement in the transaction.
func (l *rowLock) exec(sql string) error {
	_, err := l.tx.Exec(l.ctx, sql)
	return err
}

func (l *rowLock) unlock() {
	l.t.Helper()
	if err := l.tx.Commit(l.ctx); err != nil {
		l.t.Fatal(err)
	}
}

// waitBlocked waits until another PostgreSQL backend waits on one of l's locks.
func (l *rowLock) waitBlocked(what string) {
	l.t.Helper()
	testenv.Eventually(l.t, waitMax, what+" to wait on the row lock", func() error {
		var blocked bool
		err := l.pool.QueryRow(l.ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND $1::int = ANY(pg_blocking_pids(pid)))`, l.pid).Scan(&blocked)
		if err == nil && !blocked {
			err = errors.New("no backend waits on it")
		}
		return err
	})
}

func drainNotifications(t *testing.T, ch <-chan tenancy.Released, tenant string) {
	t.Helper()
	for {
		select {
		case r := <-ch:
			if r.Tenant == tenant {
				return
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no notification for %s", tenant)
		}
	}
}

// waitMax bounds the waits of these tests for a state of PostgreSQL or of
// a Store's queues.
const waitMax = 30 * time.Second

// queueHolds is an Eventually condition: count() (a Store's queue of
// grouped calls) holds want calls.
func queueHolds(count func() int, want int) func() error {
	return func() error {
		if n := count(); n != want {
			return fmt.Errorf("%d queued, want %d", n, want)
		}
		return nil
	}
}
