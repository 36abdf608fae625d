package migrate_test

import (
	"context"
	"testing"

	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Migration 00021 moves replays under way, which rewound the pair's
// cursor, into the replay lane: the live cursor goes back to where the
// replay found it, the lane covers what was left of the replay (up to
// its end for a bounded one) and has its slot, and a pair that was not
// replaying is left alone.
func TestReplaysUnderWayMoveToTheLane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// As Rewind wrote them before 00021: "open" replays 100..999 and has
	// dispatched up to 149; "bounded" replays 10..50 of a cursor at 500
	// (stop_after 50, resume_at 500) and is at 30; "idle" is not replaying.
	pool := migratedWith(t, 20, `INSERT INTO fairway.tenants (id) VALUES ('open'), ('bounded'), ('idle');
		INSERT INTO fairway.limits (tenant, dest, max_slots) VALUES ('open', 'postgres', 1), ('bounded', 'postgres', 1), ('idle', 'postgres', 1);
		INSERT INTO fairway.cursors (tenant, dest, next_seq, replay_until, stop_after, resume_at) VALUES
			('open', 'postgres', 150, 1000, NULL, NULL),
			('bounded', 'postgres', 30, 500, 50, 500),
			('idle', 'postgres', 700, 600, NULL, NULL)`)
	st, err := tenancy.New(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []tenancy.PairState{
		{Tenant: "open", NextSeq: 1000, ReplayNext: 150, ReplayUntil: 1000},
		{Tenant: "bounded", NextSeq: 500, ReplayNext: 30, ReplayUntil: 51},
		{Tenant: "idle", NextSeq: 700, ReplayUntil: 600},
	} {
		got, err := st.PairState(ctx, want.Tenant, "postgres")
		if err != nil {
			t.Fatal(err)
		}
		if got.NextSeq != want.NextSeq || got.ReplayNext != want.ReplayNext || got.ReplayUntil != want.ReplayUntil || got.Replaying() != want.Replaying() {
			t.Errorf("%s after migrating: %+v, want cursor %d, lane %d until %d", want.Tenant, got, want.NextSeq, want.ReplayNext, want.ReplayUntil)
		}
		if !want.Replaying() {
			continue
		}
		// The lane dispatches on its own slot, beside the pair's live one.
		ls, err := st.DispatchReplay(ctx, want.Tenant, "postgres", "test", got.ReplayNext, []tenancy.Range{{From: got.ReplayNext, To: got.ReplayNext}})
		if err != nil || len(ls) != 1 || ls[0].Slot != -1 {
			t.Errorf("%s: replay dispatch after migrating: %+v %v, want one lease on slot -1", want.Tenant, ls, err)
		}
	}
}
