package dispatch_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
)

// Ten tenants' backlogs interleaved event by event, far more of them than
// the body budget holds: the bodies that did not fit are read again, in
// stream order, as the grants free room, so that most items still
// carries its events' bodies (exactly as PRODUCTS stores them) and the
// sink reads almost nothing; every event is covered exactly once.
func TestBodiesPastTheBudgetAreRefilled(t *testing.T) {
	t.Parallel()
	const (
		perTenant = 300
		batch     = 20
	)
	e := setup(t, time.Minute)
	var tenants []string
	runs := make([]int, 10)
	for i := range runs {
		tenants = append(tenants, fmt.Sprintf("t%d", i))
		e.tenant(tenants[i], 1, 1000, pg)
		runs[i] = 1
	}
	seqs := e.interleave(perTenant, tenants, runs...)
	// About 150 of the 3,000 events' bodies at a time.
	budget := int64(150 * (160 + 150))
	s := e.startSink(pg, 2, nil, func() time.Duration { return 2 * time.Millisecond })
	d := e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: batch, PollInterval: time.Hour, BodyBudget: budget}, nil)
	total := len(tenants) * perTenant
	e.waitFor("every event applied", func() bool { return s.total() >= total })
	items := s.snapshot()
	checkExactlyOnce(t, items, seqs, false)
	rd := work.NewReader(e.nc, "")
	carried := 0
	for _, it := range items {
		if it.Bodies == nil {
			continue
		}
		stored, err := rd.ReadItemHeaders(e.ctx, it)
		if err != nil {
			t.Fatal(err)
		}
		checkCarried(t, it, stored)
		carried += it.Count
	}
	t.Logf("%d of %d events carried their bodies; %.0f bodies refilled, %.0f grants waited for them", carried, total, d.Refilled(), d.BodyWaits(pg))
	// Without the refill, about the budget's 150 would; a grant that
	// waited bodyWaitMax in vain (a slow machine) goes out without them.
	if carried < total*2/3 {
		t.Errorf("%d of %d events carried their bodies, want at least two thirds: the rest is read by the sink", carried, total)
	}
	if d.Refilled() == 0 {
		t.Error("no body was refilled: the budget did not overflow, and the test shows nothing")
	}
}

// Four tenants with two batches each waiting, interleaved event by
// event: while the backfill has rung only half a batch of each, their
// grants wait for the rest, unless half the body budget is held. Here
// it is, and the backfill stops there: the grants cut what the index
// has, which gives the bodies back, instead of waiting for the backfill
// to ring more into a budget that would overflow.
func TestBackfillDoesNotHoldBodiesPastHalfTheBudget(t *testing.T) {
	t.Parallel()
	const (
		perTenant = 400
		batch     = 200
		paused    = 400 // events the backfill rings before it stops: 100 of each tenant
	)
	e := setup(t, time.Minute)
	tenants := []string{"t0", "t1", "t2", "t3"}
	for _, id := range tenants {
		e.tenant(id, 1, 1000, pg)
	}
	seqs := e.interleave(perTenant, tenants, 1, 1, 1, 1)
	// Room for about 600 bodies: the 400 rung are past half of it.
	budget := int64(600 * (160 + 150))
	s := e.startSink(pg, 2, nil, func() time.Duration { return 0 })
	resume := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(resume) }) }
	var rung atomic.Int64
	d := e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: batch, PollInterval: time.Hour, BodyBudget: budget}, func(d *dispatch.Dispatcher) {
		d.SetBackfillBell(func(uint64) {
			if rung.Add(1) == paused+1 {
				<-resume
			}
		})
	})
	t.Cleanup(release) // before the dispatcher's stop, which the stopped backfill would hold up
	e.waitFor("the backfill stopped", func() bool { return rung.Load() > paused })
	testenv.Eventually(t, 2*time.Second, "an item while the backfill stands", func() error {
		if len(s.snapshot()) == 0 {
			return fmt.Errorf("none, with %d bodies held of a budget for about 600: the grants wait for more", paused)
		}
		return nil
	})
	during := len(s.snapshot())
	release()
	e.waitFor("every event applied", func() bool { return s.total() >= len(tenants)*perTenant })
	checkExactlyOnce(t, s.snapshot(), seqs, false)
	t.Logf("%d items while the backfill stood; %.0f bodies refilled", during, d.Refilled())
}
