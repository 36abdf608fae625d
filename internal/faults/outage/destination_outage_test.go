package outage_test

import (
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/b2b/b2btest"
)

const (
	// destOutage is how long ClickHouse is unreachable and the partner
	// answers 503.
	destOutage = 30 * time.Second
	// baseline is the window of normal traffic the outage is compared with.
	baseline = 10 * time.Second
)

// TestClickHouseDownAndPartner503 makes ClickHouse unreachable (a proxy in
// front of it refuses connections and cuts the open ones) and one B2B
// partner answer 503, both for 30 s, while four tenants publish. Those two
// destinations fall behind and catch up by themselves, with nothing
// dead-lettered; PostgreSQL and the other partner keep applying.
func TestClickHouseDownAndPartner503(t *testing.T) {
	t.Parallel()
	tenants := []string{"acme", "globex", "initech", "umbrella"}
	p := startPipeline(t, pipeConfig{CHProxy: true, Tenants: tenants,
		Partners: map[string][]string{"down": {"acme", "globex"}, "up": {"initech", "umbrella"}}})
	const (
		ch   = tenancy.DestClickHouse
		pg   = tenancy.DestPostgres
		down = tenancy.DestB2BPrefix + "down"
		up   = tenancy.DestB2BPrefix + "up"
	)

	stopTraffic := p.traffic(tenants, 500*time.Millisecond, 4)
	p.waitApplied("warm-up", 50)
	baseFrom := time.Now()
	time.Sleep(baseline) // a window of normal traffic, measured afterwards
	baseTo := time.Now()
	// Every destination is caught up with the baseline window before the
	// outage, so that the window measures normal service only.
	p.waitCaughtUp("caught up before the outage", seqsOf(p.sentSeqs()), p.Dests...)

	p.proxy.Down()
	p.Receivers["down"].FailAlways(b2btest.Failure{Status: http.StatusServiceUnavailable})
	downAt := time.Now()   // both are down from here on
	time.Sleep(destOutage) // the outage; traffic goes on
	upAt := time.Now()     // both are down until here
	p.Receivers["down"].Heal()
	p.proxy.Up()
	beforeUp := p.sentSeqs()
	t.Logf("ClickHouse down and partner \"down\" answering 503 for %s; %d events sent so far", upAt.Sub(downAt).Round(time.Millisecond), len(beforeUp))

	// While they were down, nothing reached them: no Apply that started
	// after the outage began succeeded before it ended.
	for _, dest := range []string{ch, down} {
		for _, c := range p.rec.callsOf(dest) {
			if c.err == nil && c.start.After(downAt) && c.end.Before(upAt) {
				t.Errorf("%s applied a batch of %d during the outage (%s → %s)", dest, len(c.seqs), c.start.Format(time.StampMilli), c.end.Format(time.StampMilli))
			}
		}
	}
	// The others kept applying during it.
	for _, dest := range []string{pg, up} {
		if n := p.rec.appliedBetween(dest, downAt, upAt); n == 0 {
			t.Errorf("%s applied nothing while ClickHouse and the other partner were down", dest)
		} else {
			t.Logf("%s applied %d events during the outage", dest, n)
		}
	}

	// They catch up by themselves.
	lag := map[string]int{}
	for _, dest := range []string{ch, down} {
		var seqs []uint64
		for _, s := range beforeUp {
			if p.hasDest(s.ev.Tenant, dest) {
				seqs = append(seqs, s.seq)
				if !p.rec.appliedBy(dest, s.seq, upAt) {
					lag[dest]++
				}
			}
		}
		testenv.Eventually(t, waitLimit, dest+" catches up", func() error {
			if _, ok := p.rec.caughtUp(dest, seqs); !ok {
				return errors.New(dest + " has not applied everything sent before it came back")
			}
			return nil
		})
		at, _ := p.rec.caughtUp(dest, seqs)
		t.Logf("%s was %d events behind when it came back; caught up %s later; failed Apply calls by classification: %v",
			dest, lag[dest], at.Sub(upAt).Round(time.Millisecond), p.rec.failures(dest))
	}
	stopTraffic()
	p.waitDrained("after the outage", nil)

	for _, dest := range []string{ch, down} {
		if lag[dest] == 0 {
			t.Errorf("%s was not behind when it came back: did the outage happen?", dest)
		}
	}
	if p.logs.count("b2b circuit opened") == 0 {
		t.Errorf("partner \"down\"'s circuit breaker never opened during 30 s of 503s")
	}
	// End-to-end latency (stored in PRODUCTS → first applied) of events
	// stored in the baseline and in the outage window.
	for _, dest := range []string{pg, up, ch, down} {
		b50, b99, bn := p.rec.latency(dest, baseFrom, baseTo)
		o50, o99, on := p.rec.latency(dest, downAt, upAt)
		a50, a99, an := p.rec.applyTimes(dest, baseFrom, baseTo)
		t.Logf("%-12s end-to-end p50/p99: baseline %s/%s (%d events), during the outage %s/%s (%d events); baseline Apply call p50/p99 %s/%s (%d calls)",
			dest, b50.Round(time.Millisecond), b99.Round(time.Millisecond), bn, o50.Round(time.Millisecond), o99.Round(time.Millisecond), on,
			a50.Round(time.Millisecond), a99.Round(time.Millisecond), an)
	}
}

func (p *pipe) hasDest(tenant, dest string) bool { return slices.Contains(p.dests[tenant], dest) }

// appliedBetween counts dest's events first applied within (from, to).
func (r *recorder) appliedBetween(dest string, from, to time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, a := range r.applied[dest] {
		if a.at.After(from) && a.at.Before(to) {
			n++
		}
	}
	return n
}

// appliedBy reports whether dest had applied seq by t.
func (r *recorder) appliedBy(dest string, seq uint64, t time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.applied[dest][seq]
	return ok && !a.at.After(t)
}

// failures counts dest's failed Apply calls by classification rule.
func (r *recorder) failures(dest string) map[string]int {
	out := map[string]int{}
	for _, c := range r.callsOf(dest) {
		if c.err != nil {
			out[c.outcome.Class.String()+": "+c.outcome.Rule]++
		}
	}
	return out
}
