package runner_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/sink"
	"github.com/fairwayhq/fairway/pkg/events"
)

// deleteFromProducts removes seqs from PRODUCTS, so that a runner that
// reads them finds them gone.
func (e *env) deleteFromProducts(seqs ...uint64) {
	e.t.Helper()
	s, err := e.js.Stream(context.Background(), events.StreamName)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, seq := range seqs {
		if err := s.DeleteMsg(context.Background(), seq); err != nil {
			e.t.Fatalf("delete seq %d: %v", seq, err)
		}
	}
}

// An item that carries its events' bodies is applied from them: its
// events are gone from PRODUCTS before the runner starts, the runner asks
// PRODUCTS for nothing, and every event is applied with its store time as
// its publish time. An item without bodies behind it is read from
// PRODUCTS, which shows that the count of reads sees them.
func TestCarriedItemReadsNothingFromProducts(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.carried = true
	del := upsert("acme", "gone", 2)
	del.Op, del.Payload = events.OpDelete, nil
	seqs := e.publish(upsert("acme", "a", 2), upsert("globex", "g", 1), upsert("acme", "a", 1),
		upsert("acme", "gone", 1), upsert("globex", "h", 1), del)
	acme := []uint64{seqs[0], seqs[2], seqs[3], seqs[5]}
	it := e.dispatch("acme", "postgres", len(acme))
	stored := map[uint64]time.Time{} // seq → when PRODUCTS stored it, to the millisecond
	for _, b := range it.Bodies {
		stored[b.Seq] = time.UnixMilli(b.StoredMs).UTC()
	}
	e.deleteFromProducts(acme...)
	reads := e.productsReads()

	var (
		mu        sync.Mutex
		published = map[uint64]time.Time{}
	)
	w := &wrapSink{inner: e.pg, before: func(_ context.Context, _ int, batch []sink.Record) error {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range batch {
			published[r.Seq] = r.PublishedAt
		}
		return nil
	}}
	r, reg := e.start(w, e.fastConfig())
	e.drained(r.Config().Consumer)
	if n := reads.Load(); n != 0 {
		t.Errorf("the runner made %d reads of PRODUCTS for an item carrying its events, want none", n)
	}
	if e.version("acme", "a") != 2 || e.rows("acme") != 2 || e.rows("globex") != 0 {
		t.Errorf("acme: %d rows, a at version %d; globex %d rows; want 2, 2 and 0", e.rows("acme"), e.version("acme", "a"), e.rows("globex"))
	}
	var deleted bool
	if err := e.pool.QueryRow(context.Background(), `SELECT deleted FROM catalog.products WHERE tenant_id = 'acme' AND product_id = 'gone'`).Scan(&deleted); err != nil || !deleted {
		t.Errorf("acme/gone deleted %v (%v), want the delete applied", deleted, err)
	}
	mu.Lock()
	for _, seq := range acme {
		if got, want := published[seq], stored[seq]; !got.Equal(want) || want.IsZero() {
			t.Errorf("seq %d applied as published at %v, want %v (its store time)", seq, got, want)
		}
	}
	mu.Unlock()
	if got := counter(t, reg, "fairway_sink_read_events_total", "mode", "carried"); got != float64(len(acme)) {
		t.Errorf("read events carried %v, want %d", got, len(acme))
	}
	if ls := e.letters(dlq.Filter{}); len(ls) != 0 {
		t.Errorf("%d dead letters, want none: %+v", len(ls), ls)
	}
	if e.inUse("acme", "postgres") != 0 {
		t.Error("lease not released")
	}

	e.carried = false
	e.dispatch("globex", "postgres", 2)
	e.drained(r.Config().Consumer)
	if e.rows("globex") != 2 || reads.Load() == 0 {
		t.Fatalf("globex: %d rows, %d reads of PRODUCTS; want 2 rows read from PRODUCTS", e.rows("globex"), reads.Load())
	}
}

// A carried body that names another tenant or op than its subject is
// dead-lettered as permanent under the item's tenant, with the subject
// and the headers it was stored with (read from PRODUCTS for the letter);
// the item's other events are applied.
func TestCarriedBodyOfAnotherTenantDeadLettered(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.carried = true
	ctx := context.Background()
	e.publish(upsert("acme", "a", 1))
	forge := func(subject, id string, ev events.Event) uint64 {
		data, err := ev.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg(subject)
		m.Data = data
		m.Header.Set(events.HeaderRequestID, id)
		ack, err := e.js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	// A publisher allowed acme's subjects writes bodies that say otherwise.
	other := forge("products.acme.upsert", "req-tenant", upsert("globex", "g", 1))
	notDelete := forge("products.acme.delete", "req-op", upsert("acme", "c", 1))
	e.publish(upsert("acme", "b", 1))
	it := e.dispatch("acme", "postgres", 4)
	r, reg := e.start(e.pg, e.fastConfig())
	e.drained(r.Config().Consumer)

	if e.rows("acme") != 2 || e.version("acme", "a") != 1 || e.version("acme", "b") != 1 || e.rows("globex") != 0 {
		t.Fatalf("acme %d rows, globex %d; want acme's a and b only", e.rows("acme"), e.rows("globex"))
	}
	ls := e.letters(dlq.Filter{Dest: "postgres"})
	if len(ls) != 2 {
		t.Fatalf("%d letters, want 2: %+v", len(ls), ls)
	}
	bySeq := map[uint64]dlq.Letter{}
	for _, l := range ls {
		bySeq[l.SourceSeq] = l
	}
	for _, want := range []struct {
		seq                  uint64
		rule, subject, reqID string
		product              string
	}{
		{other, string(events.MismatchTenant), "products.acme.upsert", "req-tenant", "g"},
		{notDelete, string(events.MismatchOp), "products.acme.delete", "req-op", "c"},
	} {
		l, ok := bySeq[want.seq]
		if !ok {
			t.Errorf("no letter for seq %d", want.seq)
			continue
		}
		ev, err := events.Decode(l.Data)
		checks := []struct{ name, got, want string }{
			{"kind", string(l.Kind), string(dlq.KindEvent)},
			{"tenant", l.Tenant, "acme"},
			{"class", l.Class, sink.ClassPermanent.String()},
			{"rule", l.Rule, want.rule},
			{"source subject", l.SourceSubject, events.LayoutDefault.StoredSubject(want.subject)},
			{"request id", l.Header.Get(events.HeaderRequestID), want.reqID},
			{"lease", l.Lease, it.LeaseID},
			{"data", fmt.Sprint(ev.ProductID, err), fmt.Sprint(want.product, nil)},
		}
		for _, c := range checks {
			if c.got != c.want {
				t.Errorf("letter of seq %d: %s = %q, want %q", want.seq, c.name, c.got, c.want)
			}
		}
		if !strings.Contains(l.Reason, want.rule) {
			t.Errorf("letter of seq %d: reason %q does not say %q", want.seq, l.Reason, want.rule)
		}
	}
	if got := counter(t, reg, "fairway_sink_read_events_total", "mode", "carried"); got != 4 {
		t.Errorf("read events carried %v, want 4", got)
	}
}

// A carried item delivered again (its first runner stopped mid-apply and
// handed it back) is applied again from its bodies, with the same result:
// nothing read from PRODUCTS to apply it, versions kept, the lease
// released.
func TestCarriedItemRedeliveredAppliesIdempotently(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.carried = true
	seqs := e.publish(upsert("acme", "a", 3), upsert("acme", "a", 1), upsert("acme", "b", 1))
	e.dispatch("acme", "postgres", 3)
	e.deleteFromProducts(seqs...)

	applied := make(chan struct{}, 1)
	w := &wrapSink{inner: e.pg, before: func(ctx context.Context, _ int, batch []sink.Record) error {
		if _, err := e.pg.Apply(ctx, batch); err != nil {
			return err
		}
		select {
		case applied <- struct{}{}:
		default:
		}
		<-ctx.Done() // held until the runner gives up on it
		return ctx.Err()
	}}
	cfg := e.fastConfig()
	cfg.ShutdownGrace = 50 * time.Millisecond
	_, _, stop := e.launch(w, cfg)
	select {
	case <-applied:
	case <-time.After(60 * time.Second):
		_ = stop()
		t.Fatalf("the first runner never applied the item; rows %d, letters %+v", e.rows("acme"), e.letters(dlq.Filter{}))
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if e.rows("acme") != 2 || e.inUse("acme", "postgres") != 1 {
		t.Fatalf("after the first delivery: %d rows, %d slots in use; want 2 and 1 (applied, handed back)", e.rows("acme"), e.inUse("acme", "postgres"))
	}

	// The first runner's log line about the item handed back names its
	// request ids, which it reads from PRODUCTS (they are gone): count
	// the second runner's reads only.
	reads := e.productsReads()
	r2, reg := e.start(e.pg, e.fastConfig())
	e.drained(r2.Config().Consumer)
	if e.rows("acme") != 2 || e.version("acme", "a") != 3 || e.version("acme", "b") != 1 {
		t.Errorf("after the redelivery: %d rows, a at %d, b at %d; want 2, 3 and 1", e.rows("acme"), e.version("acme", "a"), e.version("acme", "b"))
	}
	if e.inUse("acme", "postgres") != 0 {
		t.Error("lease not released")
	}
	if got := counter(t, reg, "fairway_sink_applied_events_total"); got != 3 {
		t.Errorf("applied on redelivery %v, want 3", got)
	}
	if got := counter(t, reg, "fairway_sink_read_events_total", "mode", "carried"); got != 3 {
		t.Errorf("read events carried on redelivery %v, want 3", got)
	}
	if n := reads.Load(); n != 0 {
		t.Errorf("%d reads of PRODUCTS, want none", n)
	}
	if ls := e.letters(dlq.Filter{}); len(ls) != 0 {
		t.Errorf("%d dead letters, want none: %+v", len(ls), ls)
	}
}
