package dispatch_test

import (
	"sync"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/dispatch/scheduler"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// While the start-up scan counts the backlogs of the tenants the stream
// holds (a request per pair, long with thousands of tenants), a tenant
// with no event in the stream yet is served, and so are new events of a
// priority the stream held none of: they go out while the probes still
// run, and a slot released then frees its tenant then. The backlogs
// counted wait until every probe is done, then go out too, each event
// exactly once.
func TestNewTenantServedWhileScanProbes(t *testing.T) {
	t.Parallel()
	e := setup(t, time.Minute)
	for _, id := range []string{"old", "slow", "new"} {
		e.tenant(id, 1, 10, pg)
	}
	e.tenant("single", 1, 1, pg) // one slot: its second event needs the first's release
	singleLeases, singleFull := make(chan tenancy.Lease, 4), make(chan struct{})
	var fullOnce sync.Once
	seqs := map[string][]uint64{"old": e.publish("old", 3), "slow": e.publish("slow", 1)}
	probing, release := make(chan struct{}), make(chan struct{})
	var blockOnce, releaseOnce sync.Once
	oldProbed := make(chan struct{})
	var oldOnce sync.Once
	e.start(&dispatch.Config{Dests: []string{pg}}, func(d *dispatch.Dispatcher) {
		d.SetAfterCommit(func(ls []tenancy.Lease) {
			for _, l := range ls {
				if l.Tenant == "single" {
					singleLeases <- l
				}
			}
		})
		d.SetAtLimit(func(k scheduler.Key) {
			if k.Tenant == "single" {
				fullOnce.Do(func() { close(singleFull) })
			}
		})
		d.SetProbe(func(tenant string) {
			switch tenant {
			case "slow":
				blockOnce.Do(func() { close(probing); <-release })
			case "old":
				oldOnce.Do(func() { close(oldProbed) })
			}
		})
	})
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before the dispatcher stops
	for _, ch := range []chan struct{}{probing, oldProbed} {
		select {
		case <-ch:
		case <-e.ctx.Done():
			t.Fatal("the start-up scan never probed the stream's tenants")
		}
	}
	seqs["new"] = e.publish("new", 1)
	seqs["old"] = append(seqs["old"], e.publishOf("old", events.PriorityHigh, 1)...)
	inWork := func() map[string]int { // events by tenant and priority
		got := map[string]int{}
		if last := e.workLastSeq(); last > 0 {
			for _, it := range e.workItems(1, last) {
				got[it.Tenant+"/"+string(it.Priority.Or())] += it.Count
			}
		}
		return got
	}
	e.waitFor("new's event and old's high one dispatched while slow's probe runs", func() bool {
		got := inWork()
		return got["new/normal"] == 1 && got["old/high"] == 1
	})
	// A slot released while the probes run frees its tenant then: its
	// next event goes out before the probes are done.
	seqs["single"] = e.publish("single", 1)
	e.waitFor("single's first event dispatched", func() bool { return inWork()["single/normal"] == 1 })
	seqs["single"] = append(seqs["single"], e.publish("single", 1)...)
	select {
	case <-singleFull:
	case <-e.ctx.Done():
		t.Fatal("single's second event never found its slot held")
	}
	l := <-singleLeases
	if err := e.st.Release(e.ctx, l.ID, l.Token); err != nil {
		t.Fatal(err)
	}
	e.waitFor("single's second event dispatched after its release, while slow's probe runs", func() bool {
		return inWork()["single/normal"] == 2
	})
	// Old's probe is done by now, or soon: its backlog must stay out of
	// the rounds while slow's probe runs, whatever its high lane did.
	for range 30 {
		if got := inWork(); got["old/normal"] != 0 || got["slow/normal"] != 0 {
			t.Fatalf("counted backlogs dispatched while the scan probes: %v", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	releaseOnce.Do(func() { close(release) })
	e.waitFor("the counted backlogs dispatched", func() bool {
		got := inWork()
		return got["old/normal"] == 3 && got["slow/normal"] == 1
	})
	checkExactlyOnce(t, e.workItems(1, e.workLastSeq()), seqs, false)
}
