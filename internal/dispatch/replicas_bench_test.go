package dispatch_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Helpers for running several dispatchers in one benchmark, as several
// dispatcher processes would run (issue #4: "adding a replica raises
// throughput"), and for checking afterwards that they dispatched every
// event exactly once.

// benchDispatchers is FAIRWAY_BENCH_DISPATCHERS (default 1): how many
// dispatchers a benchmark runs side by side.
func benchDispatchers(tb testing.TB) int { return testenv.EnvInt(tb, "FAIRWAY_BENCH_DISPATCHERS", 1) }

// replicas are dispatchers that share nothing but the servers: each has
// its own NATS connections (main and doorbell), its own PostgreSQL pool and
// tenancy store, its own metrics registry and its own Holder, as separate
// processes would. They do share this process's CPU, scheduler and garbage
// collector, and the embedded nats-server.
type replicas struct {
	ds     []*dispatch.Dispatcher
	regs   []*prometheus.Registry
	stores []*tenancy.Store
}

// newReplicas builds n dispatchers from cfg; replica i is Holder
// "<cfg.Holder>-<i>" (cfg.Holder alone when n is 1).
func (e *benchEnv) newReplicas(n int, cfg dispatch.Config) *replicas {
	e.tb.Helper()
	r := &replicas{}
	for i := range n {
		c := cfg
		if n > 1 {
			c.Holder = fmt.Sprintf("%s-%d", cfg.Holder, i)
		}
		reg := prometheus.NewRegistry()
		st := e.store("dispatcher")
		r.stores = append(r.stores, st)
		d, err := dispatch.New(dispatch.Deps{Store: st, NATS: e.conn(fmt.Sprintf("dispatcher-%d", i)),
			Doorbell: e.conn(fmt.Sprintf("dispatcher-%d-doorbell", i)), Registry: reg}, &c)
		if err != nil {
			e.tb.Fatal(err)
		}
		r.ds, r.regs = append(r.ds, d), append(r.regs, reg)
	}
	return r
}

// start runs replicas from, from+1, … on wg until ctx ends (a caller that
// runs the first one itself passes from 1).
func (r *replicas) start(tb testing.TB, ctx context.Context, wg *sync.WaitGroup, from int) {
	for _, d := range r.ds[from:] {
		wg.Go(func() {
			if err := d.Run(ctx); err != nil {
				tb.Errorf("dispatcher: %v", err)
			}
		})
	}
}

// sum adds up a metric's values over the replicas: a counter's value, or a
// histogram's sum of observations (with count, to average).
func (r *replicas) sum(tb testing.TB, name string) (value float64, count uint64) {
	tb.Helper()
	for _, reg := range r.regs {
		mfs, err := reg.Gather()
		if err != nil {
			tb.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				if h := m.GetHistogram(); h != nil {
					value += h.GetSampleSum()
					count += h.GetSampleCount()
					continue
				}
				value += m.GetCounter().GetValue()
				count++
			}
		}
	}
	return value, count
}

// bySource adds up fairway_dispatcher_grants_total over the replicas, by
// its source label (index, feed, dense, read).
func (r *replicas) bySource(tb testing.TB) map[string]float64 {
	tb.Helper()
	gs := make([]prometheus.Gatherer, len(r.regs))
	for i, reg := range r.regs {
		gs[i] = reg
	}
	return testenv.CounterBy(tb, "fairway_dispatcher_grants_total", "source", gs...)
}

// itemRecorder keeps every work item published on work.<dest>.>, once per
// publish (a publish retried with the same Msg-Id is one item, as WORK
// stores it once).
type itemRecorder struct {
	mu    sync.Mutex
	seen  map[string]bool
	items []work.Item
	errs  int
}

// add records it, or a message that did not decode (err).
func (r *itemRecorder) add(it work.Item, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs++
		return
	}
	id := it.MsgID() + "/" + strconv.FormatInt(it.Token, 10)
	if r.seen[id] {
		return
	}
	r.seen[id] = true
	it.Bodies = nil // the ranges are checked; the bodies would pin their messages
	r.items = append(r.items, it)
}

func (r *itemRecorder) snapshot() []work.Item {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]work.Item(nil), r.items...)
}

// tenantSeqs reads every sequence of PRODUCTS (headers only, one ordered
// consumer) and returns them per tenant.
func (e *benchEnv) tenantSeqs() map[string][]uint64 {
	e.tb.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Minute)
	defer cancel()
	js := e.js(e.conn("seqs"))
	st, err := js.Stream(ctx, events.StreamName)
	if err != nil {
		e.tb.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		e.tb.Fatal(err)
	}
	out := map[string][]uint64{}
	if info.State.Msgs == 0 {
		return out
	}
	cons, err := js.OrderedConsumer(ctx, events.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{events.SubjectWildcard}, HeadersOnly: true})
	if err != nil {
		e.tb.Fatal(err)
	}
	it, err := cons.Messages()
	if err != nil {
		e.tb.Fatal(err)
	}
	defer it.Stop()
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			e.tb.Fatalf("reading PRODUCTS' sequences: %v", err)
		}
		md, err := m.Metadata()
		if err != nil {
			e.tb.Fatal(err)
		}
		tenant, _, _, err := events.ParseSubject(m.Subject())
		if err != nil {
			e.tb.Fatal(err)
		}
		out[tenant] = append(out[tenant], md.Sequence.Stream)
		if md.Sequence.Stream >= info.State.LastSeq {
			return out
		}
	}
}

// checkReplicas checks, after a run, that the work items rec saw cover
// every event of PRODUCTS exactly once (checkExactlyOnce: no range twice,
// no overlap, nothing missing; one destination) and that the batch log in
// PostgreSQL agrees. It returns how many batches each holder logged.
func (e *benchEnv) checkReplicas(rec *itemRecorder) map[string]int {
	e.tb.Helper()
	items := rec.snapshot()
	if rec.errs > 0 {
		e.tb.Errorf("%d work items did not decode", rec.errs)
	}
	checkExactlyOnce(e.tb, items, e.tenantSeqs(), false)
	pool, err := pgxpool.New(e.ctx, e.dsn)
	if err != nil {
		e.tb.Fatal(err)
	}
	defer pool.Close()
	var logged, distinct int
	if err := pool.QueryRow(e.ctx, `SELECT count(*), count(DISTINCT (tenant, dest, from_seq, to_seq)) FROM fairway.batches`).Scan(&logged, &distinct); err != nil {
		e.tb.Fatal(err)
	}
	if logged != len(items) || distinct != logged {
		e.tb.Errorf("batch log: %d batches, %d distinct ranges; %d work items published", logged, distinct, len(items))
	}
	rows, err := pool.Query(e.ctx, `SELECT holder, count(*) FROM fairway.batches GROUP BY holder ORDER BY holder`)
	if err != nil {
		e.tb.Fatal(err)
	}
	defer rows.Close()
	byHolder := map[string]int{}
	for rows.Next() {
		var h string
		var n int
		if err := rows.Scan(&h, &n); err != nil {
			e.tb.Fatal(err)
		}
		byHolder[h] = n
	}
	if err := rows.Err(); err != nil {
		e.tb.Fatal(err)
	}
	return byHolder
}

// cpuTimes is the machine's CPU time so far (/proc/stat, all cores, in
// clock ticks): busy (user, nice, system, irq, softirq, steal) and total.
type cpuTimes struct{ busy, total uint64 }

func readCPU(tb testing.TB) cpuTimes {
	tb.Helper()
	c, err := procStat()
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func procStat() (cpuTimes, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuTimes{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 9 || fields[0] != "cpu" {
			continue
		}
		var c cpuTimes
		for i, s := range fields[1:9] { // user nice system idle iowait irq softirq steal
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return cpuTimes{}, fmt.Errorf("/proc/stat: %w", err)
			}
			c.total += v
			if i != 3 && i != 4 {
				c.busy += v
			}
		}
		return c, nil
	}
	return cpuTimes{}, fmt.Errorf("/proc/stat: no cpu line")
}

// cpuUntil measures the machine's busy CPU share from now until done is
// closed; the function it returns reports it (0 if done was not closed).
func cpuUntil(tb testing.TB, done <-chan struct{}) func() float64 {
	start := readCPU(tb)
	return atDone(done, func() float64 {
		end, err := procStat()
		if err != nil {
			return 0
		}
		return start.busyPct(end)
	}, 0)
}

// atDone runs measure as soon as done is closed (in a goroutine started
// now) and returns what yields its result: once done is closed, measure's
// value; before, notYet.
func atDone[T any](done <-chan struct{}, measure func() T, notYet T) func() T {
	var v T
	measured := make(chan struct{})
	go func() {
		defer close(measured)
		<-done
		v = measure()
	}()
	return func() T {
		select {
		case <-done:
			<-measured
			return v
		default:
			return notYet
		}
	}
}

// busyPct is the share of the machine's CPU time (all cores) that was busy
// between c and later, in percent.
func (c cpuTimes) busyPct(later cpuTimes) float64 {
	if later.total <= c.total {
		return 0
	}
	return 100 * float64(later.busy-c.busy) / float64(later.total-c.total)
}
