package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/runner"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/internal/work"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/sinks/clickhouse"
)

// Events → work item → applied → lease released → WORK message acked, for
// several tenants, with older versions arriving after newer ones.
func TestEndToEndPostgres(t *testing.T) {
	t.Parallel()
	for _, timed := range []bool{false, true} {
		t.Run(fmt.Sprintf("timed=%v", timed), func(t *testing.T) {
			t.Parallel()
			testEndToEndPostgres(t, timed)
		})
	}
}

// testEndToEndPostgres runs with items that carry store times (read without headers)
// and without.
func testEndToEndPostgres(t *testing.T, timed bool) {
	e := setup(t)
	e.timed = timed
	r, reg := e.start(e.pg, e.fastConfig())
	total := 0
	var acme uint64
	for _, tenant := range []string{"acme", "globex", "initech"} {
		evs := []events.Event{upsert(tenant, "a", 2), upsert(tenant, "a", 1), upsert(tenant, "b", 1), upsert(tenant, "c", 3)}
		seqs := e.publish(evs...)
		if tenant == "acme" {
			acme = seqs[0]
		}
		e.dispatch(tenant, "postgres", len(evs))
		total += len(evs)
	}
	e.drained(r.Config().Consumer)
	// A replayed item applies again (changing nothing) and counts as
	// applied, but its events' age is the replay's, not the pipeline's
	// latency: no end-to-end observations.
	e.dispatchFrom("acme", "postgres", acme, 4, true)
	e.drained(r.Config().Consumer)
	for _, tenant := range []string{"acme", "globex", "initech"} {
		if got := e.version(tenant, "a"); got != 2 {
			t.Errorf("%s/a at version %d, want 2", tenant, got)
		}
		if got := e.rows(tenant); got != 3 {
			t.Errorf("%s: %d rows, want 3", tenant, got)
		}
		if n := e.inUse(tenant, "postgres"); n != 0 {
			t.Errorf("%s: %d slots in use after the item, want 0 (released)", tenant, n)
		}
	}
	if got := counter(t, reg, "fairway_sink_applied_events_total", "dest", "postgres"); got != float64(total+4) {
		t.Errorf("applied metric %v, want %d", got, total+4)
	}
	if got := counter(t, reg, "fairway_sink_end_to_end_seconds", "dest", "postgres"); got != float64(total) {
		t.Errorf("end-to-end observations %v, want %d (none for the replayed item)", got, total)
	}
	if got := counter(t, reg, "fairway_sink_items_total", "outcome", "done"); got != 4 {
		t.Errorf("items done %v, want 4", got)
	}
	if ls := e.letters(dlq.Filter{}); len(ls) != 0 {
		t.Errorf("%d dead letters, want none", len(ls))
	}
}

func TestEndToEndClickHouse(t *testing.T) {
	t.Parallel()
	e := setup(t)
	addr, db := testenv.NewClickHouseDatabase(t)
	s, err := clickhouse.New(context.Background(), &clickhouse.Config{Addr: addr, Database: db})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	r, _ := e.start(s, e.fastConfig())
	evs := []events.Event{upsert("acme", "a", 1), upsert("acme", "a", 2), upsert("acme", "b", 1)}
	e.publish(evs...)
	e.dispatch("acme", "clickhouse", len(evs))
	e.drained(r.Config().Consumer)
	conn, err := ch.Open(&ch.Options{Addr: []string{addr}, Auth: ch.Auth{Database: db}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var n uint64
	var latest int64
	if err := conn.QueryRow(context.Background(), "SELECT count() FROM product_events FINAL WHERE tenant_id = 'acme'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(context.Background(), "SELECT max(version) FROM products_latest FINAL WHERE tenant_id = 'acme' AND product_id = 'a'").Scan(&latest); err != nil {
		t.Fatal(err)
	}
	if n != 3 || latest != 2 {
		t.Fatalf("clickhouse holds %d events, latest version of a %d; want 3 and 2", n, latest)
	}
	if got := e.inUse("acme", "clickhouse"); got != 0 {
		t.Fatalf("%d slots in use, want 0", got)
	}
}

// A transient failure is retried with backoff while the slot stays held,
// then applied.
func TestTransientFailureRetriedHoldingSlot(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var heldDuringRetries atomic.Int64
	w := &wrapSink{inner: e.pg, before: func(ctx context.Context, call int, _ []sink.Record) error {
		if call > 3 {
			return nil
		}
		if n, err := e.store.InUse(ctx, "acme", "postgres"); err == nil && n == 1 {
			heldDuringRetries.Add(1)
		}
		return fmt.Errorf("postgres sink: apply: %w", &pgconn.PgError{Code: "40P01", Message: "deadlock detected"})
	}}
	r, reg := e.start(w, e.fastConfig())
	e.publish(upsert("acme", "a", 1), upsert("acme", "b", 1))
	e.dispatch("acme", "postgres", 2)
	e.drained(r.Config().Consumer)
	if got := w.calls.Load(); got != 4 {
		t.Errorf("Apply called %d times, want 4 (3 failures, then success)", got)
	}
	if got := heldDuringRetries.Load(); got != 3 {
		t.Errorf("slot held during %d of 3 failed attempts", got)
	}
	if got := counter(t, reg, "fairway_sink_retries_total", "class", "transient"); got != 3 {
		t.Errorf("retries metric %v, want 3", got)
	}
	if e.rows("acme") != 2 || e.inUse("acme", "postgres") != 0 {
		t.Errorf("rows %d in use %d, want 2 and 0", e.rows("acme"), e.inUse("acme", "postgres"))
	}
	if ls := e.letters(dlq.Filter{}); len(ls) != 0 {
		t.Errorf("%d dead letters, want none", len(ls))
	}
}

// A poison event goes to the DLQ with its headers; its neighbours are
// applied.
func TestPoisonEventDeadLettered(t *testing.T) {
	t.Parallel()
	for _, timed := range []bool{false, true} {
		t.Run(fmt.Sprintf("timed=%v", timed), func(t *testing.T) {
			t.Parallel()
			testPoisonEventDeadLettered(t, timed)
		})
	}
}

// testPoisonEventDeadLettered: a timed item is read without headers; its letter still
// names the event's subject.
func testPoisonEventDeadLettered(t *testing.T, timed bool) {
	e := setup(t)
	e.timed = timed
	now := time.Date(2030, 5, 6, 7, 8, 9, 0, time.UTC)
	cfg := e.fastConfig()
	cfg.Now = func() time.Time { return now }
	r, reg := e.start(e.pg, cfg)
	poison := upsert("acme", "poison", 1)
	poison.Payload = json.RawMessage(`{"name":"nul \u0000 inside"}`)
	seqs := e.publish(upsert("acme", "a", 1), poison, upsert("acme", "b", 1))
	it := e.dispatch("acme", "postgres", 3)
	e.drained(r.Config().Consumer)
	if e.rows("acme") != 2 || e.version("acme", "a") != 1 || e.version("acme", "b") != 1 {
		t.Fatalf("neighbours not applied: %d rows", e.rows("acme"))
	}
	ls := e.letters(dlq.Filter{Dest: "postgres", Tenant: "acme"})
	if len(ls) != 1 {
		t.Fatalf("%d letters, want 1", len(ls))
	}
	l := ls[0]
	ev, err := events.Decode(l.Data)
	if err != nil || ev.ProductID != "poison" {
		t.Fatalf("letter data is not the poison event: %+v %v", ev, err)
	}
	checks := []struct{ name, got, want string }{
		{"kind", string(l.Kind), "event"},
		{"class", l.Class, "permanent"},
		{"rule", l.Rule, "permanent record error"},
		{"attempts", fmt.Sprint(l.Attempts), "1"},
		{"source seq", fmt.Sprint(l.SourceSeq), fmt.Sprint(seqs[1])},
		{"source stream", l.SourceStream, "PRODUCTS"},
		{"source subject", l.SourceSubject, events.LayoutDefault.StoredSubject("products.acme.upsert")},
		{"first failure", l.FirstFailure.String(), now.String()},
		{"last failure", l.LastFailure.String(), now.String()},
		{"lease", l.Lease, it.LeaseID},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("letter %s = %q, want %q", c.name, c.got, c.want)
		}
	}
	if !strings.Contains(l.Reason, "22P05") {
		t.Errorf("reason %q does not name SQLSTATE 22P05", l.Reason)
	}
	if got := counter(t, reg, "fairway_sink_dead_letters_total", "class", "permanent"); got != 1 {
		t.Errorf("dead letters metric %v, want 1", got)
	}
	if got := counter(t, reg, "fairway_sink_applied_events_total"); got != 2 {
		t.Errorf("applied metric %v, want 2", got)
	}
}

// An unknown error is retried until MaxAttempts, then dead-lettered; the
// item is acked and the lease released.
func TestUnknownErrorDeadLetteredAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := &wrapSink{inner: e.pg, before: func(context.Context, int, []sink.Record) error { return errMystery }}
	r, _ := e.start(w, e.fastConfig()) // MaxAttempts 3
	e.publish(upsert("acme", "a", 1), upsert("acme", "b", 1))
	e.dispatch("acme", "postgres", 2)
	e.drained(r.Config().Consumer)
	if got := w.calls.Load(); got != 3 {
		t.Errorf("Apply called %d times, want 3", got)
	}
	ls := e.letters(dlq.Filter{})
	if len(ls) != 2 {
		t.Fatalf("%d letters, want 2", len(ls))
	}
	for _, l := range ls {
		if l.Class != "unknown" || l.Attempts != 3 || !strings.Contains(l.Reason, "gave up after 3 attempts") || !strings.Contains(l.Reason, errMystery.Error()) {
			t.Errorf("letter %+v: want class unknown, 3 attempts, reason naming the error", l)
		}
	}
	if e.inUse("acme", "postgres") != 0 {
		t.Error("lease not released")
	}
}

// ruledSink is a wrapSink whose own classification row (sink.Classifier)
// judges errMystery permanent.
type ruledSink struct{ *wrapSink }

func (ruledSink) ClassifyRules() []sink.Rule {
	return []sink.Rule{{Name: "mystery is permanent", Class: sink.ClassPermanent, Match: func(err error) bool { return errors.Is(err, errMystery) }}}
}

// The runner classifies with the sink's own rows: an error the generic
// rows do not know is dead-lettered at once, under the sink's row.
func TestSinkRowsClassify(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := &wrapSink{inner: e.pg, before: func(context.Context, int, []sink.Record) error { return errMystery }}
	r, _ := e.start(ruledSink{w}, e.fastConfig()) // MaxAttempts 3
	e.publish(upsert("acme", "a", 1), upsert("acme", "b", 1))
	e.dispatch("acme", "postgres", 2)
	e.drained(r.Config().Consumer)
	if got := w.calls.Load(); got != 1 {
		t.Errorf("Apply called %d times, want 1", got)
	}
	ls := e.letters(dlq.Filter{})
	if len(ls) != 2 {
		t.Fatalf("%d letters, want 2", len(ls))
	}
	for _, l := range ls {
		if l.Class != "permanent" || l.Rule != "mystery is permanent" || l.Attempts != 1 {
			t.Errorf("letter %+v: want class permanent by the sink's row after 1 attempt", l)
		}
	}
}

// pickySink applies its first batch except one record it rejects for good
// and one that fails for an unknown reason (retried); later batches go to
// the inner sink whole. It records the products of every batch.
type pickySink struct {
	inner   sink.Sink
	mu      sync.Mutex
	batches [][]string
}

func (p *pickySink) Name() string { return p.inner.Name() }

func (p *pickySink) Apply(ctx context.Context, batch []sink.Record) ([]error, error) {
	p.mu.Lock()
	ids := make([]string, len(batch))
	for i, r := range batch {
		ids[i] = r.Event.ProductID
	}
	p.batches = append(p.batches, ids)
	first := len(p.batches) == 1
	p.mu.Unlock()
	if !first {
		return p.inner.Apply(ctx, batch)
	}
	errs := make([]error, len(batch))
	var rest []sink.Record
	for i, r := range batch {
		switch r.Event.ProductID {
		case "b":
			errs[i] = sink.Permanent("b is refused", nil)
		case "c":
			errs[i] = errMystery
		default:
			rest = append(rest, r)
		}
	}
	if _, err := p.inner.Apply(ctx, rest); err != nil {
		return nil, err
	}
	return errs, nil
}

// A retry applies only the records that failed and may succeed: not the
// applied ones again, not the dead-lettered one.
func TestRetryAppliesOnlyWhatFailed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	p := &pickySink{inner: e.pg}
	cfg := e.fastConfig()
	cfg.Backoff = runner.Backoff{Initial: time.Millisecond, Max: time.Millisecond, MaxElapsed: time.Minute}
	r, _ := e.start(p, cfg)
	e.publish(upsert("acme", "a", 1), upsert("acme", "b", 1), upsert("acme", "c", 1), upsert("acme", "d", 1))
	e.dispatch("acme", "postgres", 4)
	e.drained(r.Config().Consumer)
	p.mu.Lock()
	got := fmt.Sprint(p.batches)
	p.mu.Unlock()
	if want := "[[a b c d] [c]]"; got != want {
		t.Errorf("batches %s, want %s", got, want)
	}
	if ls := e.letters(dlq.Filter{}); len(ls) != 1 || !strings.Contains(ls[0].Reason, "b is refused") {
		t.Errorf("letters %+v, want one for b", ls)
	}
	if n := e.rows("acme"); n != 3 {
		t.Errorf("%d rows, want 3 (a, c, d)", n)
	}
}

// A stale lease at release (the slot was re-acquired meanwhile) is logged
// and the item acked anyway.
func TestStaleLeaseOnReleaseStillAcked(t *testing.T) {
	t.Parallel()
	e := setup(t)
	w := &wrapSink{inner: e.pg, before: func(ctx context.Context, _ int, b []sink.Record) error {
		// Someone re-acquires the slot while the batch works.
		_, err := e.pool.Exec(ctx, `UPDATE fairway.slots SET epoch = epoch + 1, expires_at = now() + interval '1 hour'
			WHERE tenant = 'acme' AND dest = 'postgres' AND expires_at IS NOT NULL`)
		return err
	}}
	r, reg := e.start(w, e.fastConfig())
	e.publish(upsert("acme", "a", 1))
	e.dispatch("acme", "postgres", 1)
	e.drained(r.Config().Consumer)
	if e.rows("acme") != 1 {
		t.Fatal("event not applied")
	}
	if !strings.Contains(e.logs.String(), "lease was stale at release") {
		t.Errorf("stale release not logged; logs:\n%s", e.logs)
	}
	if got := counter(t, reg, "fairway_sink_stale_leases_total"); got != 1 {
		t.Errorf("stale lease metric %v, want 1", got)
	}
	if n := e.inUse("acme", "postgres"); n != 1 {
		t.Errorf("%d slots in use, want 1: the newer lease must not be released by the stale one", n)
	}
}

// Events that aged out of PRODUCTS are recorded as one range letter; the
// events still there are applied.
func TestAgedOutRangeDeadLettered(t *testing.T) {
	t.Parallel()
	for _, timed := range []bool{false, true} {
		t.Run(fmt.Sprintf("timed=%v", timed), func(t *testing.T) {
			t.Parallel()
			testAgedOutRangeDeadLettered(t, timed)
		})
	}
}

// testAgedOutRangeDeadLettered runs with items that carry store times (read without headers)
// and without.
func testAgedOutRangeDeadLettered(t *testing.T, timed bool) {
	e := setup(t)
	e.timed = timed
	seqs := e.publish(upsert("acme", "a", 1), upsert("acme", "b", 1), upsert("acme", "c", 1), upsert("acme", "d", 1))
	s, _ := e.js.Stream(context.Background(), events.StreamName)
	for _, seq := range seqs[1:3] {
		if err := s.DeleteMsg(context.Background(), seq); err != nil {
			t.Fatal(err)
		}
	}
	it := e.dispatch("acme", "postgres", 4)
	r, _ := e.start(e.pg, e.fastConfig())
	e.drained(r.Config().Consumer)
	if e.rows("acme") != 2 {
		t.Fatalf("%d rows, want the 2 surviving events", e.rows("acme"))
	}
	ls := e.letters(dlq.Filter{})
	if len(ls) != 1 {
		t.Fatalf("%d letters, want 1 range letter", len(ls))
	}
	l := ls[0]
	if l.Kind != dlq.KindRange || l.SourceSeq != it.FromSeq || !strings.Contains(l.Reason, "held 2 of 4") || !strings.Contains(l.Reason, "2 left PRODUCTS") {
		t.Fatalf("letter %+v", l)
	}
	if back, err := work.Decode(l.Data); err != nil || back.LeaseID != it.LeaseID {
		t.Fatalf("range letter data is not the item: %+v %v", back, err)
	}
	if e.inUse("acme", "postgres") != 0 {
		t.Error("lease not released")
	}
}

// An item with store times whose range holds another tenant's event (a
// dispatcher that miscounted) is read without headers, where the event
// cannot be told by its subject: the runner sees its tenant, reads the
// item with headers instead and applies what the header path applies.
func TestBareReadOfAnotherTenantsEvent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.timed = true
	e.publish(upsert("acme", "a", 1), upsert("globex", "g", 1), upsert("acme", "b", 1))
	e.dispatch("acme", "postgres", 3) // claims the range is acme's alone
	r, _ := e.start(e.pg, e.fastConfig())
	e.drained(r.Config().Consumer)
	if got := e.rows("acme"); got != 2 {
		t.Errorf("acme: %d rows, want its 2 events", got)
	}
	if got := e.rows("globex"); got != 0 {
		t.Errorf("globex: %d rows applied from acme's item", got)
	}
	if !strings.Contains(e.logs.String(), "reading them with headers") {
		t.Errorf("no log line about the other tenant's event:\n%s", e.logs)
	}
}

// A malformed work item is terminated with a reason and logged; the item
// behind it is applied.
func TestMalformedItemTerminated(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	if _, err := e.js.Publish(ctx, "work.postgres.acme", []byte(`{"tenant":"acme",`)); err != nil {
		t.Fatal(err)
	}
	wrongDest := work.Item{Tenant: "acme", Dest: "clickhouse", FromSeq: 1, ToSeq: 1, Count: 1, LeaseID: "x"}
	b, _ := json.Marshal(wrongDest)
	if _, err := e.js.Publish(ctx, "work.postgres.acme", b); err != nil {
		t.Fatal(err)
	}
	e.publish(upsert("acme", "a", 1))
	e.dispatch("acme", "postgres", 1)
	cfg := e.fastConfig()
	cfg.Concurrency = 1 // the bad items come first and must not block
	r, reg := e.start(e.pg, cfg)
	e.drained(r.Config().Consumer)
	if e.rows("acme") != 1 {
		t.Fatal("the good item behind the bad ones was not applied")
	}
	if got := counter(t, reg, "fairway_sink_items_total", "outcome", "terminated"); got != 2 {
		t.Errorf("terminated items %v, want 2", got)
	}
	logs := e.logs.String()
	if strings.Count(logs, "malformed work item terminated") != 2 || !strings.Contains(logs, "invalid work item") {
		t.Errorf("logs do not report both malformed items:\n%s", logs)
	}
	cons, _ := e.js.Consumer(ctx, work.StreamName, r.Config().Consumer)
	info, _ := cons.Info(ctx)
	if info.NumRedelivered != 0 {
		t.Errorf("%d items redelivered, want 0", info.NumRedelivered)
	}
}

// Shutdown while an item waits to retry hands it back: not acked, lease
// kept; another runner then applies it.
func TestShutdownHandsBackRetryingItem(t *testing.T) {
	t.Parallel()
	e := setup(t)
	failing := make(chan struct{}, 1)
	w := &wrapSink{inner: e.pg, before: func(context.Context, int, []sink.Record) error {
		select {
		case failing <- struct{}{}:
		default:
		}
		return fmt.Errorf("dial: %w", &pgconn.PgError{Code: "57P01"})
	}}
	cfg := e.fastConfig()
	cfg.Backoff = runnerBackoffSlow
	_, _, stop := e.launch(w, cfg)
	e.publish(upsert("acme", "a", 1))
	e.dispatch("acme", "postgres", 1)
	<-failing
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if e.rows("acme") != 0 || e.inUse("acme", "postgres") != 1 {
		t.Fatalf("after shutdown: rows %d in use %d, want 0 and 1 (handed back, lease kept)", e.rows("acme"), e.inUse("acme", "postgres"))
	}
	r2, _ := e.start(e.pg, e.fastConfig())
	e.drained(r2.Config().Consumer)
	if e.rows("acme") != 1 || e.inUse("acme", "postgres") != 0 {
		t.Fatalf("second runner: rows %d in use %d, want 1 and 0", e.rows("acme"), e.inUse("acme", "postgres"))
	}
}

// Concurrency bounds the Apply calls in flight; ReadAhead more items are
// fetched and read meanwhile (kept alive, not applied), and applied as
// soon as an apply slot frees.
func TestReadAheadKeepsApplyConcurrency(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var running, most atomic.Int64
	unblock := make(chan struct{})
	w := &wrapSink{inner: e.pg, before: func(ctx context.Context, _ int, _ []sink.Record) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case <-unblock:
		case <-ctx.Done():
		}
		return nil
	}}
	tenants := []string{"t1", "t2", "t3", "t4", "t5", "t6"}
	for _, tenant := range tenants {
		e.publish(upsert(tenant, "a", 1))
		e.dispatch(tenant, "postgres", 1)
	}
	cfg := e.fastConfig()
	cfg.Concurrency, cfg.ReadAhead = 2, 2
	r, _ := e.start(w, cfg)
	testenv.Eventually(t, waitMax, "two items applying and two read ahead", func() error {
		c, err := e.js.Consumer(context.Background(), work.StreamName, r.Config().Consumer)
		if err != nil {
			return err
		}
		info, err := c.Info(context.Background())
		if err != nil {
			return err
		}
		if running.Load() != 2 || info.NumAckPending != 4 {
			return fmt.Errorf("%d applying, %d items out, want 2 and 4", running.Load(), info.NumAckPending)
		}
		return nil
	})
	close(unblock)
	e.drained(r.Config().Consumer)
	if got := most.Load(); got != 2 {
		t.Errorf("at most %d Apply calls at once, want 2 (Concurrency)", got)
	}
	for _, tenant := range tenants {
		if e.rows(tenant) != 1 || e.inUse(tenant, "postgres") != 0 {
			t.Errorf("%s: %d rows, %d slots in use, want 1 and 0", tenant, e.rows(tenant), e.inUse(tenant, "postgres"))
		}
	}
}

// Apply's ctx carries the item's CaughtUp (sink.CaughtUp): a sink that
// holds caught-up tenants' items back must know which ones are.
func TestApplyCarriesCaughtUp(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var (
		mu  sync.Mutex
		got = map[string]bool{} // tenant → CaughtUp as the sink saw it
	)
	w := &wrapSink{inner: e.pg, before: func(ctx context.Context, _ int, batch []sink.Record) error {
		mu.Lock()
		got[batch[0].Event.Tenant] = sink.CaughtUp(ctx)
		mu.Unlock()
		return nil
	}}
	r, _ := e.start(w, e.fastConfig())
	for _, tc := range []struct {
		tenant   string
		caughtUp bool
	}{{"behind", false}, {"caught-up", true}} {
		e.publish(upsert(tc.tenant, "a", 1))
		from, err := e.store.Cursor(context.Background(), tc.tenant, "postgres")
		if err != nil {
			t.Fatal(err)
		}
		s, err := e.js.Stream(context.Background(), events.StreamName)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		to := info.State.LastSeq
		l, err := e.store.Dispatch(context.Background(), tc.tenant, "postgres", "test", from, to)
		if err != nil {
			t.Fatal(err)
		}
		e.send(work.Item{Tenant: tc.tenant, Dest: "postgres", FromSeq: from, ToSeq: to, Count: 1, LeaseID: l.ID, Token: l.Token,
			DispatchedAt: time.Now(), CaughtUp: tc.caughtUp})
	}
	e.drained(r.Config().Consumer)
	mu.Lock()
	defer mu.Unlock()
	if want := map[string]bool{"behind": false, "caught-up": true}; !maps.Equal(got, want) {
		t.Errorf("the sink saw CaughtUp %v, want %v", got, want)
	}
}

// A sink whose consumer is gone (deleted, or a NATS server replaced by
// one with an empty store, once WORK is back) creates it again and goes
// on applying.
func TestConsumerGoneIsCreatedAgain(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r, _ := e.start(e.pg, e.fastConfig())
	e.publish(upsert("acme", "a", 1))
	e.dispatch("acme", "postgres", 1)
	e.drained(r.Config().Consumer)
	if err := e.js.DeleteConsumer(context.Background(), work.StreamName, r.Config().Consumer); err != nil {
		t.Fatal(err)
	}
	e.publish(upsert("acme", "b", 1))
	e.dispatch("acme", "postgres", 1)
	testenv.Eventually(t, waitMax, "acme/b applied through a new consumer", func() error {
		if n := e.rows("acme"); n != 2 {
			return fmt.Errorf("%d rows", n)
		}
		return nil
	})
}

// A sink whose consumer was gone for a while (WORK gone with a NATS
// server replaced by an empty one, until the dispatcher creates it again)
// fetches from the consumer it creates again after the first delay of its
// backoff, not after the one its failed fetches grew to meanwhile: an
// item dispatched then is applied within 2 s, where it waited out
// Backoff.Max (here 6 s, at least 3 s with its jitter).
func TestConsumerCreatedAgainFetchesAtOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	cfg := e.fastConfig()
	cfg.Backoff = runner.Backoff{Initial: 100 * time.Millisecond, Multiplier: 10, Max: 6 * time.Second, MaxElapsed: time.Minute}
	e.start(e.pg, cfg)
	ctx := context.Background()
	if err := e.js.DeleteStream(ctx, work.StreamName); err != nil {
		t.Fatal(err)
	}
	const failed = "creating the work consumer again failed"
	// Failures after 0.1 s and 1 s: the next delay is Backoff.Max.
	testenv.Eventually(t, waitMax, "three failed attempts to create the consumer", func() error {
		if n := strings.Count(e.logs.String(), failed); n < 3 {
			return fmt.Errorf("%d so far", n)
		}
		return nil
	})
	if _, err := work.EnsureStream(ctx, e.js, work.StreamConfig{}); err != nil {
		t.Fatal(err)
	}
	const created = "work consumer created again"
	testenv.Eventually(t, waitMax, "the consumer created again", func() error {
		if !strings.Contains(e.logs.String(), created) {
			return errors.New("not yet")
		}
		return nil
	})
	since := time.Now()
	e.publish(upsert("acme", "a", 1))
	e.dispatch("acme", "postgres", 1)
	testenv.Eventually(t, waitMax, "acme/a applied", func() error {
		if n := e.rows("acme"); n != 1 {
			return fmt.Errorf("%d rows", n)
		}
		return nil
	})
	if took := time.Since(since); took > 2*time.Second {
		t.Errorf("the item was applied %s after the consumer was created again, want within 2s", took.Round(time.Millisecond))
	}
}
