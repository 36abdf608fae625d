package tenancy_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// A rewind starts the pair's replay lane up to where the cursor is, with
// the replay's rate, leaves the live cursor where it is, and tells
// dispatchers at once; ending the replay (EndReplay) tells them too. Bad
// rates are refused and change nothing.
func TestRewindMarksReplayAndNotifies(t *testing.T) {
	t.Parallel()
	st, _, _ := setup(t, nil)
	ctx := testCtx(t)
	ch, err := st.Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := func(what string) tenancy.Released {
		t.Helper()
		select {
		case r := <-ch:
			return r
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no notification in 30s", what)
		}
		return tenancy.Released{}
	}
	state := func() tenancy.PairState {
		t.Helper()
		return must[tenancy.PairState](t)(st.PairState(ctx, "acme", "postgres"))
	}
	if err := st.SetCursor(ctx, "acme", "postgres", 1000); err != nil {
		t.Fatal(err)
	}
	if p := state(); p.Replaying() || p.ReplayUntil != 0 || p.ReplayRate != 0 {
		t.Fatalf("before any replay: %+v", p)
	}

	if _, err := st.Rewind(ctx, tenancy.Rewind{Tenant: "acme", Dest: "postgres", From: 10, Rate: -2}); !errors.Is(err, tenancy.ErrInvalidArgument) {
		t.Fatalf("rate -2: %v, want ErrInvalidArgument", err)
	}
	if p := state(); p.NextSeq != 1000 {
		t.Fatalf("a refused rewind moved the cursor: %+v", p)
	}

	prev := must[uint64](t)(st.Rewind(ctx, tenancy.Rewind{Tenant: "acme", Dest: "postgres", From: 100, Rate: 250}))
	if prev != 1000 {
		t.Fatalf("rewind returned %d, want 1000", prev)
	}
	if r := next("rewind"); r != (tenancy.Released{Tenant: "acme", Dest: "postgres", Cursor: true}) {
		t.Fatalf("rewind notified %+v", r)
	}
	if p := state(); p.NextSeq != 1000 || p.ReplayNext != 100 || p.ReplayUntil != 1000 || p.ReplayRate != 250 || !p.Replaying() {
		t.Fatalf("after rewind: %+v, want cursor 1000, replay lane 100 until 1000 at 250/s", p)
	}

	// A second rewind inside the first widens it and keeps the end; its
	// rate replaces the first one's (unthrottled here).
	must[uint64](t)(st.Rewind(ctx, tenancy.Rewind{Tenant: "acme", Dest: "postgres", From: 50, Rate: tenancy.ReplayUnthrottled}))
	next("second rewind")
	if p := state(); p.NextSeq != 1000 || p.ReplayNext != 50 || p.ReplayUntil != 1000 || p.ReplayRate != tenancy.ReplayUnthrottled {
		t.Fatalf("after a second rewind: %+v, want the lane at 50 until 1000 unthrottled", p)
	}

	// Rate 0 is the dispatcher's default.
	must[uint64](t)(st.Rewind(ctx, tenancy.Rewind{Tenant: "acme", Dest: "postgres", From: 40}))
	next("third rewind")
	if p := state(); p.ReplayRate != 0 {
		t.Fatalf("default rate stored as %d, want 0", p.ReplayRate)
	}

	if at := must[uint64](t)(st.EndReplay(ctx, "acme", "postgres")); at != 40 {
		t.Fatalf("EndReplay stopped the replay at %d, want 40", at)
	}
	if r := next("end"); r != (tenancy.Released{Tenant: "acme", Dest: "postgres", Cursor: true}) {
		t.Fatalf("EndReplay notified %+v", r)
	}
	if p := state(); p.Replaying() || p.NextSeq != 1000 {
		t.Fatalf("after the replay ended: %+v, want not replaying, cursor 1000", p)
	}
	if at := must[uint64](t)(st.EndReplay(ctx, "acme", "postgres")); at != 0 {
		t.Fatalf("EndReplay ended a replay twice (at %d)", at)
	}
	if _, err := st.PairState(ctx, "nobody", "postgres"); !errors.Is(err, tenancy.ErrUnknownTenant) {
		t.Fatalf("unknown pair: %v, want ErrUnknownTenant", err)
	}
}
