package tenancy_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

const recoverTTL = 200 * time.Millisecond

// waitExpired waits until the database clock has passed l's expiry.
func waitExpired(ctx context.Context, t *testing.T, pool *pgxpool.Pool, l tenancy.Lease) {
	t.Helper()
	testenv.Eventually(t, waitMax, "the lease to expire", func() error {
		if now := dbClock(ctx, t, pool); now.Before(l.ExpiresAt.Add(time.Millisecond)) {
			return fmt.Errorf("database clock %s, lease expires at %s", now.Format(time.StampMicro), l.ExpiresAt.Format(time.StampMicro))
		}
		return nil
	})
}

func orphansOf(ctx context.Context, t *testing.T, st *tenancy.Store) []tenancy.Orphan {
	t.Helper()
	os, err := st.Orphans(ctx, tenancy.DestPostgres, 100)
	if err != nil {
		t.Fatal(err)
	}
	return os
}

// Every way an expired batch lease can end records its batch as an orphan;
// a live release, or an extension back to life, does not.
func TestOrphanRecordedWhateverEndsTheLease(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	const pg = tenancy.DestPostgres
	st, pool, _ := setup(t, &tenancy.Config{LeaseTTL: recoverTTL})
	// The live leases below last a minute: a release 200 ms late on a
	// loaded machine would be an orphan (the same database, another TTL).
	long, err := tenancy.New(pool, &tenancy.Config{LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		end        func(st *tenancy.Store, l tenancy.Lease) error
		wantOrphan bool
	}{
		"sweep": {func(st *tenancy.Store, _ tenancy.Lease) error { _, err := st.Sweep(ctx); return err }, true},
		"dispatch reclaims": {func(st *tenancy.Store, l tenancy.Lease) error {
			_, err := st.Dispatch(ctx, l.Tenant, pg, "other", l.ToSeq+1, l.ToSeq+5)
			return err
		}, true},
		"acquire reclaims": {func(st *tenancy.Store, l tenancy.Lease) error {
			_, err := st.Acquire(ctx, l.Tenant, pg, "other")
			return err
		}, true},
		"late release": {func(st *tenancy.Store, l tenancy.Lease) error { return st.Release(ctx, l.ID, l.Token) }, true},
		"extend then release": {func(_ *tenancy.Store, l tenancy.Lease) error {
			// Extended by a minute (long), not recoverTTL: the release
			// must come in time however slow the machine is.
			if _, err := long.Extend(ctx, l); err != nil {
				return err
			}
			return long.Release(ctx, l.ID, l.Token)
		}, false},
	}
	i := 0
	for name, tc := range cases {
		i++
		tenant := tenantName(i)
		l, err := st.Dispatch(ctx, tenant, pg, "dead", 1, 10)
		if err != nil {
			t.Fatal(err)
		}
		waitExpired(ctx, t, pool, l)
		if err := tc.end(st, l); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got []tenancy.Orphan
		for _, o := range orphansOf(ctx, t, st) {
			if o.Tenant == tenant {
				got = append(got, o)
			}
		}
		switch {
		case tc.wantOrphan && (len(got) != 1 || got[0].FromSeq != 1 || got[0].ToSeq != 10 || got[0].Token != l.Token || got[0].Slot != l.Slot || got[0].Holder != "dead"):
			t.Errorf("%s: orphans %+v, want one for %d..%d token %d", name, got, 1, 10, l.Token)
		case !tc.wantOrphan && len(got) != 0:
			t.Errorf("%s: orphans %+v, want none", name, got)
		}
	}
	// A live lease released in time leaves no orphan.
	l, err := long.Dispatch(ctx, "live", pg, "h", 1, 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := long.Extend(ctx, l); err != nil {
		t.Fatal(err)
	}
	if err := long.Release(ctx, l.ID, l.Token); err != nil {
		t.Fatal(err)
	}
	for _, o := range orphansOf(ctx, t, st) {
		if o.Tenant == "live" {
			t.Fatalf("a lease released in time left an orphan: %+v", o)
		}
	}
}

// Redispatch re-leases an orphan's range under a new token, inside the
// slot limit, exactly once however many dispatchers race for it.
func TestRedispatch(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	const pg = tenancy.DestPostgres
	st, pool, _ := setup(t, &tenancy.Config{LeaseTTL: recoverTTL})
	dead, err := st.Dispatch(ctx, "acme", pg, "dead", 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	waitExpired(ctx, t, pool, dead)
	// The slot is taken by a new batch: the orphan must wait (limit 1).
	// Its lease lasts a minute, not recoverTTL: on a loaded machine the
	// sweep below may take longer than 200 ms, and a new lease that
	// expired too would leave the redispatch a free slot.
	long, err := tenancy.New(pool, &tenancy.Config{LeaseTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	live, err := long.Dispatch(ctx, "acme", pg, "alive", 11, 20)
	if err != nil {
		t.Fatal(err)
	}
	os := orphansOf(ctx, t, st)
	if len(os) != 1 {
		t.Fatalf("orphans %+v, want 1", os)
	}
	if _, err := st.Redispatch(ctx, os[0], "r"); !errors.Is(err, tenancy.ErrAtLimit) {
		t.Fatalf("redispatch at the limit: %v, want ErrAtLimit", err)
	}
	if got := orphansOf(ctx, t, st); len(got) != 1 {
		t.Fatalf("a refused redispatch lost the orphan: %+v", got)
	}
	if err := st.Release(ctx, live.ID, live.Token); err != nil {
		t.Fatal(err)
	}

	const racers = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		won     []tenancy.Lease
		stale   int
		atLimit int
	)
	for range racers {
		wg.Go(func() {
			l, err := st.Redispatch(ctx, os[0], "r")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won = append(won, l)
			case errors.Is(err, tenancy.ErrStaleLease):
				stale++
			case errors.Is(err, tenancy.ErrAtLimit):
				// It deleted the orphan first but another racer held the
				// only free slot's row lock (SKIP LOCKED): it rolls back,
				// the orphan stays for the winner. Benign, and the
				// dispatcher retries later.
				atLimit++
			default:
				t.Errorf("redispatch: %v", err)
			}
		})
	}
	wg.Wait()
	if len(won) > 1 || len(won)+stale+atLimit != racers {
		t.Fatalf("%d redispatches won, %d stale, %d at limit; want at most 1 winner", len(won), stale, atLimit)
	}
	if len(won) == 0 {
		// Every orphan holder found the slot row locked by a racer that
		// had lost the orphan: the orphan is still there for the next try.
		l, err := st.Redispatch(ctx, os[0], "r")
		if err != nil {
			t.Fatalf("redispatch after a race without a winner: %v", err)
		}
		won = append(won, l)
	}
	l := won[0]
	if l.FromSeq != 1 || l.ToSeq != 10 || l.Token <= dead.Token || l.ExpiresAt.IsZero() {
		t.Fatalf("redispatched lease %+v, want range 1..10 with a newer token than %d", l, dead.Token)
	}
	// The slot row holds the winner's lease (not InUse: the 200 ms lease
	// may already have expired on a slow machine).
	var held int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM fairway.slots WHERE tenant = 'acme' AND dest = $1 AND holder = 'r' AND epoch = $2 AND from_seq = 1 AND to_seq = 10`,
		pg, l.Token).Scan(&held); err != nil || held != 1 {
		t.Fatalf("slot rows holding the redispatched lease: %d (%v), want 1", held, err)
	}
	if got := orphansOf(ctx, t, st); len(got) != 0 {
		t.Fatalf("orphans left: %+v", got)
	}
	var logged int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM fairway.batches WHERE tenant = 'acme' AND from_seq = 1 AND to_seq = 10`).Scan(&logged); err != nil {
		t.Fatal(err)
	}
	if logged != 2 {
		t.Fatalf("batch log holds range 1..10 %d times, want 2 (dispatch + redispatch)", logged)
	}
	// The old token is fenced out of the re-leased slot.
	if err := st.Release(ctx, dead.ID, dead.Token); !errors.Is(err, tenancy.ErrStaleLease) && l.Slot == dead.Slot {
		t.Fatalf("dead lease released the redispatched slot: %v", err)
	}
}

// ReturnBatches frees unpublished batches' slots and records them as
// orphans at once; stale or batch-less leases are skipped.
func TestReturnBatches(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	const pg = tenancy.DestPostgres
	st, _, _ := setup(t, nil)
	if _, err := st.EnsureTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := st.SetLimit(ctx, "acme", pg, 3); err != nil {
		t.Fatal(err)
	}
	a, err := st.Dispatch(ctx, "acme", pg, "h", 1, 5)
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.Dispatch(ctx, "acme", pg, "h", 6, 9)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := st.Acquire(ctx, "acme", pg, "h")
	if err != nil {
		t.Fatal(err)
	}
	staleB := b
	staleB.Token++
	n, err := st.ReturnBatches(ctx, []tenancy.Lease{a, staleB, plain})
	if err != nil || n != 1 {
		t.Fatalf("returned %d, %v; want 1 (a only)", n, err)
	}
	os := orphansOf(ctx, t, st)
	if len(os) != 1 || os[0].FromSeq != 1 || os[0].ToSeq != 5 || os[0].Holder != "h" {
		t.Fatalf("orphans %+v, want 1..5", os)
	}
	if n, _ := st.InUse(ctx, "acme", pg); n != 2 {
		t.Fatalf("in use %d, want 2 (b and plain)", n)
	}
	// Returning twice changes nothing.
	if n, err := st.ReturnBatches(ctx, []tenancy.Lease{a}); err != nil || n != 0 {
		t.Fatalf("second return: %d, %v", n, err)
	}
	ps, err := st.PairStates(ctx, pg)
	if err != nil || len(ps) != 1 || ps[0].Tenant != "acme" || ps[0].NextSeq != 10 || ps[0].Weight != 1 {
		t.Fatalf("pair states %+v %v", ps, err)
	}
}

// A lease taken with AcquireBatch (a dead letter sent back) records its
// range without moving the cursor; expired unreleased, it leaves an orphan
// as a dispatched batch does, and a plain Acquire's lease leaves none.
func TestAcquireBatchLeavesAnOrphanWhenItExpires(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	st, pool, _ := setup(t, &tenancy.Config{LeaseTTL: recoverTTL})
	if _, err := st.EnsureTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := st.SetLimit(ctx, "acme", tenancy.DestPostgres, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AcquireBatch(ctx, "acme", tenancy.DestPostgres, "r", tenancy.Range{From: 9, To: 3}); !errors.Is(err, tenancy.ErrInvalidArgument) {
		t.Fatalf("a reversed range: %v, want ErrInvalidArgument", err)
	}
	batch := must[tenancy.Lease](t)(st.AcquireBatch(ctx, "acme", tenancy.DestPostgres, "redrive", tenancy.Range{From: 40, To: 42}))
	plain := must[tenancy.Lease](t)(st.Acquire(ctx, "acme", tenancy.DestPostgres, "other"))
	if batch.FromSeq != 40 || batch.ToSeq != 42 {
		t.Fatalf("lease %+v does not name its range", batch)
	}
	if c := must[uint64](t)(st.Cursor(ctx, "acme", tenancy.DestPostgres)); c != 1 {
		t.Fatalf("cursor moved to %d", c)
	}
	waitExpired(ctx, t, pool, batch)
	waitExpired(ctx, t, pool, plain)
	if _, err := st.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	os := orphansOf(ctx, t, st)
	if len(os) != 1 || os[0].FromSeq != 40 || os[0].ToSeq != 42 || os[0].Holder != "redrive" {
		t.Fatalf("orphans %+v, want the batch lease's range alone", os)
	}
}

// PairStatesOf reads the pairs of the tenants asked for, in one call: one
// with its own cursor and rate, one whose tenant exists without the pair
// (created with the defaults, the tenant's weight), one never seen
// (created with the tenant), asked for twice; others' pairs are left
// out, none asked for gives none, and an invalid tenant is an error.
func TestPairStatesOf(t *testing.T) {
	t.Parallel()
	st, _, _ := setup(t, nil)
	ctx := testCtx(t)
	const d = tenancy.DestPostgres
	for _, id := range []string{"known", "other"} {
		if _, err := st.EnsureTenant(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := st.SetDestRate(ctx, id, d, 50); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetCursor(ctx, "known", d, 42); err != nil {
		t.Fatal(err)
	}
	if _, err := st.EnsureTenant(ctx, "weighted"); err != nil {
		t.Fatal(err)
	}
	if err := st.SetWeight(ctx, "weighted", 3); err != nil {
		t.Fatal(err)
	}
	ps := must[[]tenancy.PairState](t)(st.PairStatesOf(ctx, d, []string{"known", "weighted", "new", "new"}))
	got := map[string]tenancy.PairState{}
	for _, p := range ps {
		got[p.Tenant] = p
	}
	if len(ps) != 3 || len(got) != 3 {
		t.Fatalf("PairStatesOf = %+v, want known, weighted and new once each", ps)
	}
	if p := got["known"]; p.NextSeq != 42 || p.Rate != 50 || p.Weight != 1 {
		t.Errorf("known: %+v, want cursor 42, rate 50, weight 1", p)
	}
	if p := got["weighted"]; p.NextSeq != 1 || p.Weight != 3 || p.Rate != 0 {
		t.Errorf("weighted: %+v, want cursor 1, weight 3, no rate", p)
	}
	if p := got["new"]; p.NextSeq != 1 || p.Weight != 1 {
		t.Errorf("new: %+v, want cursor 1, weight 1", p)
	}
	if _, err := st.Tenant(ctx, "new"); err != nil {
		t.Errorf("the new tenant: %v", err)
	}
	if ps, err := st.PairStatesOf(ctx, d, nil); err != nil || len(ps) != 0 {
		t.Errorf("no tenants: %+v, %v; want none", ps, err)
	}
	if _, err := st.PairStatesOf(ctx, d, []string{"known", "bad tenant"}); !errors.Is(err, events.ErrInvalidTenant) {
		t.Errorf("an invalid tenant: %v, want ErrInvalidTenant", err)
	}
}
