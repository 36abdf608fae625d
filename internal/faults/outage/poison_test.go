package outage_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairwayhq/fairway/internal/dlq"
	"github.com/fairwayhq/fairway/internal/testenv"
	"github.com/fairwayhq/fairway/pkg/events"
	"github.com/fairwayhq/fairway/pkg/tenancy"
	"github.com/fairwayhq/fairway/sinks/b2b"
)

// Poison product ids.
const (
	// poisonCH happened before 1970: a valid event (years 1..9999) that
	// PostgreSQL and the partner store, but that ClickHouse's DateTime
	// (seconds since 1970 in a UInt32) cannot hold. ClickHouse itself does
	// not refuse it — it silently wraps the value — so the ClickHouse sink
	// refuses it as a permanent record error before inserting.
	poisonCH = "poison-ch"
	// poisonB2B is refused by the partner with 422 Unprocessable Entity.
	poisonB2B = "poison-b2b"
)

// TestPoisonEvents sends, in the middle of one tenant's batch, an event
// ClickHouse cannot store and one the partner answers 422. Each ends in
// the dead-letter stream for that destination only, with its reason and
// class; the rest of its batch, and the poison event in the other
// destinations, land.
func TestPoisonEvents(t *testing.T) {
	t.Parallel()
	tenants := []string{"acme", "globex"}
	const (
		ch = tenancy.DestClickHouse
		b2 = tenancy.DestB2BPrefix + "p1"
	)
	// acme's batch: 40 events with the two poison events inside, stored
	// before the dispatcher starts, so that it finds them as one backlog
	// and hands each destination the poison events inside batches: the
	// whole backlog as one work item, or, when a grant is cut while the
	// start-up backfill is still delivering, as much as it had delivered.
	var evs []events.Event
	var seqs []uint64
	p := startPipeline(t, pipeConfig{Tenants: tenants, Partners: map[string][]string{"p1": tenants},
		Reject: map[string]func(b2b.BodyEvent) bool{"p1": func(e b2b.BodyEvent) bool { return e.ProductID == poisonB2B }},
		BeforeRun: func(p *pipe) {
			evs = p.generate("acme", 38)
			chPoison := event("acme", 0)
			chPoison.ProductID, chPoison.OccurredAt = poisonCH, time.Date(1969, 7, 20, 20, 17, 40, 0, time.UTC)
			b2bPoison := event("acme", 0)
			b2bPoison.ProductID = poisonB2B
			evs = slices.Insert(evs, 10, chPoison)
			evs = slices.Insert(evs, 30, b2bPoison)
			var err error
			if seqs, err = p.publish(context.Background(), evs); err != nil {
				t.Fatal(err)
			}
		}})
	chSeq, b2bSeq := seqs[10], seqs[30]
	rej := rejected{ch: {chSeq: true}, b2: {b2bSeq: true}}

	// Both tenants go on publishing; then drain: everything else lands
	// everywhere, and the DLQ holds exactly the two letters.
	stopTraffic := p.traffic(tenants, 500*time.Millisecond, 4)
	testenv.Eventually(t, waitLimit, "traffic after the poison", func() error {
		if p.sentCount() < len(evs)+80 {
			return errors.New("publishing")
		}
		return nil
	})
	stopTraffic()
	p.waitDrained("after the poison events", rej)

	// Each poison event was refused inside its batch; its neighbours in
	// that same Apply call were applied.
	for _, c := range []struct {
		dest string
		seq  uint64
	}{{ch, chSeq}, {b2, b2bSeq}} {
		var call *applyCall
		for _, x := range p.rec.callsOf(c.dest) {
			if x.err == nil && slices.Contains(x.seqs, c.seq) {
				call = &x
				break
			}
		}
		if call == nil {
			t.Errorf("%s: no Apply call returned record results for seq %d", c.dest, c.seq)
			continue
		}
		for i, s := range call.seqs {
			if (s == c.seq) != (call.recErr[i] != nil) {
				t.Errorf("%s: in the batch of %d holding seq %d, seq %d got %v", c.dest, len(call.seqs), c.seq, s, call.recErr[i])
			}
		}
		if len(call.seqs) < 2 {
			t.Errorf("%s: seq %d came alone in its Apply call; want it among its neighbours", c.dest, c.seq)
		}
		t.Logf("%s: seq %d refused in a batch of %d events; the other %d applied by the same call", c.dest, c.seq, len(call.seqs), len(call.seqs)-1)
	}

	// The letters carry the event and say why, in their headers.
	ctx := context.Background()
	letters, err := p.dlq.List(ctx, dlq.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := p.JS.Stream(ctx, dlq.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct {
		product, reason, rule string
	}{
		ch: {poisonCH, "outside ClickHouse DateTime range", "permanent record error"},
		b2: {poisonB2B, "422", "permanent record error"},
	}
	for _, l := range letters {
		w := want[l.Dest]
		raw, err := stream.GetMsg(ctx, l.ID)
		if err != nil {
			t.Fatal(err)
		}
		h := raw.Header
		ev, err := events.Decode(raw.Data)
		if err != nil {
			t.Errorf("letter %d: data is not the event: %v", l.ID, err)
			continue
		}
		if ev.ProductID != w.product || ev.Tenant != "acme" {
			t.Errorf("letter %d for %s holds %s/%s, want acme/%s", l.ID, l.Dest, ev.Tenant, ev.ProductID, w.product)
		}
		if got := h.Get(dlq.HeaderClass); got != "permanent" {
			t.Errorf("letter %d for %s: %s %q, want permanent", l.ID, l.Dest, dlq.HeaderClass, got)
		}
		if got := h.Get(dlq.HeaderReason); !strings.Contains(got, w.reason) {
			t.Errorf("letter %d for %s: %s %q, want it to mention %q", l.ID, l.Dest, dlq.HeaderReason, got, w.reason)
		}
		if got := h.Get(dlq.HeaderRule); got != w.rule {
			t.Errorf("letter %d for %s: %s %q, want %q", l.ID, l.Dest, dlq.HeaderRule, got, w.rule)
		}
		t.Logf("dead letter %d: %s %s/%s seq %s: class %s, rule %q, attempts %s, reason %q", l.ID, l.Dest, ev.Tenant, ev.ProductID,
			h.Get(dlq.HeaderSourceSeq), h.Get(dlq.HeaderClass), h.Get(dlq.HeaderRule), h.Get(dlq.HeaderAttempts), h.Get(dlq.HeaderReason))
	}
}
