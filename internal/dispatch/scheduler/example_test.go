package scheduler_test

import (
	"fmt"

	"github.com/fairwayhq/fairway/internal/dispatch/scheduler"
)

// A tenant with a large backlog and weight 2 shares a destination with a
// tenant that has one event: the small tenant is served within the round.
func Example() {
	s, err := scheduler.New(scheduler.Config{}) // cost = events, 500 per round per weight unit
	if err != nil {
		panic(err)
	}
	big := scheduler.Key{Tenant: "big", Dest: "postgres"}
	small := scheduler.Key{Tenant: "small", Dest: "postgres"}
	s.SetBacklog(big, 1_000_000, 2)

	for i := range 4 {
		if i == 1 {
			s.SetBacklog(small, 1, 1) // doorbell: small has one event
		}
		g, ok := s.Next()
		if !ok {
			break
		}
		// The dispatcher would cut up to min(g.MaxEvents, g.MaxCost)
		// events into batches here and take a slot for each.
		n := int64(g.MaxEvents)
		fmt.Printf("%s: up to %d events (credit %d)\n", g.Key.Tenant, g.MaxEvents, g.MaxCost)
		if err := s.Done(g.Key, n, n); err != nil {
			panic(err)
		}
	}
	// Output:
	// big: up to 500 events (credit 1000)
	// big: up to 500 events (credit 500)
	// small: up to 1 events (credit 500)
	// big: up to 500 events (credit 1000)
}
