package tenancy_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// positions returns a read func for CheckStream that answers ps in turn,
// then the last one again.
func positions(ps ...tenancy.StreamPosition) func(context.Context) (tenancy.StreamPosition, error) {
	i := 0
	return func(context.Context) (tenancy.StreamPosition, error) {
		p := ps[min(i, len(ps)-1)]
		i++
		return p, nil
	}
}

func pairStatus(t *testing.T, st *tenancy.Store, tenant, dest string) tenancy.PairStatus {
	t.Helper()
	ps, err := st.PairStatuses(testCtx(t), tenant)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.Dest == dest {
			return p
		}
	}
	t.Fatalf("no status for %s/%s", tenant, dest)
	return tenancy.PairStatus{}
}

// A cursor past the stream's end is held: no slot of it is handed out
// (ErrStreamReset, which dispatchers take for a limit), status says why,
// and ResetCursors moves it (to the first event or past the last) and
// releases it, telling dispatchers. Cursors inside the stream are left
// alone by both.
func TestCursorAheadOfStreamIsHeldUntilReset(t *testing.T) {
	t.Parallel()
	st, _, _ := setup(t, nil)
	ctx := testCtx(t)
	ch, err := st.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for tenant, next := range map[string]uint64{"acme": 5001, "globex": 3, "initech": 1} {
		if err := st.SetCursor(ctx, tenant, "postgres", next); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetCursor(ctx, "acme", "clickhouse", 4000); err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 3, 1, 10, 0, 0, 123456789, time.UTC)
	pos := tenancy.StreamPosition{Name: "PRODUCTS", Created: created, FirstSeq: 1, LastSeq: 10}

	check, err := st.CheckStream(ctx, positions(pos))
	if err != nil {
		t.Fatal(err)
	}
	if check.Recreated || len(check.Held) != 2 {
		t.Fatalf("check: %+v, want acme's two pairs held and no recreation", check)
	}
	for _, h := range check.Held {
		if h.Tenant != "acme" || !strings.Contains(h.Detail, "past the end of stream PRODUCTS (last sequence 10)") || h.Since.IsZero() {
			t.Fatalf("held %+v", h)
		}
	}
	if _, err := st.Acquire(ctx, "acme", "postgres", "d1"); !errors.Is(err, tenancy.ErrStreamReset) || !errors.Is(err, tenancy.ErrAtLimit) {
		t.Fatalf("acquire of a held pair: %v, want ErrStreamReset (an ErrAtLimit)", err)
	}
	if _, err := st.DispatchMany(ctx, "acme", "postgres", "d1", 5001, []tenancy.Range{{From: 5001, To: 5001}}); !errors.Is(err, tenancy.ErrStreamReset) {
		t.Fatalf("dispatch of a held pair: %v, want ErrStreamReset", err)
	}
	l := must[tenancy.Lease](t)(st.Acquire(ctx, "globex", "postgres", "d1"))
	if err := st.Release(ctx, l.ID, l.Token); err != nil {
		t.Fatal(err)
	}
	if p := pairStatus(t, st, "acme", "postgres"); !strings.Contains(p.StreamReset, "cursor 5001") || p.StreamResetSince.IsZero() {
		t.Fatalf("status of a held pair: %+v", p)
	}
	if p := pairStatus(t, st, "globex", "postgres"); p.StreamReset != "" {
		t.Fatalf("status of a pair inside the stream: %+v", p)
	}
	if again, err := st.CheckStream(ctx, positions(pos)); err != nil || len(again.Held) != 0 {
		t.Fatalf("second check: %+v %v, want nothing newly held", again, err)
	}

	// Reset acme's postgres cursor to the stream's first event.
	pos.FirstSeq, pos.LastSeq = 4, 12
	_, moves, err := st.ResetCursors(ctx, positions(pos), "acme", "postgres", tenancy.ResetToFirst)
	if err != nil {
		t.Fatal(err)
	}
	if len(moves) != 1 || moves[0] != (tenancy.CursorMove{Tenant: "acme", Dest: "postgres", From: 5001, To: 4}) {
		t.Fatalf("moves %+v", moves)
	}
	// The cursor, then a release; globex's release came before.
	want := []tenancy.Released{{Tenant: "acme", Dest: "postgres", Cursor: true}, {Tenant: "acme", Dest: "postgres", Slots: 1}}
	for len(want) > 0 {
		select {
		case r := <-ch:
			if r.Tenant == "acme" {
				if r != want[0] {
					t.Fatalf("reset notified %+v, want %+v", r, want[0])
				}
				want = want[1:]
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("reset did not notify %+v", want)
		}
	}
	if p := pairStatus(t, st, "acme", "postgres"); p.StreamReset != "" || p.NextSeq != 4 {
		t.Fatalf("after reset to first: %+v", p)
	}
	l = must[tenancy.Lease](t)(st.Acquire(ctx, "acme", "postgres", "d1"))
	if err := st.Release(ctx, l.ID, l.Token); err != nil {
		t.Fatal(err)
	}
	if p := pairStatus(t, st, "acme", "clickhouse"); p.StreamReset == "" || p.NextSeq != 4000 {
		t.Fatalf("a reset of postgres touched clickhouse: %+v", p)
	}

	// The rest, past the stream's end; pairs that are not held stay.
	_, moves, err = st.ResetCursors(ctx, positions(pos), "", "", tenancy.ResetToLast)
	if err != nil {
		t.Fatal(err)
	}
	if len(moves) != 1 || moves[0] != (tenancy.CursorMove{Tenant: "acme", Dest: "clickhouse", From: 4000, To: 13}) {
		t.Fatalf("moves %+v", moves)
	}
	if p := pairStatus(t, st, "globex", "postgres"); p.NextSeq != 3 {
		t.Fatalf("a pair that was not held moved: %+v", p)
	}
	if rs, err := st.StreamResets(ctx); err != nil || len(rs) != 0 {
		t.Fatalf("held after resetting all: %+v %v", rs, err)
	}
}

// A cursor that moves past the stream's end as first read, because events
// stored after that read were dispatched, is not a reset: CheckStream reads
// the stream again after the cursors before it holds anything.
func TestCheckStreamRereadsTheStreamBeforeHolding(t *testing.T) {
	t.Parallel()
	st, _, _ := setup(t, nil)
	ctx := testCtx(t)
	if err := st.SetCursor(ctx, "acme", "postgres", 50); err != nil {
		t.Fatal(err)
	}
	created := time.Now()
	check, err := st.CheckStream(ctx, positions(
		tenancy.StreamPosition{Name: "PRODUCTS", Created: created, FirstSeq: 1, LastSeq: 10},
		tenancy.StreamPosition{Name: "PRODUCTS", Created: created, FirstSeq: 1, LastSeq: 60}))
	if err != nil {
		t.Fatal(err)
	}
	if len(check.Held) != 0 {
		t.Fatalf("held %+v: a cursor within the stream as read after it", check.Held)
	}
	if _, err := st.Acquire(ctx, "acme", "postgres", "d1"); err != nil {
		t.Fatal(err)
	}
}

// A stream created anew (its creation time changed) holds every cursor past
// 1, even those inside the new stream's sequences, exactly once.
func TestRecreatedStreamHoldsEveryMovedCursor(t *testing.T) {
	t.Parallel()
	st, _, _ := setup(t, nil)
	ctx := testCtx(t)
	for tenant, next := range map[string]uint64{"acme": 40, "globex": 3, "initech": 1} {
		if err := st.SetCursor(ctx, tenant, "postgres", next); err != nil {
			t.Fatal(err)
		}
	}
	old := tenancy.StreamPosition{Name: "PRODUCTS", Created: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC), FirstSeq: 1, LastSeq: 100}
	if c, err := st.CheckStream(ctx, positions(old)); err != nil || c.Recreated || len(c.Held) != 0 {
		t.Fatalf("first sight: %+v %v", c, err)
	}
	fresh := tenancy.StreamPosition{Name: "PRODUCTS", Created: old.Created.Add(time.Hour), FirstSeq: 1, LastSeq: 500}
	c, err := st.CheckStream(ctx, positions(fresh))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Recreated || len(c.Held) != 2 {
		t.Fatalf("recreated: %+v, want acme and globex held", c)
	}
	for _, h := range c.Held {
		if h.Tenant == "initech" || !strings.Contains(h.Detail, "stream PRODUCTS was recreated") {
			t.Fatalf("held %+v", h)
		}
	}
	if c, err := st.CheckStream(ctx, positions(fresh)); err != nil || c.Recreated || len(c.Held) != 0 {
		t.Fatalf("the same stream again: %+v %v", c, err)
	}
	if _, err := st.Acquire(ctx, "initech", "postgres", "d1"); err != nil {
		t.Fatalf("a cursor at 1 is right for any stream: %v", err)
	}
}
