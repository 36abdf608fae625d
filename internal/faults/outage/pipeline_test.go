package outage_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dispatch"
	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/pipeline"
	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/testenv/pipelinetest"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/b2b"
)

// waitLimit bounds every wait for the pipeline to reach a state. It is
// long on purpose: on a slow, shared machine a wait takes longer, it does
// not fail.
const waitLimit = 4 * time.Minute

// pipeConfig says what to build.
type pipeConfig struct {
	// DSN is the PostgreSQL holding tenancy, partners and the postgres
	// sink's catalog. Default: a fresh database on the shared server.
	DSN string
	// CHProxy puts a tcpProxy between the ClickHouse sink and the server.
	CHProxy bool
	// Tenants publish; each goes to postgres, clickhouse and its partners.
	Tenants []string
	// Partners maps a partner name to the tenants that registered it; each
	// partner gets its own receiver.
	Partners map[string][]string
	// Reject picks, per partner, the events its receiver answers 422.
	Reject map[string]func(b2b.BodyEvent) bool
	// BeforeRun, if set, runs once the streams, tenants and sinks exist
	// and before the dispatcher starts (to publish a backlog it finds).
	BeforeRun func(*pipe)
}

// pipe is the whole pipeline in one process (pipelinetest), with what
// the test sent and what every sink applied.
type pipe struct {
	*pipelinetest.Pipeline
	t     *testing.T
	dlq   *dlq.Queue
	proxy *tcpProxy
	rec   *recorder
	logs  *logBuffer
	dests map[string][]string // tenant → destinations

	mu   sync.Mutex
	sent []sentEvent
	next map[string]int // tenant → events generated so far
}

type sentEvent struct {
	ev  events.Event
	seq uint64
}

func startPipeline(t *testing.T, cfg pipeConfig) *pipe {
	t.Helper()
	logs := newLogBuffer(t)
	// Registered before the pipeline's cleanup, so it runs after it: the
	// summary holds the lines of the shutdown too.
	t.Cleanup(logs.summary)
	p := &pipe{t: t, rec: newRecorder(), logs: logs, dests: map[string][]string{}, next: map[string]int{}}
	for _, tn := range cfg.Tenants {
		p.dests[tn] = []string{tenancy.DestPostgres, tenancy.DestClickHouse}
	}
	var partners []pipelinetest.Partner
	for _, name := range slices.Sorted(maps.Keys(cfg.Partners)) {
		partners = append(partners, pipelinetest.Partner{Name: name, Tenants: cfg.Partners[name], Reject: cfg.Reject[name]})
		for _, tn := range cfg.Partners[name] {
			p.dests[tn] = append(p.dests[tn], tenancy.DestB2BPrefix+name)
		}
	}
	hc := pipelinetest.Config{
		DSN: cfg.DSN,
		Pipeline: pipeline.Config{
			Logger:  slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
			Tenants: cfg.Tenants,
			// Production defaults everywhere: lease TTL, backoff, max
			// attempts, breaker, AckWait, FetchWait.
			Dispatcher: dispatch.Config{Holder: "outage-test"},
			WrapSink:   p.rec.wrap,
		},
		Partners: partners,
		BeforeRun: func(hp *pipelinetest.Pipeline) {
			p.Pipeline = hp
			if cfg.BeforeRun != nil {
				cfg.BeforeRun(p)
			}
		},
	}
	if cfg.CHProxy {
		hc.ClickHouseVia = func(addr string) string {
			p.proxy = newTCPProxy(t, addr)
			return p.proxy.Addr()
		}
	}
	pipelinetest.Start(t, hc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	if p.dlq, err = dlq.Open(ctx, p.JS, ""); err != nil {
		t.Fatal(err)
	}
	return p
}

// event is the n-th generated event of tenant: products come in pairs of
// versions, p00000 v1, p00000 v2, p00001 v1, …
func event(tenant string, n int) events.Event {
	return events.Event{Tenant: tenant, ProductID: fmt.Sprintf("p%05d", n/2), Version: int64(n%2 + 1), Op: events.OpUpsert,
		OccurredAt: time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(n) * time.Second),
		Payload:    fmt.Appendf(nil, `{"name":"%s product %d","price":%d}`, tenant, n/2, n)}
}

// generate returns the next n events of tenant.
func (p *pipe) generate(tenant string, n int) []events.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]events.Event, n)
	for i := range out {
		out[i] = event(tenant, p.next[tenant])
		p.next[tenant]++
	}
	return out
}

// publish stores evs in PRODUCTS and records them as sent; it returns
// their sequences.
func (p *pipe) publish(ctx context.Context, evs []events.Event) ([]uint64, error) {
	res := p.Publisher.Publish(ctx, evs)
	seqs := make([]uint64, len(res))
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range res {
		if r.Err != nil {
			return nil, fmt.Errorf("publish %s/%s v%d: %w", evs[i].Tenant, evs[i].ProductID, evs[i].Version, r.Err)
		}
		p.sent = append(p.sent, sentEvent{ev: evs[i], seq: r.Seq})
		seqs[i] = r.Seq
	}
	return seqs, nil
}

// traffic publishes perTick events of every tenant each tick until the
// returned stop is called (or the test ends); stop waits for the last
// publish.
func (p *pipe) traffic(tenants []string, tick time.Duration, perTick int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(tick)
		defer tk.Stop()
		for {
			var evs []events.Event
			for _, tn := range tenants {
				evs = append(evs, p.generate(tn, perTick)...)
			}
			if _, err := p.publish(context.WithoutCancel(ctx), evs); err != nil {
				p.t.Errorf("traffic: %v", err)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
		}
	}()
	stop = func() { cancel(); <-done }
	p.t.Cleanup(stop)
	return stop
}

func (p *pipe) sentCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sent)
}

// sentSeqs returns every event sent so far with its sequence.
func (p *pipe) sentSeqs() []sentEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.sent)
}

// rejected says, per destination, which sequences must end as dead letters
// instead of being applied.
type rejected map[string]map[uint64]bool

// expected is what destination dest must hold after everything sent was
// applied: the newest version per product, and every (product, version).
func (p *pipe) expected(dest string, rej rejected) (latest map[[2]string]int64, all map[string]bool) {
	latest, all = map[[2]string]int64{}, map[string]bool{}
	for _, s := range p.sentSeqs() {
		if rej[dest][s.seq] || !slices.Contains(p.dests[s.ev.Tenant], dest) {
			continue
		}
		k := [2]string{s.ev.Tenant, s.ev.ProductID}
		latest[k] = max(latest[k], s.ev.Version)
		all[fmt.Sprintf("%s/%s/v%d", s.ev.Tenant, s.ev.ProductID, s.ev.Version)] = true
	}
	return latest, all
}

// diffLatest describes how got differs from want, "" when equal.
func diffLatest(where string, want, got map[[2]string]int64) string {
	var miss, wrong, extra int
	var first string
	note := func(s string) {
		if first == "" {
			first = s
		}
	}
	for k, v := range want {
		g, ok := got[k]
		switch {
		case !ok:
			miss++
			note(fmt.Sprintf("%s/%s missing (want v%d)", k[0], k[1], v))
		case g != v:
			wrong++
			note(fmt.Sprintf("%s/%s at v%d, want v%d", k[0], k[1], g, v))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			extra++
			note(fmt.Sprintf("%s/%s v%d was never sent there", k[0], k[1], v))
		}
	}
	if miss+wrong+extra == 0 {
		return ""
	}
	return fmt.Sprintf("%s: %d products, want %d: %d missing, %d at a wrong version, %d unexpected (first: %s)",
		where, len(got), len(want), miss, wrong, extra, first)
}

// accounting compares every destination with what was sent, exactly: the
// PostgreSQL catalog, ClickHouse after deduplication (FINAL), each
// partner's receiver, and the recorder (every sent event applied by every
// destination of its tenant, or listed in rej). nil when all match, else
// the first difference or the error that kept it from looking.
func (p *pipe) accounting(ctx context.Context, rej rejected) error {
	// PostgreSQL.
	want, _ := p.expected(tenancy.DestPostgres, rej)
	got, err := testenv.PostgresVersions(ctx, p.Pool, `SELECT tenant_id, product_id, version FROM catalog.products`)
	if err != nil {
		return fmt.Errorf("read catalog.products: %w", err)
	}
	if d := diffLatest("PostgreSQL catalog.products", want, got); d != "" {
		return errors.New(d)
	}

	// ClickHouse: every event once after FINAL, and the newest per product.
	want, wantAll := p.expected(tenancy.DestClickHouse, rej)
	crows, err := p.ClickHouse.Query(ctx, "SELECT tenant_id, product_id, version FROM product_events FINAL")
	if err != nil {
		return fmt.Errorf("read product_events: %w", err)
	}
	gotAll := map[string]int{}
	for crows.Next() {
		var tn, id string
		var v int64
		if err := crows.Scan(&tn, &id, &v); err != nil {
			crows.Close()
			return err
		}
		gotAll[fmt.Sprintf("%s/%s/v%d", tn, id, v)]++
	}
	crows.Close()
	if err := crows.Err(); err != nil {
		return fmt.Errorf("read product_events: %w", err)
	}
	for k := range wantAll {
		if gotAll[k] != 1 {
			return fmt.Errorf("ClickHouse product_events FINAL holds %s %d times, want once (%d rows, want %d)", k, gotAll[k], len(gotAll), len(wantAll))
		}
	}
	for k := range gotAll {
		if !wantAll[k] {
			return fmt.Errorf("ClickHouse product_events holds %s, which was not sent there", k)
		}
	}
	if got, err = testenv.ClickHouseVersions(ctx, p.ClickHouse, "SELECT tenant_id, product_id, version FROM products_latest FINAL"); err != nil {
		return fmt.Errorf("read products_latest: %w", err)
	}
	if d := diffLatest("ClickHouse products_latest FINAL", want, got); d != "" {
		return errors.New(d)
	}

	// Every partner's receiver.
	for name, r := range p.Receivers {
		dest := tenancy.DestB2BPrefix + name
		want, _ := p.expected(dest, rej)
		got := map[[2]string]int64{}
		counts := map[string]int{} // tenant → products
		for k := range want {
			counts[k[0]]++
			if s, ok := r.Get(k[0], k[1]); ok {
				got[k] = s.Version
			}
		}
		for tn, n := range counts {
			if held := r.Products(tn); held != n {
				return fmt.Errorf("partner %s holds %d products of %s, want %d", name, held, tn, n)
			}
		}
		if d := diffLatest("partner "+name, want, got); d != "" {
			return errors.New(d)
		}
	}

	// The recorder: every event applied by every destination of its tenant.
	for _, s := range p.sentSeqs() {
		for _, dest := range p.dests[s.ev.Tenant] {
			if !rej[dest][s.seq] && !p.rec.isApplied(dest, s.seq) {
				return fmt.Errorf("%s has not applied %s/%s v%d (seq %d)", dest, s.ev.Tenant, s.ev.ProductID, s.ev.Version, s.seq)
			}
		}
	}
	return nil
}

// quiet says why the pipeline is not at rest (nil: it is): a work item
// waiting or out, a slot held (pipelinetest.Pipeline.Quiet), a slot lease
// not released (expired but not swept), an orphaned batch waiting for
// re-dispatch.
func (p *pipe) quiet(ctx context.Context) error {
	if err := p.Quiet(ctx); err != nil {
		return err
	}
	var held, orphans int
	if err := p.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM fairway.slots WHERE expires_at IS NOT NULL),
		(SELECT count(*) FROM fairway.orphans)`).Scan(&held, &orphans); err != nil {
		return fmt.Errorf("slots: %w", err)
	}
	if held > 0 || orphans > 0 {
		return fmt.Errorf("%d slot leases not released (expired, not swept yet), %d orphaned batches waiting", held, orphans)
	}
	return nil
}

// waitDrained waits until every sent event is accounted for in every
// destination and the pipeline is at rest, then checks the dead-letter
// stream holds exactly rej.
func (p *pipe) waitDrained(what string, rej rejected) {
	p.t.Helper()
	wctx, wcancel := context.WithTimeout(context.Background(), waitLimit)
	defer wcancel()
	testenv.Eventually(p.t, waitLimit, what, func() error {
		if err := p.accounting(wctx, rej); err != nil {
			return err
		}
		return p.quiet(wctx)
	})
	// At rest, so nothing more can be dead-lettered.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	letters, err := p.dlq.List(ctx, dlq.Filter{})
	if err != nil {
		p.t.Fatal(err)
	}
	got := rejected{}
	for _, l := range letters {
		if got[l.Dest] == nil {
			got[l.Dest] = map[uint64]bool{}
		}
		if l.Kind != dlq.KindEvent || got[l.Dest][l.SourceSeq] {
			p.t.Errorf("unexpected dead letter %d: kind %s dest %s seq %d: %s (%s)", l.ID, l.Kind, l.Dest, l.SourceSeq, l.Reason, l.Class)
		}
		got[l.Dest][l.SourceSeq] = true
		if !rej[l.Dest][l.SourceSeq] {
			p.t.Errorf("dead letter %d for %s seq %d was not expected: class %s rule %q: %s", l.ID, l.Dest, l.SourceSeq, l.Class, l.Rule, l.Reason)
		}
	}
	for dest, seqs := range rej {
		for seq := range seqs {
			if !got[dest][seq] {
				p.t.Errorf("%s seq %d is not in the dead-letter stream", dest, seq)
			}
		}
	}
	p.t.Logf("%s: %d events sent, all accounted for in %v; %d dead letters", what, p.sentCount(), p.Dests, len(letters))
}

// --- recorder ---------------------------------------------------------

// recorder wraps sinks and remembers every Apply: when it ran, what it
// applied, and when each event was first applied.
type recorder struct {
	mu      sync.Mutex
	applied map[string]map[uint64]applied // dest → seq → first application
	count   map[string]int64              // dest → records applied, repeats included
	calls   map[string][]applyCall
}

type applied struct{ published, at time.Time }

// applyCall is one Sink.Apply.
type applyCall struct {
	start, end time.Time
	seqs       []uint64
	recErr     []error // per record; nil when the call failed as a whole
	err        error
	outcome    sink.Outcome // err's classification, when it failed
}

func newRecorder() *recorder {
	return &recorder{applied: map[string]map[uint64]applied{}, count: map[string]int64{}, calls: map[string][]applyCall{}}
}

func (r *recorder) wrap(s sink.Sink) sink.Sink { return &recordedSink{Sink: s, r: r} }

type recordedSink struct {
	sink.Sink
	r *recorder
}

// Unwrap lets the runner classify with the recorded sink's own rows
// (sink.Wrapper).
func (s *recordedSink) Unwrap() sink.Sink { return s.Sink }

func (s *recordedSink) Apply(ctx context.Context, batch []sink.Record) ([]error, error) {
	start := time.Now()
	errs, err := s.Sink.Apply(ctx, batch)
	end := time.Now()
	c := applyCall{start: start, end: end, err: err, seqs: make([]uint64, len(batch))}
	if err == nil {
		c.recErr = slices.Clone(errs)
	} else {
		c.outcome = sink.Classify(s, err)
	}
	dest := s.Name()
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	m := s.r.applied[dest]
	if m == nil {
		m = map[uint64]applied{}
		s.r.applied[dest] = m
	}
	for i, rec := range batch {
		c.seqs[i] = rec.Seq
		if err != nil || (i < len(errs) && errs[i] != nil) {
			continue
		}
		s.r.count[dest]++
		if _, ok := m[rec.Seq]; !ok {
			m[rec.Seq] = applied{published: rec.PublishedAt, at: end}
		}
	}
	s.r.calls[dest] = append(s.r.calls[dest], c)
	return errs, err
}

func (r *recorder) isApplied(dest string, seq uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.applied[dest][seq]
	return ok
}

// appliedCount is how many records dest applied so far, repeats included.
func (r *recorder) appliedCount(dest string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count[dest]
}

func (r *recorder) callsOf(dest string) []applyCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls[dest])
}

// latency returns p50, p99 and the number of dest's events stored in
// PRODUCTS within [from, to), end to end (stored → first applied).
func (r *recorder) latency(dest string, from, to time.Time) (p50, p99 time.Duration, n int) {
	r.mu.Lock()
	var ds []time.Duration
	for _, a := range r.applied[dest] {
		if !a.published.Before(from) && a.published.Before(to) {
			ds = append(ds, a.at.Sub(a.published))
		}
	}
	r.mu.Unlock()
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	return ds[len(ds)*50/100], ds[min(len(ds)-1, len(ds)*99/100)], len(ds)
}

// caughtUp returns when dest had applied every one of seqs (the latest
// first application), and false if it has not yet.
func (r *recorder) caughtUp(dest string, seqs []uint64) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last time.Time
	for _, s := range seqs {
		a, ok := r.applied[dest][s]
		if !ok {
			return time.Time{}, false
		}
		if a.at.After(last) {
			last = a.at
		}
	}
	return last, true
}

// --- logs ---------------------------------------------------------------

// logBuffer keeps the pipeline's log lines; at cleanup it reports how many
// warnings and errors of each kind were logged, and the lines themselves
// when the test failed or FAIRWAY_OUTAGE_LOGS is set.
type logBuffer struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func newLogBuffer(t *testing.T) *logBuffer { return &logBuffer{t: t} }

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines = append(b.lines, strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// count is how many lines contain every one of parts.
func (b *logBuffer) count(parts ...string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, l := range b.lines {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			n++
		}
	}
	return n
}

func (b *logBuffer) summary() {
	b.mu.Lock()
	defer b.mu.Unlock()
	kinds := map[string]int{}
	for _, l := range b.lines {
		if !strings.Contains(l, "level=WARN") && !strings.Contains(l, "level=ERROR") && !strings.Contains(l, "apply failed; retrying") {
			continue
		}
		msg := l
		if i := strings.Index(l, "msg="); i >= 0 {
			msg = l[i+4:]
			if strings.HasPrefix(msg, `"`) {
				if j := strings.Index(msg[1:], `"`); j >= 0 {
					msg = msg[:j+2]
				}
			} else if j := strings.IndexByte(msg, ' '); j >= 0 {
				msg = msg[:j]
			}
		}
		if strings.Contains(l, `msg="apply failed; retrying"`) {
			kinds["INFO apply retried: "+field(l, "dest")+" "+field(l, "class")]++
			continue
		}
		lv := "WARN"
		if strings.Contains(l, "level=ERROR") {
			lv = "ERROR"
		}
		kinds[lv+" "+msg]++
	}
	keys := make([]string, 0, len(kinds))
	for k := range kinds {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.t.Logf("pipeline log: %4d × %s", kinds[k], k)
	}
	if b.t.Failed() || os.Getenv("FAIRWAY_OUTAGE_LOGS") != "" {
		b.t.Logf("pipeline log, %d lines:\n%s", len(b.lines), strings.Join(b.lines, "\n"))
	}
}

// field returns key=value of a text log line.
func field(line, key string) string {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return key + "=?"
	}
	v := line[i+1:]
	if j := strings.IndexByte(v, ' '); j >= 0 {
		v = v[:j]
	}
	return v
}

// applyTimes returns p50 and p99 of dest's successful Apply calls that
// started within [from, to), and how many there were.
func (r *recorder) applyTimes(dest string, from, to time.Time) (p50, p99 time.Duration, n int) {
	r.mu.Lock()
	var ds []time.Duration
	for _, c := range r.calls[dest] {
		if c.err == nil && !c.start.Before(from) && c.start.Before(to) {
			ds = append(ds, c.end.Sub(c.start))
		}
	}
	r.mu.Unlock()
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	return ds[len(ds)*50/100], ds[min(len(ds)-1, len(ds)*99/100)], len(ds)
}
