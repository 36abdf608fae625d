package dispatch

import (
	"testing"

	"github.com/fairwayhq/fairway/internal/dispatch/scheduler"
)

// A release notification may count several slots (grouped releases,
// tenancy.Released.Slots): a tenant at its limit then reads one batch per
// slot freed, not one per notification.
func TestUnblockCountsFreedSlots(t *testing.T) {
	sched, err := scheduler.New(scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	x := &destination{name: "postgres", size: 10, sched: sched, wake: make(chan struct{}, 1),
		tenants: map[string]*tenantState{"acme": {full: true}}}
	ts := x.tenants["acme"]
	for _, tc := range []struct{ slots, want int }{{3, 30}, {0, 40}, {1, 50}} {
		x.unblock("acme", tc.slots)
		if most, hinted := x.readMax(ts, 1000); most != tc.want || !hinted {
			t.Fatalf("after a release of %d slots: read %d (hinted %v), want %d", tc.slots, most, hinted, tc.want)
		}
	}
	if len(x.wake) != 1 {
		t.Fatal("no wake-up")
	}
}
