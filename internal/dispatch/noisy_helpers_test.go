package dispatch_test

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fairwayhq/fairway/internal/dispatch/scheduler"
	"github.com/fairwayhq/fairway/internal/migrate"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/testenv/benchload"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
)

// Helpers of the benchmarks in noisy_bench_test.go. Unlike setup, a
// benchEnv is closed by the benchmark itself, so that two runs in one
// benchmark (fairway, then the FIFO baseline) never share a server.

// benchEnv is one fresh JetStream server (testenv.BenchNATS: in a process
// of its own unless FAIRWAY_BENCH_NATS=embedded) with PRODUCTS (and WORK),
// plus, when asked, a fresh migrated PostgreSQL database. Each component
// (publishers, dispatcher, sinks, observers) gets its own connection and
// pool, as separate processes would.
type benchEnv struct {
	tb    testing.TB
	ctx   context.Context
	url   string
	nats  *testenv.NATSChild // nil: the server is embedded
	stop  func()             // stops the server
	dsn   string
	mu    sync.Mutex
	conns []*nats.Conn
	pools []*pgxpool.Pool
}

func newBenchEnv(tb testing.TB, ctx context.Context, withPG bool) *benchEnv {
	tb.Helper()
	e := &benchEnv{tb: tb, ctx: ctx}
	if withPG {
		e.dsn = testenv.NewDatabase(tb)
		if _, err := migrate.Up(ctx, e.dsn); err != nil {
			tb.Fatalf("migrate: %v", err)
		}
	}
	e.url, e.nats, e.stop = testenv.BenchNATS(tb)
	js := e.js(e.conn("admin"))
	if _, err := events.EnsureStream(ctx, js, events.StreamConfig{}); err != nil {
		tb.Fatal(err)
	}
	if withPG {
		// FAIRWAY_BENCH_WORK_STORAGE=memory measures WORK in memory, the
		// dispatcher's --work-storage memory (file by default).
		if _, err := work.EnsureStream(ctx, js, work.StreamConfig{Storage: os.Getenv("FAIRWAY_BENCH_WORK_STORAGE")}); err != nil {
			tb.Fatal(err)
		}
	}
	return e
}

// conn opens a new client connection, closed by close.
func (e *benchEnv) conn(name string) *nats.Conn {
	e.tb.Helper()
	nc, err := nats.Connect(e.url, nats.Name(name))
	if err != nil {
		e.tb.Fatalf("connect %s: %v", name, err)
	}
	e.mu.Lock()
	e.conns = append(e.conns, nc)
	e.mu.Unlock()
	return nc
}

func (e *benchEnv) js(nc *nats.Conn) jetstream.JetStream {
	e.tb.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		e.tb.Fatal(err)
	}
	return js
}

// store opens a new pool (pgxpool defaults, as cmd/dispatcher and
// cmd/sinks do) and a Store on it. Its connections carry role as their
// application_name, so that cpuSplit can tell whose statements
// PostgreSQL's CPU went to.
func (e *benchEnv) store(role string) *tenancy.Store {
	e.tb.Helper()
	pc, err := pgxpool.ParseConfig(e.dsn)
	if err != nil {
		e.tb.Fatal(err)
	}
	pc.ConnConfig.RuntimeParams["application_name"] = "bench-" + role
	pool, err := pgxpool.NewWithConfig(e.ctx, pc)
	if err != nil {
		e.tb.Fatal(err)
	}
	e.mu.Lock()
	e.pools = append(e.pools, pool)
	e.mu.Unlock()
	st, err := tenancy.New(pool, &tenancy.Config{LeaseTTL: time.Minute})
	if err != nil {
		e.tb.Fatal(err)
	}
	return st
}

// close closes every connection and pool and stops the server, so the
// next phase of a benchmark does not share the machine with it.
func (e *benchEnv) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, nc := range e.conns {
		nc.Close()
	}
	for _, p := range e.pools {
		p.Close()
	}
	e.conns, e.pools = nil, nil
	e.stop()
}

// publishBulk publishes n events with publishers goroutines, each with its
// own connection and events.Publisher; tenantOf(i) names event i's tenant.
func (e *benchEnv) publishBulk(n, publishers int, tenantOf func(i int) string) {
	e.tb.Helper()
	if _, _, err := benchload.Publish(e.ctx, e.bulkPublishers(publishers), n, tenantOf); err != nil {
		e.tb.Fatalf("publish: %v", err)
	}
}

// bulkPublishers returns n publishers, each on a connection of its own.
func (e *benchEnv) bulkPublishers(n int) []*events.Publisher {
	e.tb.Helper()
	pubs := make([]*events.Publisher, n)
	for p := range pubs {
		pub, err := events.NewPublisher(e.js(e.conn(fmt.Sprintf("bulk-%d", p))))
		if err != nil {
			e.tb.Fatal(err)
		}
		pubs[p] = pub
	}
	return pubs
}

// pubRec is one small-tenant event: its PRODUCTS sequence and when its
// publish began.
type pubRec struct {
	seq uint64
	at  time.Time
	ack time.Duration // publish → JetStream's acknowledgement
}

// trickle publishes perSec events per second for each tenant from start
// until start+d, each tenant on its own schedule with a random phase, and
// records every event's sequence and publish time.
type trickle struct {
	mu   sync.Mutex
	pubs map[string][]pubRec
	errs atomic.Int64
	late atomic.Int64 // publishes that began more than 50ms after their slot
	done chan struct{}
}

func startTrickle(ctx context.Context, pub *events.Publisher, tenants []string, perSec float64, start time.Time, d time.Duration) *trickle {
	tr := &trickle{pubs: map[string][]pubRec{}, done: make(chan struct{})}
	every := time.Duration(float64(time.Second) / perSec)
	var wg sync.WaitGroup
	for _, tenant := range tenants {
		phase := rand.N(every)
		wg.Go(func() {
			var recs []pubRec
			for k := 0; ; k++ {
				due := start.Add(phase + time.Duration(k)*every)
				if due.Sub(start) >= d {
					break
				}
				if w := time.Until(due); w > 0 {
					select {
					case <-ctx.Done():
						return
					case <-time.After(w):
					}
				}
				at := time.Now()
				if at.Sub(due) > 50*time.Millisecond {
					tr.late.Add(1)
				}
				r := pub.PublishOne(ctx, benchload.Event(tenant))
				if r.Err != nil {
					tr.errs.Add(1)
					continue
				}
				recs = append(recs, pubRec{r.Seq, at, time.Since(at)})
			}
			tr.mu.Lock()
			tr.pubs[tenant] = recs
			tr.mu.Unlock()
		})
	}
	go func() { wg.Wait(); close(tr.done) }()
	return tr
}

func (tr *trickle) count() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, rs := range tr.pubs {
		n += len(rs)
	}
	return n
}

// seen is a work item as an observer or a sink worker saw it, and when.
type seen struct {
	from, to uint64
	count    int
	at       time.Time
}

// itemLog records, per tenant, work items in the order they were seen.
type itemLog struct {
	mu    sync.Mutex
	items map[string][]seen
}

func newItemLog() *itemLog { return &itemLog{items: map[string][]seen{}} }

func (l *itemLog) add(it work.Item, at time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.items[it.Tenant] = append(l.items[it.Tenant], seen{it.FromSeq, it.ToSeq, it.Count, at})
	return len(l.items)
}

func (l *itemLog) tenants() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.items)
}

// events counts the events of every item seen.
func (l *itemLog) events() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := 0
	for _, s := range l.items {
		for _, it := range s {
			c += it.count
		}
	}
	return c
}

// countAtLeast counts tenants with at least n items.
func (l *itemLog) countAtLeast(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := 0
	for _, s := range l.items {
		if len(s) >= n {
			c++
		}
	}
	return c
}

// when returns when the first item covering seq of tenant was seen.
func (l *itemLog) when(tenant string, seq uint64) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.items[tenant] {
		if s.from <= seq && seq <= s.to {
			return s.at, true
		}
	}
	return time.Time{}, false
}

// observeWork watches every work item published on work.<dest>.> as it
// appears (a core subscription: it sees each publish, not the stored copy):
// the log gets the items of the tenants keep takes, with when they were
// seen; the recorder every item once (checkReplicas).
func (e *benchEnv) observeWork(dest string, keep func(tenant string) bool) (*itemLog, *itemRecorder) {
	e.tb.Helper()
	l, rec := newItemLog(), &itemRecorder{seen: map[string]bool{}}
	e.observe(work.FilterSubject(dest), func(it work.Item, at time.Time, err error) {
		rec.add(it, err)
		if err == nil && keep(it.Tenant) {
			l.add(it, at)
		}
	})
	return l, rec
}

// observeTenants is observeWork for the items of tenants only: the
// floods' items, which carry their events' bodies, are not delivered to
// the observer too, a cost the pipeline itself does not have.
func (e *benchEnv) observeTenants(dest string, tenants []string) *itemLog {
	e.tb.Helper()
	l := newItemLog()
	for _, t := range tenants {
		e.observe(work.Subject(dest, t), func(it work.Item, at time.Time, err error) {
			if err == nil {
				l.add(it, at)
			}
		})
	}
	return l
}

// observe calls seen for every work item published on subject, as it
// appears.
func (e *benchEnv) observe(subject string, seen func(it work.Item, at time.Time, err error)) {
	e.tb.Helper()
	nc := e.conn("observer")
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		at := time.Now()
		it, err := work.Decode(m.Data)
		seen(it, at, err)
	})
	if err != nil {
		e.tb.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		e.tb.Fatal(err)
	}
}

// applyCost is the simulated apply time of a batch of n events: a round
// trip plus a per-row cost, like a PostgreSQL upsert (DESIGN.md: ~50k
// rows/s per writer, i.e. 20µs a row).
func applyCost(n int) time.Duration { return time.Millisecond + time.Duration(n)*20*time.Microsecond }

// drain tracks the noisy tenant's backlog being applied: done closes when
// noisyN noisy events have been applied; smallAtDone is how many
// small-tenant events had been applied by then.
type drain struct {
	noisyN      int64
	noisy       atomic.Int64
	small       atomic.Int64
	once        sync.Once
	done        chan struct{}
	doneAt      time.Time
	smallAtDone int64
}

func newDrain(noisyN int) *drain { return &drain{noisyN: int64(noisyN), done: make(chan struct{})} }

func (d *drain) applied(noisy, small int) {
	d.small.Add(int64(small))
	if noisy > 0 && d.noisy.Add(int64(noisy)) >= d.noisyN {
		d.once.Do(func() {
			d.doneAt = time.Now()
			d.smallAtDone = d.small.Load()
			close(d.done)
		})
	}
}

// fakeSink consumes WORK with a fixed pool of workers. Each worker fetches
// one item, reads its events from PRODUCTS (what the real runner does
// before Apply), decodes them, holds for applyCost(Count), releases the
// lease and acks. takes logs when a worker took each small tenant's items.
type fakeSink struct {
	rec     *itemRecorder // every item, once
	takes   *itemLog
	applied *itemLog // when a worker applied each small tenant's items
	d       *drain
	ranges  sync.Map // msg id without token -> true: re-dispatches are not counted twice
	errs    atomic.Int64
	carried atomic.Int64 // events the items carried (work.Item.Bodies): no read
	bare    atomic.Int64 // events read without headers (work.Stored.Bare)
	hdrs    atomic.Int64 // events read with headers
	stop    func()
}

func (e *benchEnv) startFakeSink(dest string, workers int, st *tenancy.Store, noisy func(tenant string) bool, d *drain) *fakeSink {
	e.tb.Helper()
	nc := e.conn("sink")
	js := e.js(nc)
	rd := work.NewReader(nc, events.StreamName)
	cons, err := js.CreateOrUpdateConsumer(e.ctx, work.StreamName, jetstream.ConsumerConfig{
		Durable: "sink-" + dest, FilterSubject: work.FilterSubject(dest),
		AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 10_000, AckWait: time.Minute,
	})
	if err != nil {
		e.tb.Fatal(err)
	}
	s := &fakeSink{rec: &itemRecorder{seen: map[string]bool{}}, takes: newItemLog(), applied: newItemLog(), d: d}
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				batch, err := cons.Fetch(1, jetstream.FetchMaxWait(200*time.Millisecond))
				if err != nil {
					continue
				}
				for m := range batch.Messages() {
					s.apply(ctx, m, st, rd, noisy)
				}
			}
		})
	}
	s.stop = func() { cancel(); wg.Wait() }
	return s
}

func (s *fakeSink) apply(ctx context.Context, m jetstream.Msg, st *tenancy.Store, rd *work.Reader, noisy func(string) bool) {
	at := time.Now()
	it, err := work.Decode(m.Data())
	s.rec.add(it, err)
	if err != nil {
		s.errs.Add(1)
		_ = m.Term()
		return
	}
	if !noisy(it.Tenant) {
		s.takes.add(it, at)
	}
	var data [][]byte
	if it.Bodies != nil { // as the runner does: no read
		for _, b := range it.Bodies {
			data = append(data, b.Data)
		}
		s.carried.Add(int64(len(data)))
	} else {
		stored, err := rd.ReadItem(ctx, it) // as the runner reads
		if err != nil || len(stored) != it.Count {
			s.errs.Add(1)
		}
		if len(stored) > 0 && stored[0].Bare {
			s.bare.Add(int64(len(stored)))
		} else {
			s.hdrs.Add(int64(len(stored)))
		}
		for _, st := range stored {
			data = append(data, st.Data)
		}
	}
	for _, d := range data {
		if _, err := events.Decode(d); err != nil {
			s.errs.Add(1)
		}
	}
	time.Sleep(applyCost(it.Count))
	if !noisy(it.Tenant) {
		s.applied.add(it, time.Now())
	}
	if err := st.Release(context.WithoutCancel(ctx), it.LeaseID, it.Token); err != nil && !isStale(err) {
		s.errs.Add(1)
	}
	_ = m.Ack()
	key := fmt.Sprintf("%s/%d-%d", it.Tenant, it.FromSeq, it.ToSeq)
	if _, dup := s.ranges.LoadOrStore(key, true); dup {
		return
	}
	if noisy(it.Tenant) {
		s.d.applied(it.Count, 0)
	} else {
		s.d.applied(0, it.Count)
	}
}

// fifoPool is the baseline: one durable pull consumer on the whole stream shared
// by a pool of workers, no dispatcher, no slots. Each worker fetches up to
// batch events, decodes them, holds for applyCost(n) and acks each message
// (AckExplicit: a shared pool must not ack other workers' messages).
// takes records when a worker took each small-tenant event, by sequence.
type fifoPool struct {
	mu      sync.Mutex
	takes   map[uint64]time.Time
	applied map[uint64]time.Time
	errs    atomic.Int64
	stop    func()
}

func (e *benchEnv) startFIFO(workers, batch int, noisy func(tenant string) bool, d *drain) *fifoPool {
	e.tb.Helper()
	js := e.js(e.conn("fifo"))
	cons, err := js.CreateOrUpdateConsumer(e.ctx, events.StreamName, jetstream.ConsumerConfig{
		// No subject filter, as the doorbell: the stream holds only events,
		// and a filter costs the server more the more tenants there are.
		Durable: "fifo", DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 2 * workers * batch, AckWait: time.Minute,
	})
	if err != nil {
		e.tb.Fatal(err)
	}
	f := &fifoPool{takes: map[uint64]time.Time{}, applied: map[uint64]time.Time{}}
	ctx, cancel := context.WithCancel(e.ctx)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			msgs := make([]jetstream.Msg, 0, batch)
			type take struct {
				seq uint64
				at  time.Time
			}
			var takes []take
			for ctx.Err() == nil {
				b, err := cons.Fetch(batch, jetstream.FetchMaxWait(100*time.Millisecond))
				if err != nil {
					continue
				}
				msgs, takes = msgs[:0], takes[:0]
				noisyN, smallN := 0, 0
				for m := range b.Messages() {
					at := time.Now()
					msgs = append(msgs, m)
					ev, err := events.Decode(m.Data())
					if err != nil {
						f.errs.Add(1)
						continue
					}
					if noisy(ev.Tenant) {
						noisyN++
						continue
					}
					smallN++
					md, err := m.Metadata()
					if err != nil {
						f.errs.Add(1)
						continue
					}
					takes = append(takes, take{md.Sequence.Stream, at})
				}
				if len(msgs) == 0 {
					continue
				}
				if len(takes) > 0 {
					f.mu.Lock()
					for _, t := range takes {
						f.takes[t.seq] = t.at
					}
					f.mu.Unlock()
				}
				time.Sleep(applyCost(len(msgs)))
				if len(takes) > 0 {
					done := time.Now()
					f.mu.Lock()
					for _, t := range takes {
						f.applied[t.seq] = done
					}
					f.mu.Unlock()
				}
				for _, m := range msgs {
					_ = m.Ack()
				}
				d.applied(noisyN, smallN)
			}
		})
	}
	f.stop = func() { cancel(); wg.Wait() }
	return f
}

// latencies returns, for every event tr published before until, the time
// from its publish to when (seen) it was dispatched or taken. missing
// counts events never seen; they count as seen at deadline.
func latencies(tr *trickle, until, deadline time.Time, when func(tenant string, seq uint64) (time.Time, bool)) (ds []time.Duration, missing int) {
	for _, s := range samples(tr, until, deadline, when) {
		ds = append(ds, s.lat)
		if !s.seen {
			missing++
		}
	}
	slices.Sort(ds)
	return ds, missing
}

// sample is one small-tenant event of a latency sample: its tenant, when
// its publish began, its latency, and whether it was seen at all.
type sample struct {
	tenant string
	seq    uint64
	at     time.Time
	lat    time.Duration
	seen   bool
	ack    time.Duration // of the publish
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// hopLog records when the dispatcher's doorbell rang for each event
// (Dispatcher.SetOnBell) and when the grant that dispatched it began and
// committed (SetBeforeDispatch, SetAfterCommit), for the tenants keep
// takes, so that a slow event's wait can be split into its hops:
// publish → doorbell → grant → commit → work item seen.
type hopLog struct {
	keep  func(tenant string) bool
	mu    sync.Mutex
	bell  map[string]time.Time    // tenant + " " + seq
	grant map[string]time.Time    // tenant → its grant in progress began
	done  map[string][2]time.Time // tenant + " " + seq → grant began, committed
}

func newHopLog(keep func(tenant string) bool) *hopLog {
	return &hopLog{keep: keep, bell: map[string]time.Time{}, grant: map[string]time.Time{}, done: map[string][2]time.Time{}}
}

func hopKey(tenant string, seq uint64) string { return tenant + " " + strconv.FormatUint(seq, 10) }

func (h *hopLog) ring(tenant string, seq uint64) {
	if !h.keep(tenant) {
		return
	}
	at := time.Now()
	h.mu.Lock()
	h.bell[hopKey(tenant, seq)] = at
	h.mu.Unlock()
}

func (h *hopLog) before(g scheduler.Grant) {
	if !h.keep(g.Key.Tenant) {
		return
	}
	at := time.Now()
	h.mu.Lock()
	h.grant[g.Key.Tenant] = at
	h.mu.Unlock()
}

func (h *hopLog) commit(ls []tenancy.Lease) {
	if len(ls) == 0 || !h.keep(ls[0].Tenant) {
		return
	}
	at := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	began := h.grant[ls[0].Tenant]
	for _, l := range ls {
		for seq := l.FromSeq; seq <= l.ToSeq && seq < l.FromSeq+64; seq++ {
			h.done[hopKey(l.Tenant, seq)] = [2]time.Time{began, at}
		}
	}
}

// summary gives the p50 and p99 of each hop over the events tr published
// before until that were dispatched (publish → ack, ack → doorbell,
// doorbell → grant, grant → commit, commit → work item seen): where the
// small tenants' time goes as a whole, not only in the slowest events.
func (h *hopLog) summary(tr *trickle, until, deadline time.Time, when func(tenant string, seq uint64) (time.Time, bool)) string {
	names := []string{"ack", "ack → bell", "bell → grant", "grant → commit", "commit → item"}
	hops := make([][]time.Duration, len(names))
	h.mu.Lock()
	for _, s := range samples(tr, until, deadline, when) {
		k := hopKey(s.tenant, s.seq)
		bell, ok1 := h.bell[k]
		d, ok2 := h.done[k]
		if !s.seen || !ok1 || !ok2 || d[0].Before(bell) {
			continue // delivered by the start-up scan, or a grant that began before its bell
		}
		ack := s.at.Add(s.ack)
		for i, v := range []time.Duration{s.ack, bell.Sub(ack), d[0].Sub(bell), d[1].Sub(d[0]), s.at.Add(s.lat).Sub(d[1])} {
			hops[i] = append(hops[i], v)
		}
	}
	h.mu.Unlock()
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d events:", len(hops[0]))
	for i, n := range names {
		slices.Sort(hops[i])
		fmt.Fprintf(&sb, " %s p50 %.1f p99 %.1f ms;", n, testenv.Percentile(hops[i], 50), testenv.Percentile(hops[i], 99))
	}
	return sb.String()
}

// hops describes the hops of tenant's event seq published at pub.
func (h *hopLog) hops(tenant string, seq uint64, pub time.Time) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var sb strings.Builder
	k := hopKey(tenant, seq)
	if at, ok := h.bell[k]; ok {
		fmt.Fprintf(&sb, ", bell %.1fms", ms(at.Sub(pub)))
	} else {
		sb.WriteString(", no bell")
	}
	if d, ok := h.done[k]; ok {
		fmt.Fprintf(&sb, ", grant %.1fms, commit %.1fms", ms(d[0].Sub(pub)), ms(d[1].Sub(pub)))
	}
	return sb.String()
}

// samples are the events tr published before until with their latencies
// to when; one never seen counts as seen at deadline.
func samples(tr *trickle, until, deadline time.Time, when func(tenant string, seq uint64) (time.Time, bool)) []sample {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []sample
	for tenant, recs := range tr.pubs {
		for _, r := range recs {
			if !r.at.Before(until) {
				continue
			}
			at, ok := when(tenant, r.seq)
			if !ok {
				at = deadline
			}
			out = append(out, sample{tenant, r.seq, r.at, at.Sub(r.at), ok, r.ack})
		}
	}
	return out
}

// vmRSS is the process's resident set size in bytes (/proc/self/status).
func vmRSS(tb testing.TB) uint64 {
	tb.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return kb * 1024
		}
	}
	tb.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// liveHeap is the heap in use after a full GC.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// slowest describes the k slowest small-tenant events published before
// until: when each was published (after t0), its latency and tenant, its
// publish's ack time and, with hops, when its doorbell rang and its grant
// began and committed (after its publish), in publish order, so that a p99 can be traced to a moment
// of the drain and a hop.
func slowest(tr *trickle, t0, until, deadline time.Time, when func(tenant string, seq uint64) (time.Time, bool), hops *hopLog, k int) string {
	all := samples(tr, until, deadline, when)
	slices.SortFunc(all, func(a, b sample) int { return cmp.Compare(b.lat, a.lat) })
	all = all[:min(k, len(all))]
	slices.SortFunc(all, func(a, b sample) int { return a.at.Compare(b.at) })
	var sb strings.Builder
	for i, s := range all {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "+%.2fs %.1fms %s (ack %.1fms", s.at.Sub(t0).Seconds(), ms(s.lat), s.tenant, ms(s.ack))
		if hops != nil {
			sb.WriteString(hops.hops(s.tenant, s.seq, s.at))
		}
		sb.WriteString(")")
	}
	return sb.String()
}

// cpuSplit reads, from now until done is closed, the CPU time this
// process, the NATS server (when it runs in a process of its own) and
// PostgreSQL's processes used; the returned func reports it (after done).
func (e *benchEnv) cpuSplit(done <-chan struct{}) func() string {
	self := func() time.Duration { d, _, _ := testenv.ProcessCPU(os.Getpid()); return d }
	server := func() time.Duration {
		if e.nats == nil {
			return 0
		}
		d, _ := e.nats.CPU()
		return d
	}
	pg := testenv.CommandCPU("postgres")
	s0, n0, t0 := self(), server(), time.Now()
	return atDone(done, func() string {
		return fmt.Sprintf("CPU over %v: this process %v, NATS server %v, PostgreSQL %v (%s)",
			time.Since(t0).Round(time.Millisecond), (self() - s0).Round(10*time.Millisecond),
			(server() - n0).Round(10*time.Millisecond), testenv.CPUSince(pg, "postgres").Round(10*time.Millisecond),
			e.pgSplit(pg))
	}, "CPU: not drained")
}

// pgSplit says how the CPU PostgreSQL's processes used since before
// divides among its backends, by application_name (or backend type for
// its own processes), largest first.
func (e *benchEnv) pgSplit(before map[int]time.Duration) string {
	if e.dsn == "" {
		return "no database"
	}
	names := map[int]string{}
	conn, err := pgx.Connect(e.ctx, e.dsn)
	if err != nil {
		return err.Error()
	}
	defer conn.Close(e.ctx)
	rows, err := conn.Query(e.ctx, `SELECT pid, coalesce(nullif(application_name, ''), backend_type) FROM pg_stat_activity`)
	if err != nil {
		return err.Error()
	}
	for rows.Next() {
		var pid int32
		var name string
		if err := rows.Scan(&pid, &name); err != nil {
			return err.Error()
		}
		names[int(pid)] = name
	}
	if rows.Err() != nil {
		return rows.Err().Error()
	}
	by := map[string]time.Duration{}
	now := testenv.CommandCPU("postgres")
	for pid, used := range now {
		name := names[pid]
		if name == "" {
			name = "other"
		}
		by[name] += used - before[pid]
	}
	keys := slices.Collect(maps.Keys(by))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(by[b], by[a]) })
	var sb strings.Builder
	for _, k := range keys {
		if by[k] < 10*time.Millisecond {
			continue
		}
		if sb.Len() > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "%s %v", k, by[k].Round(10*time.Millisecond))
	}
	return sb.String()
}
