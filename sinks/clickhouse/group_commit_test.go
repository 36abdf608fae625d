package clickhouse_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/internal/sink/sinktest"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/sinks/clickhouse"
)

// waitQueued waits until n applies are queued behind s's round.
func waitQueued(t *testing.T, s *clickhouse.Sink, n int) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, fmt.Sprintf("%d applies queued", n), func() error {
		if q := clickhouse.Queued(s); q != n {
			return fmt.Errorf("%d queued", q)
		}
		return nil
	})
}

// rawCount counts the rows of table without deduplication: a row inserted
// twice counts twice.
func (r reader) rawCount(t *testing.T, table string) int {
	t.Helper()
	var n uint64
	if err := r.conn.QueryRow(t.Context(), "SELECT count() FROM "+table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return int(n)
}

// hook is an insert hook that records the records of every round and can
// hold a round at a gate.
type hook struct {
	mu      sync.Mutex
	rounds  [][]string // product ids of each round, in order
	entered chan int   // receives the round number as a round enters the hook
	gates   map[int]chan struct{}
	fail    func(round int, recs []sink.Record) error
}

func newHook(gated ...int) *hook {
	h := &hook{entered: make(chan int, 100), gates: map[int]chan struct{}{}}
	for _, n := range gated {
		h.gates[n] = make(chan struct{})
	}
	return h
}

func (h *hook) install(s *clickhouse.Sink) {
	clickhouse.SetInsertHook(s, func(ctx context.Context, recs []sink.Record) error {
		ids := make([]string, len(recs))
		for i, r := range recs {
			ids[i] = r.Event.ProductID
		}
		h.mu.Lock()
		h.rounds = append(h.rounds, ids)
		n := len(h.rounds)
		gate := h.gates[n]
		h.mu.Unlock()
		h.entered <- n
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if h.fail != nil {
			return h.fail(n, recs)
		}
		return nil
	})
}

func (h *hook) open(n int) { close(h.gates[n]) }

func (h *hook) waitEntered(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-h.entered:
			if got == n {
				return
			}
		case <-timeout:
			t.Fatalf("insert round %d never started", n)
		}
	}
}

func (h *hook) sizes() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]int, len(h.rounds))
	for i, r := range h.rounds {
		out[i] = len(r)
	}
	return out
}

func (h *hook) saw(productID string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.rounds {
		if slices.Contains(r, productID) {
			return true
		}
	}
	return false
}

type result struct {
	errs []error
	err  error
}

// applyAsync applies one upsert of productID in a goroutine.
func applyAsync(ctx context.Context, s *clickhouse.Sink, productIDs ...string) <-chan result {
	ch := make(chan result, 1)
	var evs []events.Event
	for _, id := range productIDs {
		evs = append(evs, sinktest.Upsert("acme", id, 1))
	}
	go func() {
		errs, err := s.Apply(ctx, sinktest.Records(evs...))
		ch <- result{errs, err}
	}()
	return ch
}

func wantApplied(t *testing.T, name string, c <-chan result) {
	t.Helper()
	select {
	case r := <-c:
		if r.err != nil {
			t.Fatalf("%s: Apply: %v", name, r.err)
		}
		for i, e := range r.errs {
			if e != nil {
				t.Fatalf("%s: record %d: %v", name, i, e)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: Apply did not return", name)
	}
}

func get(t *testing.T, name string, c <-chan result) result {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: Apply did not return", name)
	}
	return result{}
}

// Many goroutines applying one-record batches at once share INSERTs, and
// every row lands exactly once.
func TestGroupCommitCoalesces(t *testing.T) {
	t.Parallel()
	s, r := setup(t, clickhouse.Config{})
	const workers, each = 32, 20
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				e := sinktest.Upsert(fmt.Sprintf("tenant-%02d", w%12), fmt.Sprintf("w%02d-p%03d", w, i), int64(i+1))
				errs, err := s.Apply(t.Context(), sinktest.Records(e))
				if err != nil || errs[0] != nil {
					failed.Add(1)
					t.Errorf("worker %d apply %d: %v %v", w, i, errs, err)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.FailNow()
	}
	const applies = workers * each
	inserts := clickhouse.Inserts(s)
	t.Logf("%d applies in %d insert rounds (%.1f items per round)", applies, inserts, float64(applies)/float64(inserts))
	if inserts > applies/2 {
		t.Errorf("%d insert rounds for %d concurrent applies, want at most %d: concurrent applies are not combined", inserts, applies, applies/2)
	}
	for _, table := range []string{"product_events", "products_latest"} {
		if n := r.rawCount(t, table); n != applies {
			t.Errorf("%s holds %d rows, want %d (each row exactly once)", table, n, applies)
		}
	}
	for w := range workers {
		for _, i := range []int{0, each - 1} {
			st, ok, err := r.Get(t.Context(), fmt.Sprintf("tenant-%02d", w%12), fmt.Sprintf("w%02d-p%03d", w, i))
			if err != nil || !ok || st.Version != int64(i+1) {
				t.Errorf("worker %d product %d: %+v %v %v", w, i, st, ok, err)
			}
		}
	}
}

// With group commit off every Apply is its own insert round.
func TestGroupCommitOff(t *testing.T) {
	t.Parallel()
	s, r := setup(t, clickhouse.Config{GroupRows: -1})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			if errs, err := s.Apply(t.Context(), sinktest.Records(sinktest.Upsert("acme", fmt.Sprintf("p%d", i), 1))); err != nil || errs[0] != nil {
				t.Errorf("apply %d: %v %v", i, errs, err)
			}
		})
	}
	wg.Wait()
	if n := clickhouse.Inserts(s); n != 8 {
		t.Errorf("%d insert rounds for 8 applies with group commit off, want 8", n)
	}
	if n := r.rawCount(t, "product_events"); n != 8 {
		t.Errorf("product_events holds %d rows, want 8", n)
	}
}

// queueBehind holds the first insert round (one record, "first") at its gate
// and queues the given applies behind it, one after the other, so their
// order in the queue is known.
func queueBehind(t *testing.T, s *clickhouse.Sink, h *hook, applies ...func() <-chan result) (first <-chan result, rest []<-chan result) {
	t.Helper()
	first = applyAsync(t.Context(), s, "first")
	h.waitEntered(t, 1)
	for i, a := range applies {
		rest = append(rest, a())
		waitQueued(t, s, i+1)
	}
	return first, rest
}

// A combined insert that fails because of one member's rows: every member
// is retried alone once, so the others land and only the bad one fails.
func TestGroupCommitIsolatesFailingMember(t *testing.T) {
	t.Parallel()
	s, r := setup(t, clickhouse.Config{})
	h := newHook(1)
	rejected := errors.New("injected: row rejected")
	h.fail = func(_ int, recs []sink.Record) error {
		for _, rec := range recs {
			if rec.Event.ProductID == "reject" {
				return rejected
			}
		}
		return nil
	}
	h.install(s)
	app := func(id string) func() <-chan result {
		return func() <-chan result { return applyAsync(t.Context(), s, id) }
	}
	first, rest := queueBehind(t, s, h, app("good-1"), app("reject"), app("good-2"))
	h.open(1)
	wantApplied(t, "first", first)
	wantApplied(t, "good-1", rest[0])
	wantApplied(t, "good-2", rest[2])
	bad := get(t, "reject", rest[1])
	if !errors.Is(bad.err, rejected) || bad.errs != nil {
		t.Fatalf("reject: Apply = %v, %v; want the injected error as a batch error", bad.errs, bad.err)
	}
	sizes := h.sizes()
	slices.Sort(sizes[2:])
	if !slices.Equal(sizes, []int{1, 3, 1, 1, 1}) {
		t.Errorf("insert rounds carried %v records, want [1 3 1 1 1]: first, the combined three, each alone", sizes)
	}
	for _, id := range []string{"first", "good-1", "good-2"} {
		if _, ok, err := r.Get(t.Context(), "acme", id); err != nil || !ok {
			t.Errorf("Get(%s) = %v, %v; want stored", id, ok, err)
		}
	}
	if _, ok, err := r.Get(t.Context(), "acme", "reject"); err != nil || ok {
		t.Errorf("Get(reject) = %v, %v; want not stored", ok, err)
	}
}

// A transient failure of a combined insert (too many parts) is the server's,
// not one member's: every member gets it as is, without retrying alone.
func TestGroupCommitTransientFailureGoesToAll(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, clickhouse.Config{})
	h := newHook(1)
	h.fail = func(round int, _ []sink.Record) error {
		if round == 2 {
			return &ch.Exception{Code: 252, Name: "DB::Exception", Message: "Too many parts"}
		}
		return nil
	}
	h.install(s)
	app := func(id string) func() <-chan result {
		return func() <-chan result { return applyAsync(t.Context(), s, id) }
	}
	first, rest := queueBehind(t, s, h, app("a"), app("b"), app("c"))
	h.open(1)
	wantApplied(t, "first", first)
	for i, c := range rest {
		got := get(t, fmt.Sprint(i), c)
		if got.err == nil || sink.Classify(s, got.err).Class != sink.ClassTransient {
			t.Errorf("member %d: Apply error %v, want the transient too-many-parts error", i, got.err)
		}
	}
	if sizes := h.sizes(); !slices.Equal(sizes, []int{1, 3}) {
		t.Errorf("insert rounds carried %v records, want [1 3]: no member retried alone", sizes)
	}
}

// An Apply whose ctx ends while it is queued leaves the queue at once with
// the ctx error, and its rows are never inserted.
func TestGroupCommitCanceledWhileQueued(t *testing.T) {
	t.Parallel()
	s, r := setup(t, clickhouse.Config{})
	h := newHook(1)
	h.install(s)
	ctx, cancel := context.WithCancel(t.Context())
	first, rest := queueBehind(t, s, h,
		func() <-chan result { return applyAsync(ctx, s, "canceled") },
		func() <-chan result { return applyAsync(t.Context(), s, "kept") })
	cancel()
	got := get(t, "canceled", rest[0]) // returns while the first round is still held
	if !errors.Is(got.err, context.Canceled) || got.errs != nil {
		t.Fatalf("canceled: Apply = %v, %v; want context.Canceled", got.errs, got.err)
	}
	if n := clickhouse.Queued(s); n != 1 {
		t.Errorf("%d applies queued after the cancel, want 1", n)
	}
	h.open(1)
	wantApplied(t, "first", first)
	wantApplied(t, "kept", rest[1])
	if h.saw("canceled") {
		t.Errorf("the canceled apply's record reached an insert: rounds %v", h.sizes())
	}
	if _, ok, err := r.Get(t.Context(), "acme", "canceled"); err != nil || ok {
		t.Errorf("Get(canceled) = %v, %v; want not stored", ok, err)
	}
}

// An Apply whose rows are already in a running combined insert waits for
// that insert's result when its ctx ends; the insert goes on for the other
// members.
func TestGroupCommitCanceledInFlightWaits(t *testing.T) {
	t.Parallel()
	s, r := setup(t, clickhouse.Config{})
	h := newHook(1, 2)
	h.install(s)
	ctx, cancel := context.WithCancel(t.Context())
	first, rest := queueBehind(t, s, h,
		func() <-chan result { return applyAsync(ctx, s, "leaving") },
		func() <-chan result { return applyAsync(t.Context(), s, "staying") })
	h.open(1)
	wantApplied(t, "first", first)
	h.waitEntered(t, 2) // both are in round 2, held at its gate
	cancel()
	select {
	case got := <-rest[0]:
		t.Fatalf("leaving: Apply returned %v, %v while its insert was still running", got.errs, got.err)
	case <-time.After(100 * time.Millisecond):
	}
	h.open(2)
	wantApplied(t, "leaving", rest[0])
	wantApplied(t, "staying", rest[1])
	for _, id := range []string{"leaving", "staying"} {
		if _, ok, err := r.Get(t.Context(), "acme", id); err != nil || !ok {
			t.Errorf("Get(%s) = %v, %v; want stored", id, ok, err)
		}
	}
}

// When every member of a running insert has given up (a lone Apply whose
// ctx ends, say on shutdown), the insert is cancelled.
func TestGroupCommitCanceledAloneCancelsInsert(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, clickhouse.Config{})
	h := newHook(1)
	h.install(s)
	ctx, cancel := context.WithCancel(t.Context())
	c := applyAsync(ctx, s, "alone")
	h.waitEntered(t, 1)
	cancel()
	got := get(t, "alone", c)
	if !errors.Is(got.err, context.Canceled) {
		t.Fatalf("alone: Apply = %v, %v; want context.Canceled", got.errs, got.err)
	}
}

// A combined insert stays within GroupRows; an apply bigger than GroupRows
// goes alone.
func TestGroupCommitRowCap(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, clickhouse.Config{GroupRows: 3})
	h := newHook(1)
	h.install(s)
	app := func(ids ...string) func() <-chan result {
		return func() <-chan result { return applyAsync(t.Context(), s, ids...) }
	}
	first, rest := queueBehind(t, s, h, app("a1", "a2"), app("b1", "b2"), app("c1", "c2", "c3", "c4", "c5"), app("d1"))
	h.open(1)
	wantApplied(t, "first", first)
	for i, c := range rest {
		wantApplied(t, fmt.Sprint(i), c)
	}
	// Oldest first while the rows fit: a (2) + d (1); then b (2), as c
	// does not fit with it; then c alone.
	if sizes := h.sizes(); !slices.Equal(sizes, []int{1, 3, 2, 5}) {
		t.Errorf("insert rounds carried %v records, want [1 3 2 5]", sizes)
	}
}

// A lone caller never waits for the linger, however long it is and however
// big its batch: nothing else is on its way. After a combined round, the
// next round waits for its members to come back — once.
func TestGroupCommitLinger(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, clickhouse.Config{Linger: clickhouse.LingerMax})
	for i := range 3 {
		var evs []events.Event
		for j := range 2000 {
			evs = append(evs, sinktest.Upsert("acme", fmt.Sprintf("p%d-%d", i, j), 1))
		}
		if _, err := s.Apply(t.Context(), sinktest.Records(evs...)); err != nil {
			t.Fatal(err)
		}
	}
	if n := clickhouse.Lingers(s); n != 0 {
		t.Fatalf("%d rounds of a lone caller lingered, want none", n)
	}

	// A round of three, then one of them alone: its round lingers (the
	// other two may be on their way back), and the next does not.
	h := newHook(1)
	h.install(s)
	app := func(id string) func() <-chan result {
		return func() <-chan result { return applyAsync(t.Context(), s, id) }
	}
	first, rest := queueBehind(t, s, h, app("a"), app("b"), app("c"))
	h.open(1)
	wantApplied(t, "first", first)
	for i, c := range rest {
		wantApplied(t, fmt.Sprint(i), c)
	}
	for i := range 2 {
		if errs, err := s.Apply(t.Context(), sinktest.Records(sinktest.Upsert("acme", fmt.Sprintf("alone-%d", i), 1))); err != nil || errs[0] != nil {
			t.Fatalf("alone %d: %v %v", i, errs, err)
		}
	}
	if n := clickhouse.Lingers(s); n != 1 {
		t.Errorf("%d rounds lingered, want 1 (the first after the round of three)", n)
	}
}

// Close fails what is queued with ErrClosed.
func TestGroupCommitClose(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, clickhouse.Config{})
	h := newHook(1)
	h.install(s)
	first, rest := queueBehind(t, s, h, func() <-chan result { return applyAsync(t.Context(), s, "queued") })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := get(t, "queued", rest[0]); !errors.Is(got.err, clickhouse.ErrClosed) {
		t.Errorf("queued: Apply = %v, %v; want ErrClosed", got.errs, got.err)
	}
	if got := get(t, "first", first); got.err == nil {
		t.Errorf("first: Apply = %v, nil; want the cancelled insert's error", got.errs)
	}
	if _, err := s.Apply(t.Context(), sinktest.Records(sinktest.Upsert("acme", "late", 1))); !errors.Is(err, clickhouse.ErrClosed) {
		t.Errorf("Apply after Close = %v, want ErrClosed", err)
	}
}

// applyHinted applies upserts of productIDs in a goroutine, with ctx
// saying whether the item's tenant is caught up (sink.CaughtUp).
func applyHinted(ctx context.Context, s *clickhouse.Sink, caughtUp bool, productIDs ...string) <-chan result {
	return applyAsync(sink.WithCaughtUp(ctx, caughtUp), s, productIDs...)
}

// Caught-up tenants' items wait to fill a round: until FillRows rows are
// queued, or FillWait has passed for the oldest. An item whose tenant is
// behind or that carries no hint is never held, and ends the wait
// of those queued with it.
func TestGroupCommitFill(t *testing.T) {
	t.Parallel()
	t.Run("alone waits FillWait", func(t *testing.T) {
		t.Parallel()
		const wait = 300 * time.Millisecond
		s, _ := setup(t, clickhouse.Config{FillRows: 100, FillWait: wait})
		start := time.Now()
		wantApplied(t, "caught up", applyHinted(t.Context(), s, true, "a"))
		if took := time.Since(start); took < wait {
			t.Errorf("a caught-up item alone was inserted after %v, want at least FillWait %v", took, wait)
		}
		if n := clickhouse.Fills(s); n != 1 {
			t.Errorf("%d rounds waited to fill, want 1", n)
		}
		wantApplied(t, "behind", applyHinted(t.Context(), s, false, "b"))
		wantApplied(t, "no hint", applyAsync(t.Context(), s, "c"))
		if n := clickhouse.Fills(s); n != 1 {
			t.Errorf("%d rounds waited to fill after a behind and an unhinted item, want still 1", n)
		}
	})
	// A caught-up item waits for FillWait (5 s) until a second one ends
	// the wait: enough rows, or a tenant behind.
	for _, tc := range []struct {
		name     string
		fillRows int
		caughtUp bool // the second item's
		ids      []string
	}{
		{"FillRows ends the wait", 3, true, []string{"b1", "b2"}},
		{"a tenant behind ends the wait", 100, false, []string{"behind"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := setup(t, clickhouse.Config{FillRows: tc.fillRows, FillWait: clickhouse.FillWaitMax})
			h := newHook()
			h.install(s)
			start := time.Now()
			held := applyHinted(t.Context(), s, true, "held")
			waitQueued(t, s, 1) // the caught-up item
			second := applyHinted(t.Context(), s, tc.caughtUp, tc.ids...)
			wantApplied(t, "held", held)
			wantApplied(t, "second", second)
			if took := time.Since(start); took >= clickhouse.FillWaitMax {
				t.Errorf("inserted after %v: the round waited for FillWait", took)
			}
			if sizes, want := h.sizes(), []int{1 + len(tc.ids)}; !slices.Equal(sizes, want) {
				t.Errorf("insert rounds carried %v records, want %v (one round)", sizes, want)
			}
		})
	}
	t.Run("off", func(t *testing.T) {
		t.Parallel()
		s, _ := setup(t, clickhouse.Config{FillWait: -1})
		wantApplied(t, "caught up", applyHinted(t.Context(), s, true, "a"))
		if n := clickhouse.Fills(s); n != 0 {
			t.Errorf("%d rounds waited to fill with FillWait off, want 0", n)
		}
	})
}

// A FillWait above FillWaitMax or FillRows below 1 is a configuration
// error.
func TestFillConfig(t *testing.T) {
	t.Parallel()
	addr, db := testenv.NewClickHouseDatabase(t)
	for _, c := range []clickhouse.Config{{FillWait: clickhouse.FillWaitMax + time.Second}, {FillRows: -1}} {
		c.Addr, c.Database = addr, db
		if s, err := clickhouse.New(t.Context(), &c); !errors.Is(err, clickhouse.ErrConfig) {
			if s != nil {
				s.Close()
			}
			t.Errorf("FillWait %v, FillRows %d: New = %v, want ErrConfig", c.FillWait, c.FillRows, err)
		}
	}
}

// The sink's metrics count the rounds held back to fill and the rows of
// every round.
func TestMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	s, _ := setup(t, clickhouse.Config{FillRows: 100, FillWait: 50 * time.Millisecond, Registerer: reg})
	wantApplied(t, "caught up", applyHinted(t.Context(), s, true, "a", "b"))
	wantApplied(t, "behind", applyHinted(t.Context(), s, false, "c"))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var held float64
	var rounds uint64
	var rows float64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "fairway_sink_clickhouse_held_rounds_total":
				held += m.GetCounter().GetValue()
			case "fairway_sink_clickhouse_insert_rows":
				rounds += m.GetHistogram().GetSampleCount()
				rows += m.GetHistogram().GetSampleSum()
			}
		}
	}
	if held != 1 || rounds != 2 || rows != 3 {
		t.Errorf("held rounds %v, insert rounds %d with %v rows; want 1, 2 and 3", held, rounds, rows)
	}
}
