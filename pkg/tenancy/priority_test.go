package tenancy_test

import (
	"errors"
	"testing"

	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Each priority of a tenant's events has its own cursor, its batches share
// the pair's slots, and a lease records its priority so that an orphan of
// it is re-dispatched for that priority alone.
func TestPrioritiesHaveTheirOwnCursors(t *testing.T) {
	t.Parallel()
	st, ctx, live := livePair(t) // normal 1..100 dispatched, the one slot held
	const tn, d = "acme", tenancy.DestPostgres
	if err := st.SetLimit(ctx, tn, d, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DispatchPriority(ctx, tn, d, events.PriorityHigh, "d1", 1, []tenancy.Range{{150, 150}}); err != nil {
		t.Fatal(err)
	}
	p := must[tenancy.PairState](t)(st.PairState(ctx, tn, d))
	if p.NextSeq != 101 || p.HighNext != 151 || p.BulkNext != 1 || p.NextFor(events.PriorityHigh) != 151 {
		t.Fatalf("cursors %+v, want normal 101, high 151, bulk 1", p)
	}
	if c := must[uint64](t)(st.CursorFor(ctx, tn, d, events.PriorityHigh)); c != 151 {
		t.Fatalf("CursorFor(high) = %d, want 151", c)
	}
	// Both slots are held now, whatever the priority.
	if _, err := st.DispatchPriority(ctx, tn, d, events.PriorityBulk, "d1", 1, []tenancy.Range{{1, 50}}); !errors.Is(err, tenancy.ErrAtLimit) {
		t.Fatalf("bulk with both slots held: %v, want ErrAtLimit", err)
	}
	if err := st.Release(ctx, live.ID, live.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DispatchPriority(ctx, tn, d, events.PriorityHigh, "d1", 1, []tenancy.Range{{160, 160}}); !errors.Is(err, tenancy.ErrCursorMoved) {
		t.Fatalf("high from a stale cursor: %v, want ErrCursorMoved", err)
	}
	bulk := must[[]tenancy.Lease](t)(st.DispatchPriority(ctx, tn, d, events.PriorityBulk, "d1", 1, []tenancy.Range{{1, 50}}))
	if n := must[int](t)(st.ReturnBatches(ctx, bulk)); n != 1 {
		t.Fatalf("handed back %d, want 1", n)
	}
	os := must[[]tenancy.Orphan](t)(st.Orphans(ctx, d, 10))
	if len(os) != 1 || os[0].Priority != events.PriorityBulk {
		t.Fatalf("orphans %+v, want the bulk batch", os)
	}
	re := must[tenancy.Lease](t)(st.Redispatch(ctx, os[0], "d2"))
	if err := st.Release(ctx, re.ID, re.Token); err != nil {
		t.Fatal(err)
	}
	// A lease taken again records its own priority, not its slot's last one.
	if n := must[int](t)(st.ReturnBatches(ctx, must[[]tenancy.Lease](t)(st.DispatchMany(ctx, tn, d, "d1", 101, []tenancy.Range{{101, 110}})))); n != 1 {
		t.Fatalf("handed back %d, want 1", n)
	}
	os = must[[]tenancy.Orphan](t)(st.Orphans(ctx, d, 10))
	if len(os) != 1 || os[0].Priority != events.PriorityNormal {
		t.Fatalf("orphans %+v, want the normal batch", os)
	}
	if firsts := must[map[events.Priority]uint64](t)(st.FirstUndispatched(ctx, tn)); firsts[events.PriorityHigh] != 151 || firsts[events.PriorityBulk] != 51 || firsts[events.PriorityNormal] != 111 {
		t.Fatalf("first undispatched %v, want high 151, bulk 51, normal 111", firsts)
	}
}
