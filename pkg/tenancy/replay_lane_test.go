package tenancy_test

import (
	"context"
	"errors"
	"testing"

	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// The replay lane has a cursor and slots of its own: with the pair's one
// live slot held, its replay still dispatches, up to the replay's slots;
// live dispatch neither takes the replay's slots nor moves its cursor;
// the lane refuses a batch past the replay's end and ends at it; a lease
// of the lane releases like any other.
func TestReplayLaneHasItsOwnCursorAndSlots(t *testing.T) {
	t.Parallel()
	st, ctx, live := livePair(t)
	const tn, d = "acme", tenancy.DestPostgres
	if _, err := st.DispatchReplay(ctx, tn, d, "d1", 1, []tenancy.Range{{1, 10}}); !errors.Is(err, tenancy.ErrAtLimit) {
		t.Fatalf("replay dispatch before any replay: %v, want ErrAtLimit (no replay slots)", err)
	}
	if cur := must[uint64](t)(st.Rewind(ctx, tenancy.Rewind{Tenant: tn, Dest: d, From: 20, Slots: 2})); cur != 101 {
		t.Fatalf("rewind returned %d, want the cursor 101", cur)
	}

	// The live slot is held; the replay takes its own two.
	r1 := must[[]tenancy.Lease](t)(st.DispatchReplay(ctx, tn, d, "d1", 20, []tenancy.Range{{20, 39}, {40, 59}, {60, 79}}))
	if len(r1) != 2 || r1[0].Slot >= 0 || r1[1].Slot >= 0 || r1[1].ToSeq != 59 {
		t.Fatalf("replay leases %+v, want two on replay slots through 59", r1)
	}
	if _, err := st.DispatchReplay(ctx, tn, d, "d1", 60, []tenancy.Range{{60, 79}}); !errors.Is(err, tenancy.ErrAtLimit) {
		t.Fatalf("a third replay batch: %v, want ErrAtLimit", err)
	}
	if p := must[tenancy.PairState](t)(st.PairState(ctx, tn, d)); p.NextSeq != 101 || p.ReplayNext != 60 || !p.Replaying() {
		t.Fatalf("pair %+v, want cursor 101, replay at 60", p)
	}
	if n := must[int](t)(st.InUse(ctx, tn, d)); n != 1 {
		t.Fatalf("live in use %d, want 1 (the replay's do not count)", n)
	}

	// Live dispatch takes no replay slot and leaves the lane alone.
	if err := st.Release(ctx, live.ID, live.Token); err != nil {
		t.Fatal(err)
	}
	must[tenancy.Lease](t)(st.Dispatch(ctx, tn, d, "d1", 101, 150))
	if _, err := st.Dispatch(ctx, tn, d, "d1", 151, 160); !errors.Is(err, tenancy.ErrAtLimit) {
		t.Fatalf("live past its one slot: %v, want ErrAtLimit", err)
	}

	// A released replay slot serves the replay again; past its end is refused.
	if err := st.Release(ctx, r1[0].ID, r1[0].Token); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DispatchReplay(ctx, tn, d, "d1", 60, []tenancy.Range{{60, 101}}); !errors.Is(err, tenancy.ErrCursorMoved) {
		t.Fatalf("a replay batch past the end: %v, want ErrCursorMoved", err)
	}
	must[[]tenancy.Lease](t)(st.DispatchReplay(ctx, tn, d, "d1", 60, []tenancy.Range{{60, 100}}))
	p := must[tenancy.PairState](t)(st.PairState(ctx, tn, d))
	if p.Replaying() || p.NextSeq != 151 {
		t.Fatalf("after the replay's last batch: %+v, want not replaying, cursor 151", p)
	}
	ps := must[[]tenancy.PairStatus](t)(st.PairStatuses(ctx, tn))
	if len(ps) != 1 || ps[0].InUse != 1 || ps[0].ReplayInUse != 2 || ps[0].ReplaySlots != 2 {
		t.Fatalf("status %+v, want 1 live and 2 replay batches held of 2", ps)
	}
	if _, err := st.Rewind(ctx, tenancy.Rewind{Tenant: tn, Dest: d, From: 151}); !errors.Is(err, tenancy.ErrInvalidArgument) {
		t.Fatalf("a rewind to the cursor: %v, want ErrInvalidArgument", err)
	}
	if _, err := st.Rewind(ctx, tenancy.Rewind{Tenant: tn, Dest: d, From: 1, Slots: tenancy.ReplaySlotsMax + 1}); !errors.Is(err, tenancy.ErrInvalidArgument) {
		t.Fatalf("too many replay slots: %v, want ErrInvalidArgument", err)
	}
}

// The replay lane's edges: a replay found empty up to the end its
// dispatcher knew goes on when a rewind has widened it since; a replay's
// orphan is re-dispatched on the replay's slots, not the pair's live one;
// a limit of 0 stops the replay too; a replay slot's release says it is
// one; an end above 2^31 is taken.
func TestReplayLaneEdges(t *testing.T) {
	t.Parallel()
	st, ctx, live := livePair(t)
	const tn, d = "acme", tenancy.DestPostgres
	state := func() tenancy.PairState {
		t.Helper()
		return must[tenancy.PairState](t)(st.PairState(ctx, tn, d))
	}

	// Widened while its dispatcher found nothing up to 51.
	must[uint64](t)(st.Rewind(ctx, tenancy.Rewind{Tenant: tn, Dest: d, From: 40, Last: 50}))
	must[uint64](t)(st.Rewind(ctx, tenancy.Rewind{Tenant: tn, Dest: d, From: 45, Last: 80}))
	if err := st.FinishReplay(ctx, tn, d, 40, 51); err != nil {
		t.Fatal(err)
	}
	if p := state(); !p.Replaying() || p.ReplayNext != 51 || p.ReplayUntil != 81 {
		t.Fatalf("after finding 40..50 empty in a replay widened to 80: %+v, want the replay going on from 51", p)
	}
	if err := st.FinishReplay(ctx, tn, d, 51, 81); err != nil {
		t.Fatal(err)
	}
	if p := state(); p.Replaying() {
		t.Fatalf("after finding the rest empty: %+v still replaying", p)
	}

	// An orphan of the replay waits for a replay slot, not the live one.
	ch := must[<-chan tenancy.Released](t)(st.Listen(ctx))
	must[uint64](t)(st.Rewind(ctx, tenancy.Rewind{Tenant: tn, Dest: d, From: 1, Last: 3_000_000_000}))
	rl := must[[]tenancy.Lease](t)(st.DispatchReplay(ctx, tn, d, "d1", 1, []tenancy.Range{{1, 10}}))
	if n := must[int](t)(st.ReturnBatches(ctx, rl)); n != 1 {
		t.Fatalf("handed back %d replay batches, want 1", n)
	}
	os := must[[]tenancy.Orphan](t)(st.Orphans(ctx, d, 10))
	if len(os) != 1 || os[0].Slot >= 0 {
		t.Fatalf("orphans %+v, want the replay's one", os)
	}
	re := must[tenancy.Lease](t)(st.Redispatch(ctx, os[0], "d2")) // the live slot is held
	if re.Slot >= 0 || re.FromSeq != 1 || re.ToSeq != 10 {
		t.Fatalf("re-dispatched %+v, want 1..10 on a replay slot", re)
	}

	// Releases say which lane's slot was freed.
	for r := range ch {
		if r.Cursor || r.Weight {
			continue
		}
		if !r.Replay {
			t.Fatalf("the replay batch's hand-back notified %+v, want a replay release", r)
		}
		break
	}
	if err := st.Release(ctx, re.ID, re.Token); err != nil {
		t.Fatal(err)
	}
	if err := st.Release(ctx, live.ID, live.Token); err != nil {
		t.Fatal(err)
	}
	var gotReplay, gotLive bool
	for r := range ch {
		switch {
		case r.Cursor || r.Weight:
		case r.Replay:
			gotReplay = true
		default:
			gotLive = true
		}
		if gotReplay && gotLive {
			break
		}
	}

	// Limit 0 switches the replay off too.
	if err := st.SetLimit(ctx, tn, d, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DispatchReplay(ctx, tn, d, "d1", 11, []tenancy.Range{{11, 20}}); !errors.Is(err, tenancy.ErrAtLimit) {
		t.Fatalf("replay dispatch at limit 0: %v, want ErrAtLimit", err)
	}
}

// livePair sets up acme/postgres with one live slot and its batch 1..100
// dispatched and held.
func livePair(t *testing.T) (*tenancy.Store, context.Context, tenancy.Lease) {
	t.Helper()
	st, _, _ := setup(t, nil)
	ctx := testCtx(t)
	if _, err := st.EnsureTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if err := st.SetLimit(ctx, "acme", tenancy.DestPostgres, 1); err != nil {
		t.Fatal(err)
	}
	return st, ctx, must[tenancy.Lease](t)(st.Dispatch(ctx, "acme", tenancy.DestPostgres, "d1", 1, 100))
}
