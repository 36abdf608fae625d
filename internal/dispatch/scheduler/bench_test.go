package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dispatch/scheduler"
)

// benchTenants sets up n tenants with unbounded backlog and weights 1..5.
func benchTenants(b *testing.B, cfg scheduler.Config, n int) (*scheduler.Scheduler, []scheduler.Key) {
	b.Helper()
	s := setup(b, cfg)
	keys := make([]scheduler.Key, n)
	for i := range keys {
		keys[i] = key(fmt.Sprintf("tenant-%05d", i))
		s.SetBacklog(keys[i], unbounded, 1+i%5)
	}
	return s, keys
}

func reportGrants(b *testing.B, s *scheduler.Scheduler, grants int) {
	b.Helper()
	st := s.Stats()
	b.ReportMetric(float64(grants)/b.Elapsed().Seconds(), "grants/s")
	b.ReportMetric(float64(st.Scans)/float64(st.Grants), "scans/grant")
}

// BenchmarkNext10kTenants: one Next+Done pair per iteration with 10,000
// tenants active at once.
func BenchmarkNext10kTenants(b *testing.B) {
	s, _ := benchTenants(b, scheduler.Config{}, 10_000)
	grants := 0
	for b.Loop() {
		g, ok := s.Next()
		if !ok {
			b.Fatal("nothing dispatchable")
		}
		if err := s.Done(g.Key, int64(g.MaxEvents), int64(g.MaxEvents)); err != nil {
			b.Fatal(err)
		}
		grants++
	}
	reportGrants(b, s, grants)
}

// BenchmarkNext10kTenantsChurn: as above, but every grant blocks its tenant
// and unblocks the one blocked 5,000 grants earlier, so half the tenants are
// blocked at any time and every iteration pays two SetBlocked calls.
func BenchmarkNext10kTenantsChurn(b *testing.B) {
	s, _ := benchTenants(b, scheduler.Config{}, 10_000)
	const lag = 5_000
	ring := make([]scheduler.Key, lag)
	grants := 0
	for b.Loop() {
		g, ok := s.Next()
		if !ok {
			b.Fatal("nothing dispatchable")
		}
		s.SetBlocked(g.Key, true)
		if err := s.Done(g.Key, int64(g.MaxEvents), int64(g.MaxEvents)); err != nil {
			b.Fatal(err)
		}
		slot := grants % lag
		if old := ring[slot]; old != (scheduler.Key{}) {
			s.SetBlocked(old, false)
		}
		ring[slot] = g.Key
		grants++
	}
	reportGrants(b, s, grants)
}

// BenchmarkNext10kTenantsDampened: 10,000 active tenants with dampening on,
// so every quantum reads the clock and a tenant's window.
func BenchmarkNext10kTenantsDampened(b *testing.B) {
	clock := newFakeClock()
	cfg := scheduler.Config{
		Dampening: &scheduler.Dampening{Threshold: 10_000, Window: time.Minute, Factor: 4},
		Clock:     clock.Now,
	}
	s, _ := benchTenants(b, cfg, 10_000)
	grants := 0
	for b.Loop() {
		g, ok := s.Next()
		if !ok {
			b.Fatal("nothing dispatchable")
		}
		if err := s.Done(g.Key, int64(g.MaxEvents), int64(g.MaxEvents)); err != nil {
			b.Fatal(err)
		}
		grants++
		if grants%1000 == 0 {
			clock.Advance(time.Second)
		}
	}
	reportGrants(b, s, grants)
}
