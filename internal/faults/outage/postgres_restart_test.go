package outage_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/testenv"
)

// pgDowntime is how long the private PostgreSQL stays stopped.
const pgDowntime = 3 * time.Second

// TestPostgresRestart restarts the PostgreSQL that holds the slots,
// cursors, partners and the postgres sink's catalog while four tenants
// publish, and checks that every component backs off and recovers by
// itself: every event lands in every destination, nothing is
// dead-lettered, no slot stays held.
func TestPostgresRestart(t *testing.T) {
	t.Parallel()
	srv := startPGServer(t)
	tenants := []string{"acme", "globex", "initech", "umbrella"}
	p := startPipeline(t, pipeConfig{DSN: srv.URL(), Tenants: tenants, Partners: map[string][]string{"p1": tenants}})

	stopTraffic := p.traffic(tenants, 500*time.Millisecond, 4)
	p.waitApplied("warm-up", 100)

	// A catalog upload of one tenant, so that every sink is in the middle
	// of work (applying, extending and releasing leases) when the server
	// goes away.
	const burst = 10_000
	ctx := context.Background()
	burstSeqs, err := p.publish(ctx, p.generate("acme", burst))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, waitLimit, "the upload is being applied", func() error {
		for _, d := range p.Dests {
			if !p.rec.isApplied(d, burstSeqs[0]) {
				return errors.New(d + " has not started on the upload")
			}
		}
		return nil
	})

	stopAt := time.Now()
	srv.Stop("fast")
	downAt := time.Now()
	time.Sleep(pgDowntime) // the outage itself; traffic goes on
	startAt := time.Now()
	srv.Start()
	upAt := time.Now()
	beforeUp := seqsOf(p.sentSeqs())
	t.Logf("PostgreSQL stopped (pg_ctl stop -m fast took %s), down for %s, started on the same port (pg_ctl start took %s); %d events sent so far",
		downAt.Sub(stopAt).Round(time.Millisecond), startAt.Sub(downAt).Round(time.Millisecond),
		upAt.Sub(startAt).Round(time.Millisecond), len(beforeUp))

	// Everything stored before the server came back is applied everywhere,
	// by the same components: nobody restarted them.
	p.waitCaughtUp("catching up after the restart", beforeUp, p.Dests...)
	// More traffic after the recovery, then drain.
	n := p.sentCount()
	testenv.Eventually(t, waitLimit, "traffic after the recovery", func() error {
		if p.sentCount() < n+100 {
			return errors.New("publishing")
		}
		return nil
	})
	stopTraffic()
	p.waitDrained("after the PostgreSQL restart", nil)

	if n := p.logs.count("tenancy: listener reconnected"); n == 0 {
		t.Errorf("the dispatcher's LISTEN connection never reconnected: did the restart happen?")
	}
	for _, dest := range p.Dests {
		first := time.Time{}
		for _, c := range p.rec.callsOf(dest) {
			if c.err == nil && c.start.After(upAt) {
				first = c.end
				break
			}
		}
		caught, _ := p.rec.caughtUp(dest, beforeUp)
		caughtUp := fmt.Sprintf("%s after", caught.Sub(upAt).Round(time.Millisecond))
		if caught.Before(upAt) {
			caughtUp = "already before it was up"
		}
		t.Logf("%-12s first apply after the restart %s after the server was up; caught up with what was sent before it %s; failed Apply calls: %v",
			dest, first.Sub(upAt).Round(time.Millisecond), caughtUp, p.rec.failures(dest))
	}
	t.Logf("recovery: %d dispatch retries, %d release retries, %d releases given up, %d orphaned batches re-dispatched",
		p.logs.count("dispatch failed; retrying the tenant later"), p.logs.count("release lease failed; retrying"),
		p.logs.count("release lease failed; it expires by itself"), p.logs.count("re-dispatched an orphaned batch"))
}

// waitApplied waits until every destination applied at least n events.
func (p *pipe) waitApplied(what string, n int64) {
	p.t.Helper()
	testenv.Eventually(p.t, waitLimit, what, func() error {
		for _, d := range p.Dests {
			if got := p.rec.appliedCount(d); got < n {
				return fmt.Errorf("%s applied %d events, want %d", d, got, n)
			}
		}
		return nil
	})
}

func seqsOf(s []sentEvent) []uint64 {
	out := make([]uint64, len(s))
	for i, e := range s {
		out[i] = e.seq
	}
	return out
}

// waitCaughtUp waits until each of dests applied every one of seqs that
// belongs to one of its tenants.
func (p *pipe) waitCaughtUp(what string, seqs []uint64, dests ...string) {
	p.t.Helper()
	bySeq := map[uint64]string{}
	for _, s := range p.sentSeqs() {
		bySeq[s.seq] = s.ev.Tenant
	}
	for _, dest := range dests {
		var mine []uint64
		for _, s := range seqs {
			if p.hasDest(bySeq[s], dest) {
				mine = append(mine, s)
			}
		}
		testenv.Eventually(p.t, waitLimit, what+": "+dest, func() error {
			if _, ok := p.rec.caughtUp(dest, mine); !ok {
				return errors.New(dest + " has not applied them all")
			}
			return nil
		})
	}
}
