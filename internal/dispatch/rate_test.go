package dispatch_test

import (
	"sync"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// A pair's dispatch rate caps the events dispatched per second on top of
// its slots: never more than a second's worth (the burst) plus the rate
// times the time since the first grant. Removing the cap takes effect at
// once, without waiting for a poll.
func TestDispatchRate(t *testing.T) {
	t.Parallel()
	const (
		rate   = 200
		events = 3000
		paced  = 600 // dispatched under the cap before it is removed
	)
	e := setup(t, time.Minute)
	e.tenant("paced", 1, 100, pg)
	e.publish("paced", events)
	if err := e.st.SetDestRate(e.ctx, "paced", pg, rate); err != nil {
		t.Fatal(err)
	}
	var log commitLog
	e.startSink(pg, 4, nil, func() time.Duration { return 0 })
	d := e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: 50, PollInterval: time.Hour}, log.hook)
	e.waitFor("the paced events dispatched", func() bool { n, _, _ := log.total(); return n >= paced })
	log.checkRate(t, rate)
	if d.RateLimited(pg) == 0 {
		t.Error("no grant was held back by the rate")
	}

	start := time.Now()
	if err := e.st.SetDestRate(e.ctx, "paced", pg, 0); err != nil {
		t.Fatal(err)
	}
	e.waitFor("every event dispatched", func() bool { n, _, _ := log.total(); return n >= events })
	rest := events - paced
	if took, capped := time.Since(start), time.Duration(rest/rate)*time.Second; took > capped/2 {
		t.Errorf("the last %d events took %v after the cap was removed; at the cap they take %v", rest, took, capped)
	}
}

// A pair's dispatch rate covers its replay too: with the tenant's live
// events and its replay dispatched at once, the two lanes together stay
// within the pair's rate.
func TestDispatchRateCoversTheReplay(t *testing.T) {
	t.Parallel()
	const (
		rate   = 200
		events = 600
	)
	e := setup(t, time.Minute)
	e.tenant("paced", 1, 100, pg)
	old := e.publish("paced", events)
	// Dispatched before: the cursor is past them. The rate is known
	// before the dispatcher starts.
	if err := e.st.SetCursor(e.ctx, "paced", pg, old[len(old)-1]+1); err != nil {
		t.Fatal(err)
	}
	if err := e.st.SetDestRate(e.ctx, "paced", pg, rate); err != nil {
		t.Fatal(err)
	}
	e.publish("paced", events)
	if _, err := e.st.Rewind(e.ctx, tenancy.Rewind{Tenant: "paced", Dest: pg, From: old[0], Rate: tenancy.ReplayUnthrottled}); err != nil {
		t.Fatal(err)
	}
	e.startSink(pg, 4, nil, func() time.Duration { return 0 })
	var (
		mu     sync.Mutex
		sum    int
		t0, tn time.Time
	)
	d := e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: 50, PollInterval: time.Hour}, func(d *dispatch.Dispatcher) {
		d.SetAfterCommit(func(ls []tenancy.Lease) {
			mu.Lock()
			defer mu.Unlock()
			if t0.IsZero() {
				t0 = time.Now()
			}
			tn = time.Now()
			for _, l := range ls {
				sum += int(l.ToSeq - l.FromSeq + 1)
			}
		})
	})
	counted := func() int { mu.Lock(); defer mu.Unlock(); return sum }
	e.waitFor("the new events and the replay dispatched", func() bool { return counted() >= 2*events })
	mu.Lock()
	took := tn.Sub(t0)
	mu.Unlock()
	// Both lanes may start on the same second's worth (each plans against
	// the tokens there are before either commits); after that the two
	// share the rate.
	if minimum := time.Duration(float64(2*events-2*rate) / rate * float64(time.Second)); took < minimum*9/10 {
		t.Errorf("%d events of both lanes dispatched in %v; the pair's rate allows them in no less than %v", 2*events, took, minimum)
	}
	if d.RateLimited(pg) == 0 {
		t.Error("no grant was held back by the rate")
	}
}

// A pair's rate holds from the start-up scan for a tenant whose events
// there are all high priority: the rate is metered on its normal events'
// state, which none of them seeds.
func TestDispatchRateWithoutNormalEvents(t *testing.T) {
	t.Parallel()
	const rate, n = 200, 800
	e := setup(t, time.Minute)
	e.tenant("paced", 1, 100, pg)
	e.publishOf("paced", events.PriorityHigh, n)
	if err := e.st.SetDestRate(e.ctx, "paced", pg, rate); err != nil {
		t.Fatal(err)
	}
	var log commitLog
	e.startSink(pg, 4, nil, func() time.Duration { return 0 })
	e.start(&dispatch.Config{Dests: []string{pg}, BatchSize: 50, PollInterval: time.Hour}, log.hook)
	e.waitFor("the events dispatched", func() bool { got, _, _ := log.total(); return got >= n })
	log.checkRate(t, rate)
}

// commitLog records when each grant committed and how many events
// (Dispatcher.SetAfterCommit).
type commitLog struct {
	mu      sync.Mutex
	commits []commitAt
}

type commitAt struct {
	at     time.Time
	events int
}

// hook records d's commits.
func (l *commitLog) hook(d *dispatch.Dispatcher) {
	d.SetAfterCommit(func(ls []tenancy.Lease) {
		c := commitAt{at: time.Now()}
		for _, ls := range ls {
			c.events += int(ls.ToSeq - ls.FromSeq + 1)
		}
		l.mu.Lock()
		l.commits = append(l.commits, c)
		l.mu.Unlock()
	})
}

// total returns the events committed so far, and when the first and the
// last commit were.
func (l *commitLog) total() (n int, first, last time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.commits {
		n += c.events
	}
	if len(l.commits) > 0 {
		first, last = l.commits[0].at, l.commits[len(l.commits)-1].at
	}
	return n, first, last
}

// checkRate reports the commits so far that went beyond rate events per
// second: a second's worth (the burst) plus the rate times the time since
// the first commit, and a whole run faster than the rate allows.
func (l *commitLog) checkRate(t *testing.T, rate int) {
	t.Helper()
	l.mu.Lock()
	t0, sum := l.commits[0].at, 0
	for _, c := range l.commits {
		sum += c.events
		// A commit's events were granted before it: allow one grant of
		// slack for the time between the grant and the commit.
		if bound := rate + int(float64(rate)*c.at.Sub(t0).Seconds()) + rate; sum > bound {
			t.Errorf("%d events dispatched %v after the first grant, cap %d", sum, c.at.Sub(t0), bound)
		}
	}
	l.mu.Unlock()
	n, first, last := l.total()
	if minimum := time.Duration(float64(n-rate) / float64(rate) * float64(time.Second)); last.Sub(first) < minimum*9/10 {
		t.Errorf("%d events dispatched in %v, the rate allows them in no less than %v", n, last.Sub(first), minimum)
	}
}
