package kills_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/jackc/pgx/v5"
)

// Knobs: FAIRWAY_CHAOS_KILLS (default 20) and FAIRWAY_CHAOS_INTERVAL, the
// mean time between kills (default 2s, each gap drawn from ±50% of it).
const (
	killsDefault    = 20
	intervalDefault = 2 * time.Second
	// drainMax bounds the wait for the pipeline to settle after the last
	// kill when the test has no deadline of its own.
	drainMax = 15 * time.Minute
	// replayEvery: a replay of a random tenant and destination starts
	// once every this many kills.
	replayEvery = 4
)

// TestProcessKills runs the real binaries as separate processes — 1 ingest,
// 2 dispatchers, 2 sinks for each of postgres, clickhouse and b2b:erp —
// while 20 tenants post events (two of them floods whose backlogs
// interleave: traffic_test.go), SIGKILLs a random dispatcher or sink every
// few seconds and restarts it, starts a replay of a random tenant and
// destination every replayEvery kills (in its own lane, beside the
// tenant's live events), and then accounts for every event ingest
// acknowledged: applied in every destination (newest version per product,
// so a replay never put an older one back; every event in ClickHouse's
// log) or dead-lettered, every replay through, no slot held, no orphaned
// batch or pending work, and at no sample more live leases than a pair's
// limit or its replay's slots.
func TestProcessKills(t *testing.T) {
	t.Parallel()
	kills := envInt(t, "FAIRWAY_CHAOS_KILLS", killsDefault)
	interval := envDuration(t, "FAIRWAY_CHAOS_INTERVAL", intervalDefault)

	c := startCluster(t)
	obs := c.observeSlots(100 * time.Millisecond)
	t.Cleanup(func() { obs.finish() })
	tr := c.startTraffic()
	t.Cleanup(tr.stopTraffic)
	started := time.Now()
	testenv.Eventually(t, 5*time.Minute, "ingest to acknowledge the first 100 events", func() error {
		if n := tr.ledger.size(); n < 100 {
			return fmt.Errorf("%d acknowledged", n)
		}
		return nil
	})

	victims := append(append([]*proc(nil), c.dispatchers...), c.sinks...)
	killed := map[string]int{}
	var takeovers []time.Duration
	replays := 0
	var lastKill time.Time
	for i := range kills {
		if i%replayEvery == replayEvery/2 && c.startReplay() {
			replays++
		}
		time.Sleep(time.Duration(float64(interval) * (0.5 + rand.Float64())))
		p := victims[rand.IntN(len(victims))]
		holder := p.name + "-" + strconv.Itoa(p.starts)
		lastKill = time.Now()
		p.kill()
		killed[p.name]++
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(c.dispatchers, p) {
			takeovers = append(takeovers, c.takeover(t, holder, lastKill))
		}
		if _, err := p.waitListening(startTimeout); err != nil {
			t.Fatalf("after kill %d: %v", i+1, err)
		}
	}
	tr.stopTraffic()
	trafficTime := time.Since(started)

	// Drain: wait until every destination agrees with the ledger and
	// nothing is in flight. Only the deadline of the test bounds it.
	deadline := time.Now().Add(drainMax)
	if d, ok := t.Deadline(); ok && time.Until(d)-time.Minute < drainMax {
		deadline = d.Add(-time.Minute)
	}
	var rep *report
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		rep = c.account(ctx, tr.ledger, false)
		cancel()
		if len(rep.problems) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	drained := time.Since(lastKill)
	settled := len(rep.problems) == 0
	if settled {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		rep = c.account(ctx, tr.ledger, true)
		cancel()
	}
	slots := obs.finish()

	for _, p := range rep.problems {
		t.Error(p)
	}
	if rep.more > 0 {
		t.Errorf("… and %d more problems", rep.more)
	}
	if !settled {
		t.Errorf("the pipeline did not settle within %s after the last kill", drained.Round(time.Second))
	}
	tr.ledger.mu.Lock()
	for _, f := range tr.ledger.failures {
		t.Error(f)
	}
	requests, retries := tr.ledger.requests, tr.ledger.retries
	tr.ledger.mu.Unlock()
	for _, p := range c.procs() {
		for _, pr := range p.problems() {
			t.Error(pr)
		}
	}
	if slots.maxOver > 0 {
		t.Errorf("Limit invariant broken: %s", slots.worst)
	}
	if slots.samples < 10 {
		t.Errorf("the slot observer took only %d samples (%d errors, last: %s)", slots.samples, slots.errors, slots.lastError)
	}

	t.Logf("kills survived: %d SIGKILLs (%s), each process restarted at once; traffic ran %s; %d replays started meanwhile",
		kills, formatCounts(killed), trafficTime.Round(time.Second), replays)
	t.Logf("events accepted by ingest: %d in %d requests (%d re-sent); dead letters: %d (%s)",
		rep.accepted, requests, retries, rep.deadLetters, formatCounts(rep.deadLettered))
	lost := map[string]int{}
	for d, ks := range rep.lost {
		lost[d] = len(ks)
	}
	t.Logf("events checked per destination (applied or superseded by a newer version): %s; lost: %d (%s)",
		formatCounts(rep.checked), sum(lost), formatCounts(lost))
	t.Logf("ClickHouse product_events: %d rows without FINAL, %d of them duplicates not merged yet",
		rep.chRawRows, rep.chDupRows)
	t.Logf("B2B: %d accepted events posted at least once, %d duplicate deliveries (%d idempotency keys accepted twice or more), %d older versions coalesced into a newer one within a batch",
		rep.b2bDelivered, rep.b2bDuplicates, rep.b2bDupKeys, rep.b2bCoalesced)
	t.Logf("dispatch: %d batches logged, %d ranges re-dispatched after a crash", rep.batches, rep.redispatched)
	t.Logf("slots: %d samples (%d failed), max over limit %d, max in use %d (limit %d), samples with a pair at its limit %d",
		slots.samples, slots.errors, slots.maxOver, slots.maxInUse, maxSlots, slots.atLimit)
	t.Logf("time to drain after the last kill: %s", drained.Round(100*time.Millisecond))
	slices.Sort(takeovers)
	t.Logf("partitions of a killed dispatcher taken over after (heartbeat %s): %v", heartbeat, takeovers)
}

// takeover waits until another dispatcher alive reads every partition the
// killed dispatcher holder read, and returns how long after killed that
// was. Over 3 heartbeats is an error, with 3 s more for the new owner to
// beat, move the partitions and record them: the whole suite, under
// -race, loads the machine, and a statement or a goroutine may wait a
// second or two. A takeover that waits for anything but heartbeats (a
// poll, a lease) takes far longer.
func (c *cluster) takeover(t *testing.T, holder string, killed time.Time) time.Duration {
	t.Helper()
	limit := 3*heartbeat + 3*time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 3*limit)
	defer cancel()
	var parts []int32
	if err := c.pool.QueryRow(ctx, `SELECT coalesce(partitions, '{}') FROM fairway.dispatchers WHERE holder = $1`, holder).Scan(&parts); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return 0 // killed before its first heartbeat: it read nothing
		}
		t.Fatalf("partitions of %s: %v", holder, err)
	}
	for {
		var left int
		err := c.pool.QueryRow(ctx, `
SELECT count(*) FROM unnest($1::int[]) p
WHERE NOT EXISTS (SELECT 1 FROM fairway.dispatchers d
                  WHERE d.holder <> $2 AND d.seen_at >= now() - $3::interval AND p = ANY (d.partitions))`,
			parts, holder, 2*heartbeat).Scan(&left)
		took := time.Since(killed)
		switch {
		case err != nil:
			t.Errorf("partitions of the killed %s: %v", holder, err)
			return took
		case left == 0:
			if took > limit {
				t.Errorf("the partitions %v of the killed %s were taken over after %s, want within %s (3 heartbeats and the recording)", parts, holder, took.Round(10*time.Millisecond), limit)
			}
			return took.Round(10 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startReplay replays a random tenant's events to a random destination
// from its first, with two slots of its own, at the dispatchers' rate,
// and reports whether one started (not when nothing was dispatched there
// yet).
func (c *cluster) startReplay() bool {
	c.t.Helper()
	st, err := tenancy.New(c.pool, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	tenant, dest := c.tenants[rand.IntN(len(c.tenants))], dests[rand.IntN(len(dests))]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = st.Rewind(ctx, tenancy.Rewind{Tenant: tenant, Dest: dest, From: 1, Slots: 2})
	switch {
	case errors.Is(err, tenancy.ErrInvalidArgument), errors.Is(err, tenancy.ErrUnknownTenant):
		return false // nothing dispatched there yet
	case err != nil:
		c.t.Fatalf("replay %s/%s: %v", tenant, dest, err)
	}
	c.t.Logf("replaying %s/%s", tenant, dest)
	return true
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func formatCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a count", name, v)
	}
	return n
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a duration", name, v)
	}
	return d
}
